// Every IR op is lowered, or decomposable into ops that are, for every backend and ONNX profile:
// a primitive needs a lowering rule; a high-level op needs a rule or a reference decomposition
// (and a reference decomposition whenever its rule may decline a node).
//
// Recurrences (decided for the state-space and hybrid decoders): there is no kernel-only op class.
// A recurrence with a closed form over a symbolic length is built from primitives (Mamba2's chunked
// SSD: CumSum, Exp, MatMul; a causal convolution with its state: Concat, Gather, Mul) and so has a
// reference decomposition like every high-level op here. One that must carry state from chunk to
// chunk over a run-time count (the gated delta rule's inter-chunk state) will be a `Scan` primitive
// with a body graph, which each backend lowers natively (ONNX Scan, OpenVINO TensorIterator, the
// .pt2 scan higher-order op); ExecuTorch, with no loop over a run-time count, exports the chunk step
// with its state as `replace` state and its runner calls it per chunk. The check below (every
// high-level op has a reference decomposition) is what keeps a recurrence from hiding behind a
// kernel some backend lacks.
#include <gtest/gtest.h>

#include "backends/backend.h"
#include "backends/onnx/lowering.h"
#include "backends/openvino/lowering.h"
#include "backends/pt2/lowering.h"
#ifdef HFX_HAVE_EXECUTORCH
#include "backends/executorch/lowering.h"
#endif
#include "ir/builder.h"
#include "ir/graph.h"
#include "passes/passes.h"

namespace hfx {
namespace {

void check_op(const std::string& backend, OpKind op, bool has_rule, bool may_decline) {
  const std::string_view name = op_name(op);
  if (op_is_state(op)) return;  // lowered by each backend's state pass (StateOpsLeaveEveryPipeline)
  if (!op_is_high_level(op)) {
    EXPECT_TRUE(has_rule) << backend << " cannot lower the primitive " << name;
    return;
  }
  EXPECT_NE(reference_decomposition(op), nullptr) << name << " has no reference decomposition";
  EXPECT_TRUE(has_rule || reference_decomposition(op)) << backend << ": " << name;
  if (may_decline) {
    EXPECT_NE(reference_decomposition(op), nullptr) << backend << " may decline " << name;
  }
}

TEST(LoweringCoverage, EveryOpOnEveryBackendAndProfile) {
  for (size_t i = 0; i < kOpCount; ++i) {
    const auto op = static_cast<OpKind>(i);
    const OnnxOpRule& onnx = onnx_rule(op);
    for (OnnxOpProfile profile : kOnnxProfiles)
      check_op("onnx profile " + std::to_string(static_cast<int>(profile)), op, onnx.lower != nullptr,
               onnx.native != nullptr);
    const OvOpRule& ov = ov_rule(op);
    check_op("openvino", op, ov.lower != nullptr, ov.native != nullptr);
    const Pt2OpRule& pt2 = pt2_rule(op);
    // ShapeOf becomes SymInts (Pt2Lowering::lower_shape_arithmetic), never a tensor op.
    check_op("pt2", op, pt2.lower != nullptr || op == OpKind::ShapeOf, pt2.native != nullptr);
#ifdef HFX_HAVE_EXECUTORCH
    const EtOpRule& et = et_rule(op);
    // ShapeOf becomes Int EValues (EtLowering::lower_shape_arithmetic), never a tensor op.
    check_op("executorch", op, et.lower != nullptr || op == OpKind::ShapeOf, et.native != nullptr);
#endif
  }
}

// The fused ops each backend is expected to keep (a rule silently dropped would decompose them).
TEST(LoweringCoverage, FusedOpsStayFused) {
  for (OpKind op : {OpKind::Linear, OpKind::Embedding, OpKind::RMSNorm, OpKind::LayerNorm, OpKind::RoPE, OpKind::Attention,
                    OpKind::KVAppend, OpKind::QuantizedLinear, OpKind::GELU})
    EXPECT_NE(onnx_rule(op).lower, nullptr) << op_name(op);
  for (OpKind op : {OpKind::Linear, OpKind::Embedding, OpKind::Attention, OpKind::QuantizedLinear, OpKind::GELU})
    EXPECT_NE(ov_rule(op).lower, nullptr) << op_name(op);
  for (OpKind op : {OpKind::Linear, OpKind::Embedding, OpKind::SiLU, OpKind::GELU})
    EXPECT_NE(pt2_rule(op).lower, nullptr) << op_name(op);
}

// A graph with state of both update policies: a decode step appending to a dynamic cache, a
// prefill starting one, and a static cache written at positions.
struct StateGraph {
  Graph g;
  Builder b{g};
  const Symbol* batch = g.symbol("batch", 1, 4);
  const Symbol* past = g.symbol("past", 0, 15);
  const Symbol* total = g.symbol("total", 1, 16);
  Value* x = b.input("x", DType::F32, {batch, 2, 1, 8});
  Value* positions = b.input("position_ids", DType::I64, {batch, 1});

  void append() {
    const int64_t s = b.declare_state({"past_key_values.0.key", StateKind::KeyValue, StateUpdatePolicy::Append,
                                       DType::F32, {batch, 2, past, 8}});
    b.output(b.reduce(OpKind::ReduceMax, b.state_update(s, b.state_read(s), x, nullptr, {batch, 2, total, 8}), {}, false),
             "y");
  }
  void start() {
    const int64_t s = b.declare_state({"past_key_values.0.value", StateKind::KeyValue, StateUpdatePolicy::Append,
                                       DType::F32, {batch, 2, int64_t{0}, 8}});
    b.state_update(s, nullptr, b.unary(OpKind::Neg, x), nullptr, x->shape);
  }
  void slots() {
    const int64_t s = b.declare_state({"past_key_values.1.key", StateKind::KeyValue, StateUpdatePolicy::Slots,
                                       DType::F32, {batch, 2, total, 8}});
    Value* buffer = b.state_read(s);
    b.state_update(s, buffer, x, positions, buffer->shape);
  }
};

bool has_state_ops(const Graph& g) {
  for (const Node* n : g.order)
    if (op_is_state(n->op)) return true;
  return false;
}

TEST(StateLowering, InputsOutputsAndPairs) {
  StateGraph s;
  s.append();
  s.start();
  s.slots();
  EXPECT_EQ(s.g.states.size(), 3u);
  lower_state_as_io(s.g);
  verify(s.g);
  EXPECT_FALSE(has_state_ops(s.g));
  std::vector<std::string> inputs, outputs;
  for (const Value* v : s.g.inputs) inputs.push_back(v->name);
  for (const Value* v : s.g.outputs) outputs.push_back(v->name);
  EXPECT_EQ(inputs, (std::vector<std::string>{"x", "position_ids", "past_key_values.0.key", "input.past_key_values.1.key"}));
  EXPECT_EQ(outputs, (std::vector<std::string>{"y", "present.0.key", "present.0.value", "output.past_key_values.1.key"}));
  ASSERT_EQ(s.g.state_pairs.size(), 3u);
  const StatePair& append = s.g.state_pairs[0];
  EXPECT_EQ(append.output->producer->op, OpKind::KVAppend);
  EXPECT_EQ(append.output->shape[2], Dim(s.total));
  EXPECT_EQ(s.g.state_pairs[1].input, nullptr);  // started by this call: its output is the fresh rows
  EXPECT_EQ(s.g.state_pairs[1].output->producer->op, OpKind::Neg);
  const StatePair& slots = s.g.state_pairs[2];
  EXPECT_EQ(slots.output->producer->op, OpKind::ScatterElements);
  EXPECT_EQ(slots.input->shape, slots.output->shape);  // one buffer can serve both
}

// Every backend's pipeline lowers the state ops it is given (the kinds its capabilities allow).
TEST(StateLowering, StateOpsLeaveEveryPipeline) {
  for (const std::string format : {"onnx", "openvino"}) {
    StateGraph s;
    s.append();
    if (format == "onnx") s.slots();
    const auto backend = make_backend(format);
    ExportConfig config;
    config.format = format;
    PassReport report;
    for (const Pass& pass : backend->passes(backend->graph_config(config))) pass.run(s.g, report);
    verify(s.g);
    EXPECT_FALSE(has_state_ops(s.g)) << format;
    EXPECT_EQ(s.g.state_pairs.size(), s.g.states.size()) << format;
  }
}

}  // namespace
}  // namespace hfx
