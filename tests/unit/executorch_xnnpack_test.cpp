// The XNNPACK delegate of ExecuTorch programs: payload ids, and one delegate per run of the ops
// XNNPACK runs (what the kernels run splits the runs).
#ifdef HFX_HAVE_EXECUTORCH
#include <gtest/gtest.h>

#include <cstring>

#include "backends/executorch/lowering.h"
#include "backends/executorch/xnnpack.h"
#include "backends/weight_file.h"
#include "ir/builder.h"
#include "xnnpack/schema_generated.h"

namespace hfx {
namespace {

const fb_xnnpack::XNNGraph* graph_of(const std::string& payload) {
  uint32_t at = 0;
  std::memcpy(&at, payload.data() + 10, sizeof at);  // XNNHeader: the flatbuffer's offset
  return fb_xnnpack::GetXNNGraph(payload.data() + at);
}

// External ids are the delegate's argument indices: inputs first, in the order defined, then outputs.
TEST(XnnpackPayload, ExternalIdsAreInputsThenOutputs) {
  XnnGraphBuilder g;
  const uint32_t a = g.external_input(XnnFloat::F32, {1, 4});
  const uint32_t y = g.external_output(XnnFloat::F32, {1, 4});
  const uint32_t t = g.internal(XnnFloat::F32, {1, 4});
  const uint32_t b = g.external_input(XnnFloat::F32, {1, 4});
  g.binary(fb_xnnpack::XNodeUnion::XNNAdd, a, b, t);
  g.unary(fb_xnnpack::XNodeUnion::XNNSigmoid, t, y);
  const std::string payload = g.finish();
  const fb_xnnpack::XNNGraph* graph = graph_of(payload);
  ASSERT_EQ(graph->num_externs(), 3u);
  auto external = [&](uint32_t id) { return graph->xvalues()->Get(id)->xvalue_union_as_XNNTensorValue()->external_id(); };
  EXPECT_EQ(external(a), 0u);
  EXPECT_EQ(external(b), 1u);
  EXPECT_EQ(external(y), 2u);
  EXPECT_EQ(external(t), XnnGraphBuilder::kNone);
  EXPECT_EQ(std::vector<uint32_t>(graph->input_ids()->begin(), graph->input_ids()->end()), (std::vector<uint32_t>{a, b}));
  EXPECT_EQ(graph->xnodes()->size(), 2u);
}

// The builder names every scalar "scalar": their named-data keys must still differ (a payload
// reads its constants by key), and one constant is stored once.
TEST(XnnpackPayload, NamedDataKeysAreUnique) {
  Graph graph;
  Builder b(graph);
  Value* eps = b.scalar(1e-6, DType::F32);
  Value* limit = b.scalar(7.0, DType::F32);
  EtConstants constants;
  const std::string k1 = constants.add_named(eps, 4), k2 = constants.add_named(limit, 4);
  EXPECT_NE(k1, k2);
  EXPECT_EQ(constants.add_named(limit, 4), k2);
  EXPECT_EQ(constants.named.size(), 2u);
}

std::vector<std::string> instruction_kinds(const etfb::ExecutionPlanT& plan) {
  std::vector<std::string> kinds;
  for (const auto& ins : plan.chains.at(0)->instructions) {
    if (const auto* call = ins->instr_args.AsKernelCall()) kinds.push_back(plan.operators.at(call->op_index)->name);
    else kinds.push_back("delegate");
  }
  return kinds;
}

// linear -> mul | cast, cast (kernels) | linear: two delegates around the kernels, the first with
// one input and one output (the product the cast reads).
TEST(XnnpackPartition, RunsOfXnnpackOpsAreOneDelegateEach) {
  Graph graph;
  Builder b(graph);
  const Symbol* seq = graph.symbol("sequence", 1, 4);
  Value* x = b.input("x", DType::F32, {1, seq, 8});
  Value* w1 = b.const_f32(std::vector<float>(64, 0.5f), {8, 8});
  Value* w2 = b.const_f32(std::vector<float>(64, 0.25f), {8, 8});
  Value* h = b.linear(x, w1);
  Value* squared = b.mul(h, h);
  Value* round_trip = b.cast(b.cast(squared, DType::F16), DType::F32);
  b.output(b.linear(round_trip, w2), "y");
  EtConstants constants;
  EtLowering lowering(graph, "forward", constants, &WeightFile::stored_bytes, /*xnnpack=*/true);
  lowering.lower_graph();
  const auto plan = lowering.take_plan();
  EXPECT_EQ(instruction_kinds(*plan),
            (std::vector<std::string>{"delegate", "aten::_to_copy", "aten::_to_copy", "delegate"}));
  const auto* first = plan->chains[0]->instructions[0]->instr_args.AsDelegateCall();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->args.size(), 2u);  // x, and the product: h stays inside
  const std::string& payload = constants.segments.at(plan->delegates.at(0)->processed->index - 1).bytes;
  EXPECT_EQ(graph_of(payload)->xnodes()->size(), 2u);  // FullyConnected, Multiply
}

}  // namespace
}  // namespace hfx
#endif
