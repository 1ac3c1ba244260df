// pack_linears: which Linear ops stack, the rewritten graph, and the stacked constant's bytes as
// WeightFile writes them (straight and transposed, with a dtype conversion).
#include <gtest/gtest.h>

#include <map>

#include "backends/weight_file.h"
#include "io/safetensors.h"
#include "ir/builder.h"
#include "passes/passes.h"
#include "test_util.h"

namespace hfx {
namespace {

using test::read_file;
using test::SafetensorsWriter;
using test::TempDir;
using test::values_of;

std::vector<float> iota(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// A checkpoint with q [4, 3], k [2, 3], v [2, 3] (+ biases), o [3, 4] and a lone weight x [5, 3].
struct Checkpoint {
  TempDir dir;
  std::unique_ptr<SafetensorsFile> file;
  Checkpoint() {
    SafetensorsWriter w;
    w.add_f32("attn.q_proj.weight", {4, 3}, iota(12, 0))
        .add_f32("attn.k_proj.weight", {2, 3}, iota(6, 100))
        .add_f32("attn.v_proj.weight", {2, 3}, iota(6, 200))
        .add_f32("attn.q_proj.bias", {4}, iota(4, 10))
        .add_f32("attn.k_proj.bias", {2}, iota(2, 110))
        .add_f32("attn.v_proj.bias", {2}, iota(2, 210))
        .add_f32("attn.o_proj.weight", {3, 4}, iota(12, 300))
        .add_f32("other.weight", {5, 3}, iota(15, 400));
    w.write(dir / "m.safetensors");
    file = std::make_unique<SafetensorsFile>(dir / "m.safetensors");
  }
  const TensorInfo& t(const std::string& name) const { return *file->find(name); }
};

struct Graphs {
  Checkpoint ckpt;
  Graph g;
  Builder b{g};
  Value* weight(const std::string& name, DType dtype = DType::F32) { return b.weight(ckpt.t(name), dtype); }
};

TEST(PackLinears, StacksProjectionsOfOneInputAndSlicesTheResult) {
  Graphs f;
  const Symbol* seq = f.g.symbol("seq", 1, 16);
  Value* x = f.b.input("x", DType::F32, {1, seq, 3});
  Value* q = f.b.linear(x, f.weight("attn.q_proj.weight"), f.weight("attn.q_proj.bias"));
  Value* k = f.b.linear(x, f.weight("attn.k_proj.weight"), f.weight("attn.k_proj.bias"));
  Value* v = f.b.linear(x, f.weight("attn.v_proj.weight"), f.weight("attn.v_proj.bias"));
  Value* o = f.b.linear(q, f.weight("attn.o_proj.weight"));  // another input: stays alone
  f.b.output(o, "o");
  f.b.output(k, "k");
  f.b.output(v, "v");
  pack_linears(f.g);
  ASSERT_NO_THROW(verify(f.g));

  std::vector<const Node*> linears;
  for (const Node* n : f.g.order)
    if (n->op == OpKind::Linear) linears.push_back(n);
  ASSERT_EQ(linears.size(), 2u);
  const Node* packed = linears[0];
  EXPECT_EQ(f.g.order.front(), packed);  // inserted before the first member
  EXPECT_EQ(packed->inputs[0], x);
  const Value* w = packed->inputs[1];
  EXPECT_EQ(w->name, "attn.q_proj+k_proj+v_proj.weight");
  EXPECT_EQ(w->shape, Shape({8, 3}));
  EXPECT_EQ(w->constant->src_shape, (std::vector<int64_t>{8, 3}));
  EXPECT_EQ(w->constant->op, ConstantData::Op::Stack);
  ASSERT_EQ(w->constant->args.size(), 3u);
  EXPECT_EQ(w->constant->nbytes(), 8u * 3 * 4);
  ASSERT_EQ(packed->inputs.size(), 3u);
  EXPECT_EQ(packed->inputs[2]->name, "attn.q_proj+k_proj+v_proj.bias");
  EXPECT_EQ(packed->inputs[2]->shape, Shape({8}));
  EXPECT_EQ(packed->outputs[0]->shape, Shape({1, seq, 8}));

  // q, k, v keep their identity: now Slices of the packed result along the last axis.
  const std::map<const Value*, std::pair<int64_t, int64_t>> ranges{{q, {0, 4}}, {k, {4, 6}}, {v, {6, 8}}};
  for (const auto& [value, range] : ranges) {
    const Node* n = value->producer;
    ASSERT_EQ(n->op, OpKind::Slice) << value->name;
    EXPECT_EQ(n->inputs, std::vector<Value*>{packed->outputs[0]});
    EXPECT_EQ(n->attrs_as<SliceAttrs>().axis, 2);
    EXPECT_EQ(n->attrs_as<SliceAttrs>().start, range.first);
    EXPECT_EQ(n->attrs_as<SliceAttrs>().end, range.second);
  }
  EXPECT_EQ(linears[1], o->producer);
  EXPECT_EQ(linears[1]->inputs[1]->name, "attn.o_proj.weight");
}

TEST(PackLinears, LeavesAloneWhatCannotStack) {
  Graphs f;
  Value* x = f.b.input("x", DType::F32, {2, 3});
  // Bias on one but not the other, a weight also read elsewhere, and a different target dtype.
  Value* a = f.b.linear(x, f.weight("attn.q_proj.weight"), f.weight("attn.q_proj.bias"));
  Value* b = f.b.linear(x, f.weight("attn.k_proj.weight"));
  Value* shared = f.weight("other.weight");
  Value* c = f.b.linear(x, shared);
  Value* c2 = f.b.linear(x, f.weight("attn.v_proj.weight", DType::F16));
  Value* gathered = f.b.gather(shared, f.b.const_i64({0}, {1}), 0);
  for (Value* out : {a, b, c, c2, gathered}) f.b.output(out, "y" + std::to_string(out->id));
  const size_t nodes = f.g.order.size();
  pack_linears(f.g);
  EXPECT_EQ(f.g.order.size(), nodes);
  for (const Node* n : f.g.order) EXPECT_NE(n->op, OpKind::Slice);

  // Owned (non-checkpoint) weights never stack.
  Graph g;
  Builder gb(g);
  Value* y = gb.input("x", DType::F32, {2, 3});
  gb.output(gb.linear(y, gb.const_f32(iota(6, 0), {2, 3})), "p");
  gb.output(gb.linear(y, gb.const_f32(iota(6, 9), {2, 3})), "r");
  pack_linears(g);
  EXPECT_EQ(g.order.size(), 2u);
}

TEST(PackLinears, StackedConstantStreamsPartsInOrder) {
  Graphs f;
  Value* x = f.b.input("x", DType::F32, {1, 3});
  f.b.output(f.b.linear(x, f.weight("attn.q_proj.weight", DType::F16)), "q");
  f.b.output(f.b.linear(x, f.weight("attn.k_proj.weight", DType::F16)), "k");
  f.b.output(f.b.linear(x, f.weight("attn.v_proj.weight", DType::F16)), "v");
  pack_linears(f.g);
  const Value* w = f.g.order.front()->inputs[1];
  ASSERT_EQ(w->constant->args.size(), 3u);

  std::vector<float> stacked = iota(12, 0);  // rows of q, then k, then v: [8, 3]
  for (float s : {100.0f, 200.0f})
    for (float e : iota(6, s)) stacked.push_back(e);
  const auto path = f.ckpt.dir / "w.data";
  WeightFile wf(path, 64);
  const auto straight = wf.append(*w, false);
  const auto transposed = wf.append(*w, true);
  wf.close();
  const std::string data = read_file(path);
  const auto got = values_of<uint16_t>(data.substr(straight.offset, straight.length));
  const auto got_t = values_of<uint16_t>(data.substr(transposed.offset, transposed.length));
  ASSERT_EQ(got.size(), 24u);
  ASSERT_EQ(got_t.size(), 24u);
  for (size_t r = 0; r < 8; ++r)
    for (size_t c = 0; c < 3; ++c) {
      EXPECT_EQ(got[r * 3 + c], f32_to_f16(stacked[r * 3 + c])) << r << "," << c;
      EXPECT_EQ(got_t[c * 8 + r], f32_to_f16(stacked[r * 3 + c])) << r << "," << c;
    }
  // A stacked constant has no contiguous bytes to hand out.
  EXPECT_THROW(w->constant->bytes(), Error);
}

}  // namespace
}  // namespace hfx
