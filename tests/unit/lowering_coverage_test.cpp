// Every IR op is lowered, or decomposable into ops that are, for every backend and ONNX profile:
// a primitive needs a lowering rule; a high-level op needs a rule or a reference decomposition
// (and a reference decomposition whenever its rule may decline a node).
#include <gtest/gtest.h>

#include "backends/onnx/lowering.h"
#include "backends/openvino/lowering.h"
#include "ir/graph.h"
#include "passes/passes.h"

namespace hfx {
namespace {

void check_op(const std::string& backend, OpKind op, bool has_rule, bool may_decline) {
  const std::string_view name = op_name(op);
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
  }
}

// The fused ops each backend is expected to keep (a rule silently dropped would decompose them).
TEST(LoweringCoverage, FusedOpsStayFused) {
  for (OpKind op : {OpKind::Linear, OpKind::Embedding, OpKind::RMSNorm, OpKind::RoPE, OpKind::Attention,
                    OpKind::KVAppend, OpKind::QuantizedLinear, OpKind::GELU})
    EXPECT_NE(onnx_rule(op).lower, nullptr) << op_name(op);
  for (OpKind op : {OpKind::Linear, OpKind::Embedding, OpKind::Attention, OpKind::QuantizedLinear, OpKind::GELU})
    EXPECT_NE(ov_rule(op).lower, nullptr) << op_name(op);
}

}  // namespace
}  // namespace hfx
