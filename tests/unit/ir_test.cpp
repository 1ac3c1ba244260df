// The IR: Builder shape inference, the verifier, and the decompose / dead-code passes.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "core/error.h"
#include "ir/builder.h"
#include "ir/graph.h"
#include "passes/passes.h"
#include "test_util.h"

namespace hfx {
namespace {

using test::error_of;

// A graph with the usual symbols, and a Builder on it.
struct Fixture {
  Graph g;
  Builder b{g};
  const Symbol* batch = g.symbol("batch", 1, 64);
  const Symbol* seq = g.symbol("seq", 1, 4096);
  const Symbol* kv = g.symbol("kv_seq", 1, 4096);
};

Shape S(std::initializer_list<Dim> dims) { return Shape(dims); }

// --- Builder shape inference --------------------------------------------------------------

TEST(Builder, SymbolsAreInternedByName) {
  Fixture f;
  EXPECT_EQ(f.g.symbol("batch", 1, 2), f.batch);  // same name -> same symbol (bounds kept)
  EXPECT_EQ(f.batch->max, 64);
  EXPECT_NE(f.batch, f.seq);
  EXPECT_EQ(Dim(f.batch), Dim(f.batch));
  EXPECT_FALSE(Dim(f.batch) == Dim(f.seq));
  EXPECT_FALSE(Dim(f.batch) == Dim(-1));  // a symbol never equals a constant
  EXPECT_EQ(Dim(3), Dim(3));
  EXPECT_EQ(shape_string(S({f.batch, 4})), "[batch, 4]");
}

TEST(Builder, BroadcastWithSymbolicDims) {
  Fixture f;
  Value* x = f.b.input("x", DType::F32, {f.batch, f.seq, 4});
  Value* y = f.b.input("y", DType::F32, {1, f.seq, 1});
  Value* z = f.b.input("z", DType::F32, {4});
  Value* col = f.b.input("col", DType::F32, {f.batch, 1});
  Value* row = f.b.input("row", DType::F32, {1, f.seq});

  EXPECT_EQ(f.b.add(x, y)->shape, S({f.batch, f.seq, 4}));
  EXPECT_EQ(f.b.mul(y, x)->shape, S({f.batch, f.seq, 4}));
  EXPECT_EQ(f.b.sub(z, x)->shape, S({f.batch, f.seq, 4}));  // rank extension on the left
  EXPECT_EQ(f.b.div(col, row)->shape, S({f.batch, f.seq}));
  EXPECT_EQ(f.b.max(x, x)->shape, S({f.batch, f.seq, 4}));
  EXPECT_EQ(broadcast_shapes({}, S({f.batch, 2})), S({f.batch, 2}));  // scalar

  Value* eq = f.b.compare(OpKind::Less, x, y);
  EXPECT_EQ(eq->dtype, DType::Bool);
  EXPECT_EQ(eq->shape, S({f.batch, f.seq, 4}));

  // Distinct symbols cannot be proven equal, and 3 vs 4 never broadcast.
  EXPECT_HAS(error_of([&] { broadcast_shapes(S({f.batch}), S({f.seq})); }), "cannot broadcast");
  EXPECT_HAS(error_of([&] { broadcast_shapes(S({3}), S({4})); }), "cannot broadcast");
  EXPECT_HAS(error_of([&] { broadcast_shapes(S({f.batch}), S({4})); }), "cannot broadcast");
  Value* half = f.b.input("half", DType::F16, {4});
  EXPECT_HAS(error_of([&] { f.b.add(x, half); }), "dtypes");
}

TEST(Builder, MatMul) {
  Fixture f;
  Value* x = f.b.input("x", DType::F32, {f.batch, f.seq, 4});
  Value* w = f.b.const_f32(std::vector<float>(32, 0.5f), {4, 8});
  Value* mm = f.b.matmul(x, w);
  EXPECT_EQ(mm->shape, S({f.batch, f.seq, 8}));
  EXPECT_EQ(mm->dtype, DType::F32);
  ASSERT_NE(mm->producer, nullptr);
  EXPECT_EQ(mm->producer->op, OpKind::MatMul);
  EXPECT_EQ(mm->producer->inputs, (std::vector<Value*>{x, w}));

  Value* q = f.b.input("q", DType::F32, {f.batch, 2, f.seq, 8});
  Value* kt = f.b.input("kt", DType::F32, {f.batch, 1, 8, f.kv});  // broadcast over heads
  EXPECT_EQ(f.b.matmul(q, kt)->shape, S({f.batch, 2, f.seq, f.kv}));

  Value* bad = f.b.input("bad", DType::F32, {5, 8});
  EXPECT_HAS(error_of([&] { f.b.matmul(x, bad); }), "MatMul inner dims");
  Value* vec = f.b.input("vec", DType::F32, {4});
  EXPECT_HAS(error_of([&] { f.b.matmul(x, vec); }), "MatMul");
}

TEST(Builder, ReshapeTransposeSlice) {
  Fixture f;
  Value* x = f.b.input("x", DType::F16, {f.batch, f.seq, 8});
  Value* r = f.b.reshape(x, {f.batch, f.seq, 2, 4});
  EXPECT_EQ(r->shape, S({f.batch, f.seq, 2, 4}));
  EXPECT_EQ(r->dtype, DType::F16);

  Value* t = f.b.transpose(r, {0, 2, 1, 3});
  EXPECT_EQ(t->shape, S({f.batch, 2, f.seq, 4}));
  EXPECT_EQ(t->producer->attrs_as<PermAttrs>().perm, (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_HAS(error_of([&] { f.b.transpose(r, {1, 0}); }), "perm");

  EXPECT_EQ(f.b.slice(x, -1, 2, 6)->shape, S({f.batch, f.seq, 4}));
  EXPECT_EQ(f.b.slice(x, 2, -3, INT64_MAX)->shape, S({f.batch, f.seq, 3}));  // negative start
  EXPECT_EQ(f.b.slice(x, 2, 0, -2)->shape, S({f.batch, f.seq, 6}));          // negative end
  EXPECT_EQ(f.b.slice(x, 2, 5, 100)->shape, S({f.batch, f.seq, 3}));         // end clamped
  EXPECT_EQ(f.b.slice(x, 2, 6, 2)->shape, S({f.batch, f.seq, Dim(int64_t{0})}));  // empty, not negative
  Value* s = f.b.slice(x, -1, 1, 3);
  EXPECT_EQ(s->producer->attrs_as<SliceAttrs>().axis, 2);  // axis normalised
  EXPECT_EQ(s->producer->attrs_as<SliceAttrs>().start, 1);
  EXPECT_EQ(s->producer->attrs_as<SliceAttrs>().end, 3);
  // A symbolic dim can only be sliced whole.
  EXPECT_EQ(f.b.slice(x, 1, 0, INT64_MAX)->shape, x->shape);
  EXPECT_HAS(error_of([&] { f.b.slice(x, 1, 0, 2); }), "symbolic");
  EXPECT_HAS(error_of([&] { f.b.slice(x, 3, 0, 1); }), "axis");
}

TEST(Builder, ConcatUnsqueezeGather) {
  Fixture f;
  Value* a = f.b.input("a", DType::F32, {f.batch, f.seq, 3});
  Value* c = f.b.input("c", DType::F32, {f.batch, f.seq, 5});
  Value* cat = f.b.concat({a, c, a}, -1);
  EXPECT_EQ(cat->shape, S({f.batch, f.seq, 11}));
  EXPECT_EQ(cat->producer->attrs_as<ConcatAttrs>().axis, 2);
  EXPECT_HAS(error_of([&] { f.b.concat({a, a}, 1); }), "symbolic");
  Value* other = f.b.input("other", DType::F32, {f.batch, f.kv, 3});
  EXPECT_HAS(error_of([&] { f.b.concat({a, other}, 2); }), "Concat dims");

  EXPECT_EQ(f.b.unsqueeze(a, {1})->shape, S({f.batch, 1, f.seq, 3}));
  EXPECT_EQ(f.b.unsqueeze(a, {0, -1})->shape, S({1, f.batch, f.seq, 3, 1}));
  Value* u = f.b.unsqueeze(a, {-1, 0});
  EXPECT_EQ(u->shape, S({1, f.batch, f.seq, 3, 1}));
  EXPECT_EQ(u->producer->attrs_as<AxesAttrs>().axes, (std::vector<int64_t>{0, 4}));  // normalised, sorted

  Value* table = f.b.const_f32(std::vector<float>(40, 1.0f), {10, 4});
  Value* ids = f.b.input("ids", DType::I64, {f.batch, f.seq});
  Value* rows = f.b.gather(table, ids, 0);
  EXPECT_EQ(rows->shape, S({f.batch, f.seq, 4}));
  EXPECT_EQ(rows->dtype, DType::F32);
  Value* idx = f.b.const_i64({0, 2}, {2});
  EXPECT_EQ(f.b.gather(table, idx, -1)->shape, S({10, 2}));
  Value* scalar_idx = f.b.const_i64({1});
  EXPECT_EQ(f.b.gather(a, scalar_idx, 2)->shape, S({f.batch, f.seq}));  // scalar index drops the axis
}

TEST(Builder, ReduceSoftmaxCastAndMisc) {
  Fixture f;
  Value* x = f.b.input("x", DType::F32, {f.batch, f.seq, 8});
  Value* keep = f.b.reduce(OpKind::ReduceMean, x, {-1}, true);
  EXPECT_EQ(keep->shape, S({f.batch, f.seq, 1}));
  EXPECT_EQ(keep->producer->attrs_as<ReduceAttrs>().axes, (std::vector<int64_t>{2}));
  EXPECT_TRUE(keep->producer->attrs_as<ReduceAttrs>().keepdims);
  EXPECT_EQ(f.b.reduce(OpKind::ReduceMax, x, {0, 2}, false)->shape, S({f.seq}));
  EXPECT_EQ(f.b.reduce(OpKind::ReduceMax, x, {}, false)->shape, S({}));  // empty axes: all
  EXPECT_EQ(f.b.reduce(OpKind::ReduceMax, x, {}, true)->shape, S({1, 1, 1}));

  Value* sm = f.b.softmax(x, -1);
  EXPECT_EQ(sm->shape, x->shape);
  EXPECT_EQ(sm->producer->attrs_as<AxisAttrs>().axis, 2);

  EXPECT_EQ(f.b.cast(x, DType::F32), x);  // no-op cast emits nothing
  const size_t nodes = f.g.order.size();
  Value* h = f.b.cast(x, DType::F16);
  EXPECT_EQ(f.g.order.size(), nodes + 1);
  EXPECT_EQ(h->dtype, DType::F16);
  EXPECT_EQ(h->shape, x->shape);

  EXPECT_EQ(f.b.shape_of(x)->shape, S({3}));
  EXPECT_EQ(f.b.shape_of(x)->dtype, DType::I64);
  EXPECT_EQ(f.b.expand(keep, f.b.shape_of(x), {f.batch, f.seq, 8})->shape, x->shape);
  Value* cond = f.b.compare(OpKind::Greater, x, f.b.scalar(0.0, DType::F32));
  EXPECT_EQ(f.b.where(cond, x, f.b.scalar(1.0, DType::F32))->shape, x->shape);
  EXPECT_EQ(f.b.logical_not(cond)->dtype, DType::Bool);
  Value* r = f.b.range(f.b.const_i64({0}), f.b.const_i64({4}), f.b.const_i64({1}), Dim(f.seq));
  EXPECT_EQ(r->shape, S({f.seq}));
  EXPECT_EQ(r->dtype, DType::I64);
}

TEST(Builder, HighLevelOpsAndNaming) {
  Fixture f;
  Value* x = f.b.input("x", DType::F32, {f.batch, f.seq, 4});
  Value* w = f.b.const_f32(std::vector<float>(12, 0.1f), {3, 4});
  f.b.set_scope("model.layers.0.mlp");
  Value* y = f.b.linear(x, w);
  EXPECT_EQ(y->shape, S({f.batch, f.seq, 3}));
  EXPECT_EQ(y->producer->name.rfind("model.layers.0.mlp/Linear_", 0), 0u) << y->producer->name;
  EXPECT_EQ(y->name.rfind("model.layers.0.mlp/Linear_", 0), 0u) << y->name;
  EXPECT_EQ(w->name.rfind("const_", 0), 0u);  // created before the scope was set
  Value* wrong = f.b.const_f32(std::vector<float>(12, 0.1f), {4, 3});
  EXPECT_HAS(error_of([&] { f.b.linear(x, wrong); }), "Linear");

  Value* norm_w = f.b.const_f32({1, 1, 1, 1}, {4});
  Value* n = f.b.rms_norm(x, norm_w, 1e-6);
  EXPECT_EQ(n->shape, x->shape);
  EXPECT_EQ(n->producer->attrs_as<NormAttrs>().epsilon, 1e-6);
  EXPECT_HAS(error_of([&] { f.b.rms_norm(x, w, 1e-6); }), "RMSNorm");

  Value* emb = f.b.embedding(f.b.const_f32(std::vector<float>(20, 0.0f), {5, 4}), f.b.input("ids", DType::I64, {f.batch}));
  EXPECT_EQ(emb->shape, S({f.batch, 4}));

  // Every value name the builder makes is unique.
  std::set<std::string> names;
  for (const Node* node : f.g.order)
    for (const Value* v : node->outputs) EXPECT_TRUE(names.insert(v->name).second) << v->name;
}

// --- verify() ------------------------------------------------------------------------------

// Makes a node with one fresh output without appending it to the order.
Value* detached(Graph& g, OpKind op, std::vector<Value*> inputs, const std::string& name, DType dtype, Shape shape) {
  Node* n = g.new_node(op, std::move(inputs), {}, name);
  Value* out = g.new_value(dtype, std::move(shape), name);
  out->producer = n;
  n->outputs.push_back(out);
  return out;
}

TEST(Verify, AcceptsWellFormedGraph) {
  Fixture f;
  Value* x = f.b.input("x", DType::F32, {f.batch, 4});
  Value* w = f.b.const_f32(std::vector<float>(8, 1.0f), {2, 4});
  Value* y = f.b.silu(f.b.linear(x, w));
  f.b.output(y, "y");
  f.b.output(x, "x");  // an input may also be an output
  EXPECT_NO_THROW(verify(f.g));

  // The same graph assembled by hand.
  Graph g;
  Value* in = g.new_value(DType::F32, {4}, "in");
  g.inputs.push_back(in);
  Value* a = detached(g, OpKind::Neg, {in}, "a", DType::F32, {4});
  Value* b = detached(g, OpKind::Exp, {a}, "b", DType::F32, {4});
  g.order = {a->producer, b->producer};
  g.outputs = {b};
  EXPECT_NO_THROW(verify(g));
}

TEST(Verify, RejectsUseBeforeDefinition) {
  Graph g;
  Value* in = g.new_value(DType::F32, {4}, "in");
  g.inputs.push_back(in);
  Value* a = detached(g, OpKind::Neg, {in}, "a", DType::F32, {4});
  Value* b = detached(g, OpKind::Exp, {a}, "b", DType::F32, {4});
  g.order = {b->producer, a->producer};  // b reads a before a's node runs
  g.outputs = {b};
  const std::string msg = error_of([&] { verify(g); });
  EXPECT_HAS(msg, "IR verifier");
  EXPECT_HAS(msg, "'a'");
  EXPECT_HAS(msg, "before it is defined");

  // A value that is neither an input, a constant nor produced in the order.
  Graph h;
  Value* stray = h.new_value(DType::F32, {4}, "stray");
  Value* c = detached(h, OpKind::Neg, {stray}, "c", DType::F32, {4});
  h.order = {c->producer};
  h.outputs = {c};
  EXPECT_HAS(error_of([&] { verify(h); }), "'stray'");
}

TEST(Verify, RejectsDuplicateValueNames) {
  Graph g;
  Value* in = g.new_value(DType::F32, {4}, "in");
  g.inputs.push_back(in);
  Value* a = detached(g, OpKind::Neg, {in}, "dup", DType::F32, {4});
  Value* b = detached(g, OpKind::Exp, {a}, "dup", DType::F32, {4});
  g.order = {a->producer, b->producer};
  g.outputs = {b};
  const std::string msg = error_of([&] { verify(g); });
  EXPECT_HAS(msg, "duplicate value name");
  EXPECT_HAS(msg, "'dup'");
}

// Regression test (fixed in src/ir/graph.cpp, verify(): `names` only collects node outputs): a graph input and a node
// output sharing a name pass the verifier, yet backends key tensors by name (the ONNX backend
// writes both as "x", an invalid, non-SSA model). Expected: verify() throws "duplicate value name".
TEST(Verify, RejectsNodeOutputNamedLikeGraphInput) {
  Graph g;
  Value* in = g.new_value(DType::F32, {4}, "x");
  g.inputs.push_back(in);
  Value* a = detached(g, OpKind::Neg, {in}, "x", DType::F32, {4});
  g.order = {a->producer};
  g.outputs = {a};
  try {
    verify(g);
    ADD_FAILURE() << "verify() accepted a node output named like the graph input 'x'";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "'x'");
  }
}

TEST(Verify, RejectsOutputNeverProduced) {
  Graph g;
  Value* in = g.new_value(DType::F32, {4}, "in");
  g.inputs.push_back(in);
  Value* a = detached(g, OpKind::Neg, {in}, "a", DType::F32, {4});
  Value* orphan = detached(g, OpKind::Exp, {a}, "orphan", DType::F32, {4});  // never in order
  g.order = {a->producer};
  g.outputs = {a, orphan};
  const std::string msg = error_of([&] { verify(g); });
  EXPECT_HAS(msg, "'orphan'");
  EXPECT_HAS(msg, "never produced");
}

// The verifier re-applies each op's table row: arity, attribute struct, result types.
TEST(Verify, ChecksNodesAgainstTheOpTable) {
  {  // too few inputs
    Graph g;
    Value* in = g.new_value(DType::F32, {4}, "in");
    g.inputs.push_back(in);
    Value* a = detached(g, OpKind::Add, {in}, "a", DType::F32, {4});
    g.order = {a->producer};
    EXPECT_HAS(error_of([&] { verify(g); }), "Add takes 2 inputs, got 1");
  }
  {  // a required input left null
    Graph g;
    Value* in = g.new_value(DType::F32, {2, 4}, "in");
    g.inputs.push_back(in);
    Value* a = detached(g, OpKind::Linear, {in, nullptr}, "a", DType::F32, {2, 4});
    g.order = {a->producer};
    EXPECT_HAS(error_of([&] { verify(g); }), "input 'weight' is missing");
  }
  {  // another op's attributes
    Graph g;
    Value* in = g.new_value(DType::F32, {4}, "in");
    g.inputs.push_back(in);
    Value* a = detached(g, OpKind::Softmax, {in}, "a", DType::F32, {4});
    a->producer->attrs = NormAttrs{};
    g.order = {a->producer};
    EXPECT_HAS(error_of([&] { verify(g); }), "another op's attributes");
    EXPECT_HAS(error_of([&] { a->producer->attrs_as<AxisAttrs>(); }), "Softmax");
  }
  {  // an output type the shape rule does not give (a pass that rewired a node wrongly)
    Graph g;
    Value* in = g.new_value(DType::F32, {4, 8}, "in");
    g.inputs.push_back(in);
    Value* a = detached(g, OpKind::Transpose, {in}, "a", DType::F32, {4, 8});
    a->producer->attrs = PermAttrs{{1, 0}};
    g.order = {a->producer};
    EXPECT_HAS(error_of([&] { verify(g); }), "the op gives float32 [8, 4]");
  }
  {  // dtypes a rule refuses
    Graph g;
    Value* x = g.new_value(DType::F32, {4}, "x");
    Value* y = g.new_value(DType::F16, {4}, "y");
    g.inputs = {x, y};
    Value* a = detached(g, OpKind::Mul, {x, y}, "a", DType::F32, {4});
    g.order = {a->producer};
    EXPECT_HAS(error_of([&] { verify(g); }), "operand dtypes differ");
  }
}

TEST(OpTable, EveryOpHasItsRow) {
  for (size_t i = 0; i < kOpCount; ++i) {
    const OpInfo& info = op_info(static_cast<OpKind>(i));
    EXPECT_FALSE(info.name.empty());
    EXPECT_TRUE(!info.inputs.empty() || info.cls == OpClass::State) << info.name;
    EXPECT_NE(info.infer, nullptr) << info.name;
  }
  EXPECT_TRUE(op_info(OpKind::Linear).inputs.back().optional);        // bias?
  EXPECT_TRUE(op_info(OpKind::Concat).inputs.back().variadic);        // xs...
  EXPECT_EQ(op_info(OpKind::Attention).inputs.at(3).name, "mask");
}

TEST(Verify, RejectsOtherBrokenInvariants) {
  {  // a node listed twice redefines its output
    Graph g;
    Value* in = g.new_value(DType::F32, {4}, "in");
    g.inputs.push_back(in);
    Value* a = detached(g, OpKind::Neg, {in}, "a", DType::F32, {4});
    g.order = {a->producer, a->producer};
    EXPECT_HAS(error_of([&] { verify(g); }), "redefines");
  }
  {  // a node without outputs
    Graph g;
    Value* in = g.new_value(DType::F32, {4}, "in");
    g.inputs.push_back(in);
    g.order = {g.new_node(OpKind::Neg, {in}, {}, "empty")};
    EXPECT_HAS(error_of([&] { verify(g); }), "no outputs");
  }
  {  // an output whose producer pointer names another node
    Graph g;
    Value* in = g.new_value(DType::F32, {4}, "in");
    g.inputs.push_back(in);
    Value* a = detached(g, OpKind::Neg, {in}, "a", DType::F32, {4});
    Value* b = detached(g, OpKind::Neg, {in}, "b", DType::F32, {4});
    Node* b_node = b->producer;
    b->producer = a->producer;
    g.order = {a->producer, b_node};
    EXPECT_HAS(error_of([&] { verify(g); }), "another producer");
  }
  {  // a negative static dim
    Graph g;
    Value* in = g.new_value(DType::F32, {4}, "in");
    g.inputs.push_back(in);
    Value* a = detached(g, OpKind::Reshape, {in}, "a", DType::F32, {-1, 2});
    a->producer->attrs = ShapeAttrs{{-1, 2}};
    g.order = {a->producer};
    EXPECT_HAS(error_of([&] { verify(g); }), "negative dim");
  }
  {  // a constant whose bytes do not match its shape
    Graph g;
    Builder b(g);
    Value* in = b.input("in", DType::F32, {4});
    Value* c = b.constant(std::vector<std::byte>(12), DType::F32, {4}, "short");
    b.add(in, c);
    EXPECT_HAS(error_of([&] { verify(g); }), "holds 12 bytes");
  }
  {  // an input listed twice, and an input with a producer
    Graph g;
    Value* in = g.new_value(DType::F32, {4}, "in");
    g.inputs = {in, in};
    EXPECT_HAS(error_of([&] { verify(g); }), "listed twice");
    Value* a = detached(g, OpKind::Neg, {in}, "a", DType::F32, {4});
    g.inputs = {a};
    EXPECT_HAS(error_of([&] { verify(g); }), "has a producer");
  }
}

// --- decompose() and eliminate_dead_code() ------------------------------------------------

struct Expected {
  std::string name;
  DType dtype;
  Shape shape;
};

std::vector<Expected> outputs_of(const Graph& g) {
  std::vector<Expected> out;
  for (const Value* v : g.outputs) out.push_back({v->name, v->dtype, v->shape});
  return out;
}

// Decomposes everything, then checks: verifier passes, no high-level op remains, the outputs keep
// their names, dtypes and shapes, and every remaining node contributes to an output.
void decompose_and_check(Graph& g) {
  ASSERT_NO_THROW(verify(g));
  const std::vector<Expected> before = outputs_of(g);
  decompose(g, [](const Node&) { return false; });
  eliminate_dead_code(g);
  ASSERT_NO_THROW(verify(g));
  for (const Node* n : g.order) EXPECT_FALSE(op_is_high_level(n->op)) << op_name(n->op) << " " << n->name;
  const std::vector<Expected> after = outputs_of(g);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].name, before[i].name);
    EXPECT_EQ(after[i].dtype, before[i].dtype) << before[i].name;
    EXPECT_EQ(after[i].shape, before[i].shape) << shape_string(after[i].shape) << " vs "
                                               << shape_string(before[i].shape);
  }
  // Liveness: every node's output reaches a graph output.
  std::set<const Value*> live(g.outputs.begin(), g.outputs.end());
  for (auto it = g.order.rbegin(); it != g.order.rend(); ++it) {
    bool used = false;
    for (const Value* o : (*it)->outputs) used = used || live.count(o);
    EXPECT_TRUE(used) << "dead node left: " << (*it)->name;
    for (const Value* in : (*it)->inputs) live.insert(in);
  }
}

TEST(Decompose, RMSNormKeepsDtypeAndShape) {
  for (DType t : {DType::F32, DType::F16}) {
    Fixture f;
    Value* x = f.b.input("x", t, {f.batch, f.seq, 4});
    Value* w = f.b.constant(std::vector<std::byte>(4 * dtype_size(t)), t, {4}, "norm");
    f.b.set_scope("model.norm");
    f.b.output(f.b.rms_norm(x, w, 1e-5), "y");
    decompose_and_check(f.g);
    // Computed in float32 like HF: there is a Cast to f32 when the input is f16.
    bool casts_up = false;
    for (const Node* n : f.g.order) casts_up = casts_up || (n->op == OpKind::Cast && n->outputs[0]->dtype == DType::F32);
    EXPECT_EQ(casts_up, t == DType::F16);
    // Decomposed nodes keep the scope of the op they replace.
    for (const Node* n : f.g.order) EXPECT_EQ(n->name.rfind("model.norm", 0), 0u) << n->name;
  }
}

TEST(Decompose, LayerNormWithAndWithoutBias) {
  for (DType t : {DType::F32, DType::F16}) {
    for (bool with_bias : {true, false}) {
      Fixture f;
      Value* x = f.b.input("x", t, {f.batch, f.seq, 4});
      Value* w = f.b.constant(std::vector<std::byte>(4 * dtype_size(t)), t, {4}, "ln.weight");
      Value* bias = with_bias ? f.b.constant(std::vector<std::byte>(4 * dtype_size(t)), t, {4}, "ln.bias") : nullptr;
      f.b.output(f.b.layer_norm(x, w, bias, 1e-5), "y");
      decompose_and_check(f.g);
      int means = 0, adds = 0;
      for (const Node* n : f.g.order) {
        means += n->op == OpKind::ReduceMean;
        adds += n->op == OpKind::Add;
      }
      EXPECT_EQ(means, 2);                   // the mean, then the variance
      EXPECT_EQ(adds, with_bias ? 2 : 1);    // + eps, + bias
    }
  }
}

TEST(Ir, LayerNormShapeRule) {
  Fixture f;
  Value* x = f.b.input("x", DType::F32, {f.batch, f.seq, 4});
  Value* bad = f.b.constant(std::vector<std::byte>(3 * 4), DType::F32, {3}, "w3");
  EXPECT_HAS(error_of([&] { f.b.layer_norm(x, bad, nullptr, 1e-5); }), "LayerNorm");
}

TEST(Decompose, AttentionGroupedWithMaskAndSoftcap) {
  Fixture f;
  Value* q = f.b.input("q", DType::F32, {f.batch, 4, f.seq, 8});
  Value* k = f.b.input("k", DType::F32, {f.batch, 2, f.kv, 8});
  Value* v = f.b.input("v", DType::F32, {f.batch, 2, f.kv, 8});
  Value* mask = f.b.input("mask", DType::Bool, {f.batch, 1, f.seq, f.kv});
  f.b.output(f.b.attention(q, k, v, mask, {.scale = 0.125, .softcap = 30.0}), "out");
  decompose_and_check(f.g);
  std::multiset<OpKind> ops;
  for (const Node* n : f.g.order) ops.insert(n->op);
  EXPECT_EQ(ops.count(OpKind::Softmax), 1u);
  EXPECT_EQ(ops.count(OpKind::MatMul), 2u);
  EXPECT_EQ(ops.count(OpKind::Tanh), 1u);   // softcap
  EXPECT_EQ(ops.count(OpKind::Where), 1u);  // mask
}

TEST(Decompose, AttentionPlainWithoutMask) {
  Fixture f;
  Value* q = f.b.input("q", DType::F16, {f.batch, 2, f.seq, 8});
  Value* k = f.b.input("k", DType::F16, {f.batch, 2, f.kv, 8});
  Value* v = f.b.input("v", DType::F16, {f.batch, 2, f.kv, 4});
  f.b.output(f.b.attention(q, k, v, nullptr, {.scale = 0.35}), "out");
  decompose_and_check(f.g);
  for (const Node* n : f.g.order) {
    EXPECT_NE(n->op, OpKind::Where);
    EXPECT_NE(n->op, OpKind::Tanh);
  }
}

TEST(Decompose, RoPEFullPartialAndInterleaved) {
  struct Case {
    int64_t rot;
    bool interleaved;
  };
  for (const Case c : {Case{8, false}, Case{4, false}, Case{8, true}, Case{4, true}}) {
    SCOPED_TRACE("rot=" + std::to_string(c.rot) + " interleaved=" + std::to_string(c.interleaved));
    Fixture f;
    Value* x = f.b.input("x", DType::F16, {f.batch, 2, f.seq, 8});
    Value* cos = f.b.input("cos", DType::F32, {f.batch, f.seq, c.rot});
    Value* sin = f.b.input("sin", DType::F32, {f.batch, f.seq, c.rot});
    f.b.output(f.b.rope(x, cos, sin, c.interleaved), "y");
    decompose_and_check(f.g);
  }
}

TEST(Decompose, SiLUGeluLinearEmbedding) {
  Fixture f;
  Value* x = f.b.input("x", DType::F32, {f.batch, 4});
  Value* w = f.b.const_f32(std::vector<float>(12, 0.5f), {3, 4});
  Value* bias = f.b.const_f32({1, 2, 3}, {3});
  Value* table = f.b.const_f32(std::vector<float>(20, 0.0f), {5, 4});
  Value* ids = f.b.input("ids", DType::I64, {f.batch});
  f.b.output(f.b.silu(x), "silu");
  f.b.output(f.b.linear(x, w, bias), "linear_bias");
  f.b.output(f.b.linear(x, w), "linear");
  f.b.output(f.b.gelu(x, GeluApproximation::None), "gelu");
  f.b.output(f.b.gelu(x, GeluApproximation::Tanh), "gelu_tanh");
  f.b.output(f.b.embedding(table, ids), "embed");
  decompose_and_check(f.g);
  // Linear became MatMul against a transposed weight (+ Add for the bias).
  int transposes_of_w = 0;
  for (const Node* n : f.g.order)
    if (n->op == OpKind::Transpose && n->inputs[0] == w) ++transposes_of_w;
  EXPECT_EQ(transposes_of_w, 2);
}

TEST(Decompose, RespectsNativeMappingAndChains) {
  Fixture f;
  Value* x = f.b.input("x", DType::F32, {f.batch, 4});
  Value* w = f.b.const_f32(std::vector<float>(16, 0.5f), {4, 4});
  Value* norm = f.b.const_f32({1, 1, 1, 1}, {4});
  // High-level ops feeding high-level ops: the consumers must read the decomposed values.
  Value* y = f.b.linear(f.b.silu(f.b.rms_norm(x, norm, 1e-6)), w);
  f.b.output(y, "y");
  decompose(f.g, [](const Node& n) { return n.op == OpKind::Linear; });
  ASSERT_NO_THROW(verify(f.g));
  int linears = 0;
  for (const Node* n : f.g.order) {
    if (n->op == OpKind::Linear) ++linears;
    else EXPECT_FALSE(op_is_high_level(n->op)) << op_name(n->op);
  }
  EXPECT_EQ(linears, 1);
  ASSERT_EQ(f.g.outputs.size(), 1u);
  EXPECT_EQ(f.g.outputs[0], y);  // kept natively: the very same value
  EXPECT_EQ(f.g.outputs[0]->name, "y");
  // The Linear now reads the decomposed SiLU (a Mul), not the removed SiLU node's value.
  EXPECT_EQ(y->producer->inputs[0]->producer->op, OpKind::Mul);
}

TEST(DeadCode, RemovesUnusedNodes) {
  Fixture f;
  Value* x = f.b.input("x", DType::F32, {f.batch, 4});
  Value* dead1 = f.b.unary(OpKind::Exp, x);
  f.b.unary(OpKind::Sqrt, dead1);                       // dead chain
  Value* live = f.b.unary(OpKind::Neg, x);
  f.b.unary(OpKind::Tanh, live);                        // dead branch off a live value
  Value* y = f.b.add(live, f.b.const_f32({1, 2, 3, 4}, {4}));
  f.b.output(y, "y");
  ASSERT_EQ(f.g.order.size(), 5u);
  eliminate_dead_code(f.g);
  ASSERT_EQ(f.g.order.size(), 2u);
  EXPECT_EQ(f.g.order[0], live->producer);  // order preserved
  EXPECT_EQ(f.g.order[1], y->producer);
  EXPECT_NO_THROW(verify(f.g));
  // Only constants still used are reported.
  ASSERT_EQ(f.g.constants().size(), 1u);
  EXPECT_EQ(f.g.constants()[0]->shape, S({4}));

  // A graph whose outputs are its inputs keeps nothing.
  Fixture e;
  Value* in = e.b.input("in", DType::F32, {4});
  e.b.unary(OpKind::Neg, in);
  e.g.outputs.push_back(in);
  eliminate_dead_code(e.g);
  EXPECT_TRUE(e.g.order.empty());
  EXPECT_NO_THROW(verify(e.g));
}

}  // namespace
}  // namespace hfx

namespace hfx {
namespace {

TEST(DimArithmetic, FoldsAndInternsExpressions) {
  Graph g;
  const Symbol* s = g.symbol("sequence", 1, 8);
  const Dim plus2 = g.dim(dim_plus(Dim(s), 2));
  EXPECT_EQ(plus2.symbol()->name, "sequence+2");
  EXPECT_EQ(plus2.symbol()->min, 3);
  EXPECT_EQ(plus2.symbol()->max, 10);
  EXPECT_EQ(g.dim(dim_plus(Dim(s), 2)), plus2);             // one expression, one symbol
  EXPECT_EQ(g.dim(dim_plus(plus2, -2)), Dim(s));            // (s + 2) - 2 is s
  EXPECT_EQ(g.dim(dim_plus(g.dim(dim_plus(Dim(s), 1)), 1)), plus2);  // (s + 1) + 1 is s + 2
  EXPECT_EQ(g.dim(dim_times(Dim(3), 4)), Dim(12));
  EXPECT_EQ(g.dim(dim_floordiv(Dim(-3), 2)), Dim(-2));      // floored
  const Dim half = g.dim(dim_floordiv(plus2, 2));
  EXPECT_EQ(half.symbol()->op, Symbol::Op::FloorDiv);
  EXPECT_EQ(half.symbol()->max, 5);
  const Symbol* unbounded = g.symbol("past", 0, INT64_MAX);
  EXPECT_EQ(g.dim(dim_times(Dim(unbounded), 2)).symbol()->max, INT64_MAX);
  EXPECT_EQ(g.dim(dim_plus(Dim(unbounded), Dim(s))).symbol()->name, "past+sequence");
}

TEST(DimArithmetic, ConvAndPadResultsAreDerivedDims) {
  Graph g;
  Builder b(g);
  const Symbol* length = g.symbol("length", 4, 16);
  Value* x = b.input("x", DType::F32, {1, 2, length});
  Value* w = b.const_f32(std::vector<float>(2 * 2 * 3, 0.5f), {2, 2, 3});
  Value* same = b.conv(b.pad(x, {0, 0, 2}, {0, 0, 0}), w, nullptr, {1}, {0}, {1});
  EXPECT_EQ(same->shape[2], Dim(length));  // causal: length + 2 - 3 + 1
  Value* strided = b.conv(x, w, nullptr, {2}, {1}, {1});
  const Symbol* frames = strided->shape[2].symbol();
  ASSERT_NE(frames, nullptr);
  EXPECT_EQ(frames->min, 2);
  EXPECT_EQ(frames->max, 8);  // (16 + 2 - 3) // 2 + 1
  b.output(b.add(same, x), "y");
  b.output(strided, "z");
  EXPECT_NO_THROW(verify(g));
}

}  // namespace
}  // namespace hfx
