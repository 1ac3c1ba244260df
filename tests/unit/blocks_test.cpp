// The shared blocks under their spec variants: fused qkv / gate_up checkpoints read as row ranges of
// one weight, plain (ungated) MLPs, HF module names from the spec, and the checkpoint check that
// every declared weight is present and nothing else is.
#include <gtest/gtest.h>

#include <map>

#include "io/checkpoint.h"
#include "ir/builder.h"
#include "models/blocks.h"
#include "models/model_builder.h"
#include "test_util.h"

namespace hfx {
namespace {

using test::error_of;

// A checkpoint in memory holding zero tensors of the given shapes.
struct Tensors {
  std::map<std::string, std::vector<float>> data;
  std::unique_ptr<Checkpoint> ckpt;
  explicit Tensors(const std::map<std::string, std::vector<int64_t>>& shapes) {
    auto source = std::make_unique<MemoryTensorSource>("test checkpoint");
    for (const auto& [name, shape] : shapes) {
      size_t n = 1;
      for (int64_t d : shape) n *= static_cast<size_t>(d);
      data[name].assign(n, 0.0f);
      source->add(name, DType::F32, shape, data[name].data(), n * 4);
    }
    ckpt = std::make_unique<Checkpoint>(JsonConfig(nlohmann::json::object(), "config"), std::nullopt, std::move(source));
  }
};

const Node* producer_of_linear_weight(const Graph& g, const std::string& scope_part, size_t index) {
  size_t seen = 0;
  for (const Node* n : g.order)
    if (n->op == OpKind::Linear && n->name.find(scope_part) != std::string::npos && seen++ == index) return n;
  return nullptr;
}

std::pair<int64_t, int64_t> row_range(const Value* w) {
  EXPECT_EQ(w->constant->op, ConstantData::Op::SliceRows) << w->name;
  return {w->constant->begin, w->constant->end};
}

struct Built {
  ExportConfig config;
  std::unique_ptr<ModelBuilder> m;
  Value* x;
  explicit Built(const Checkpoint& ckpt) {
    m = std::make_unique<ModelBuilder>(ckpt, config);
    x = m->b().input("x", DType::F32, {1, 3, 8});
  }
  AttentionContext context() {
    return {nullptr, nullptr, nullptr, [](Value* k, Value* v) { return std::make_pair(k, v); }};
  }
};

TEST(Blocks, FusedQkvReadsRowRangesOfOneWeight) {
  // hidden 8, 2 heads x 4, 1 kv head x 4: q 8 rows, k 4, v 4.
  Tensors t({{"attn.qkv_proj.weight", {16, 8}}, {"attn.qkv_proj.bias", {16}}, {"attn.o_proj.weight", {8, 8}}});
  Built b(*t.ckpt);
  AttentionSpec spec{8, 2, 1, 4};
  spec.qkv = "qkv_proj";
  spec.qkv_bias = true;
  attention_block(*b.m, "attn.", spec, b.x, b.context());
  const Graph& g = b.m->graph();
  std::vector<std::pair<int64_t, int64_t>> weights, biases;
  for (size_t i = 0; i < 3; ++i) {
    const Node* n = producer_of_linear_weight(g, "attn", i);
    ASSERT_NE(n, nullptr);
    weights.push_back(row_range(n->inputs[1]));
    biases.push_back(row_range(n->inputs[2]));
    EXPECT_EQ(n->inputs[1]->constant->args[0]->tensor, t.ckpt->find("attn.qkv_proj.weight"));
  }
  const std::vector<std::pair<int64_t, int64_t>> want{{0, 8}, {8, 12}, {12, 16}};
  EXPECT_EQ(weights, want);
  EXPECT_EQ(biases, want);
  EXPECT_NO_THROW(b.m->check_checkpoint());  // nothing missing, nothing unexpected
}

TEST(Blocks, SeparateProjectionsNeedTheirOwnTensors) {
  Tensors t({{"attn.qkv_proj.weight", {16, 8}}, {"attn.o_proj.weight", {8, 8}}});
  Built b(*t.ckpt);
  attention_block(*b.m, "attn.", AttentionSpec{8, 2, 1, 4}, b.x, b.context());
  const std::string msg = error_of([&] { b.m->check_checkpoint(); });
  EXPECT_HAS(msg, "missing tensor 'attn.k_proj.weight'");
  EXPECT_HAS(msg, "more tensor problems");  // q/v missing, qkv unexpected
}

TEST(Blocks, FusedGateUpAndPlainMlps) {
  Tensors fused({{"mlp.gate_up_proj.weight", {24, 8}}, {"mlp.down_proj.weight", {8, 12}}});
  Built b(*fused.ckpt);
  MlpSpec spec{8, 12};
  spec.gate_up = "gate_up_proj";
  gated_mlp(*b.m, "mlp.", spec, b.x);
  EXPECT_EQ(row_range(producer_of_linear_weight(b.m->graph(), "mlp", 0)->inputs[1]), std::make_pair(int64_t{0}, int64_t{12}));
  EXPECT_EQ(row_range(producer_of_linear_weight(b.m->graph(), "mlp", 1)->inputs[1]), std::make_pair(int64_t{12}, int64_t{24}));
  EXPECT_NO_THROW(b.m->check_checkpoint());

  // GPT-2 style: c_fc -> gelu -> c_proj, biases, no gate.
  Tensors plain({{"mlp.c_fc.weight", {12, 8}}, {"mlp.c_fc.bias", {12}}, {"mlp.c_proj.weight", {8, 12}},
                 {"mlp.c_proj.bias", {8}}});
  Built p(*plain.ckpt);
  MlpSpec gpt2{8, 12, true, "gelu_new", false};
  gpt2.up = "c_fc";
  gpt2.down = "c_proj";
  Value* y = gated_mlp(*p.m, "mlp.", gpt2, p.x);
  EXPECT_EQ(y->shape, Shape({1, 3, 8}));
  std::vector<OpKind> ops;
  for (const Node* n : p.m->graph().order) ops.push_back(n->op);
  EXPECT_EQ(ops, (std::vector<OpKind>{OpKind::Linear, OpKind::GELU, OpKind::Linear}));
  EXPECT_NO_THROW(p.m->check_checkpoint());
}

TEST(Blocks, WeightTransformsKeepTheirSource) {
  Tensors t({{"w", {4, 6}}});
  Built b(*t.ckpt);
  Value* w = b.m->weight("w", {4, 6});
  Value* wt = b.m->transposed(w);
  EXPECT_EQ(wt->shape, Shape({6, 4}));
  Value* plus = b.m->plus(w, 1.0);
  EXPECT_EQ(plus->constant->op, ConstantData::Op::AddScalar);
  EXPECT_TRUE(plus->constant->from_checkpoint());
  EXPECT_EQ(b.m->rows(wt, 1, 3)->shape, Shape({2, 4}));
}

}  // namespace
}  // namespace hfx
