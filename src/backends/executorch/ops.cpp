// The ExecuTorch lowering of each IR op, one registered function per op: the runtime's
// `aten::*.out` kernels, with every argument of their schemas in order (defaults written out, as
// the runtime reads arguments by position). High-level ops without a rule here are decomposed
// into primitives first. IR primitives follow ONNX semantics; each rule notes where ATen differs.
#include "backends/aten_semantics.h"
#include "backends/executorch/lowering.h"

#include <limits>

#include "core/error.h"

namespace hfx {
namespace {

#define HFX_ET_BINARY(Op, name, overload) \
  HFX_ET_OP(Op) { l.result(n, name, overload, {l.in(n, 0), l.in(n, 1)}); }
HFX_ET_BINARY(Mul, "aten::mul", "out")
HFX_ET_BINARY(Max, "aten::maximum", "out")
HFX_ET_BINARY(Min, "aten::minimum", "out")
HFX_ET_BINARY(Equal, "aten::eq", "Tensor_out")
HFX_ET_BINARY(Less, "aten::lt", "Tensor_out")
HFX_ET_BINARY(LessOrEqual, "aten::le", "Tensor_out")
HFX_ET_BINARY(Greater, "aten::gt", "Tensor_out")
HFX_ET_BINARY(And, "aten::logical_and", "out")
HFX_ET_BINARY(BitwiseAnd, "aten::bitwise_and", "Tensor_out")
HFX_ET_BINARY(BitShiftRight, "aten::bitwise_right_shift", "Tensor_out")
HFX_ET_BINARY(Pow, "aten::pow", "Tensor_Tensor_out")
#undef HFX_ET_BINARY

// add.out / sub.out take an alpha (1).
HFX_ET_OP(Add) { l.result(n, "aten::add", "out", {l.in(n, 0), l.in(n, 1), l.int_value(1)}); }
HFX_ET_OP(Sub) { l.result(n, "aten::sub", "out", {l.in(n, 0), l.in(n, 1), l.int_value(1)}); }

// ONNX divides integers truncating; div.out would give floats.
HFX_ET_OP(Div) {
  if (is_float(n.outputs[0]->dtype)) return l.result(n, "aten::div", "out", {l.in(n, 0), l.in(n, 1)});
  l.result(n, "aten::div", "out_mode", {l.in(n, 0), l.in(n, 1), l.string_value("trunc")});
}

// a - floor(a / b) * b: the portable remainder.Tensor_out truncates integers (-6 % 5 = -1, torch
// gives 4; executorch 1.5.1, measured).
HFX_ET_OP(Mod) {
  const Value* y = n.outputs[0];
  const std::vector<EtInt> dims = l.bounds(y->shape);
  const int quotient = l.call("aten::div", "out_mode", {l.in(n, 0), l.in(n, 1), l.string_value("floor")}, y->dtype, dims);
  const int multiple = l.call("aten::mul", "out", {quotient, l.in(n, 1)}, y->dtype, dims);
  l.result(n, "aten::sub", "out", {l.in(n, 0), multiple, l.int_value(1)});
}

#define HFX_ET_UNARY(Op, name) \
  HFX_ET_OP(Op) { l.result(n, name, "out", {l.in(n, 0)}); }
HFX_ET_UNARY(Neg, "aten::neg")
HFX_ET_UNARY(Sqrt, "aten::sqrt")
HFX_ET_UNARY(Reciprocal, "aten::reciprocal")
HFX_ET_UNARY(Exp, "aten::exp")
HFX_ET_UNARY(Log, "aten::log")
HFX_ET_UNARY(Tanh, "aten::tanh")
HFX_ET_UNARY(Erf, "aten::erf")
HFX_ET_UNARY(Cos, "aten::cos")
HFX_ET_UNARY(Sin, "aten::sin")
HFX_ET_UNARY(Sigmoid, "aten::sigmoid")
HFX_ET_UNARY(Not, "aten::logical_not")
#undef HFX_ET_UNARY

HFX_ET_OP(GELU) {
  const bool tanh = n.attrs_as<GELUAttrs>().approximate == GeluApproximation::Tanh;
  l.result(n, "aten::gelu", "out", {l.in(n, 0), l.string_value(tanh ? "tanh" : "none")});
}

HFX_ET_OP(Pad) {
  const PadAttrs& p = n.attrs_as<PadAttrs>();
  l.result(n, "aten::constant_pad_nd", "out", {l.in(n, 0), l.int_list(aten_pad_list(p)), l.double_value(p.value)});
}
HFX_ET_OP(Conv) {
  const ConvAttrs& c = n.attrs_as<ConvAttrs>();
  l.result(n, "aten::convolution", "out",
           {l.in(n, 0), l.in(n, 1), n.input(2) ? l.in(n, 2) : l.null_value(), l.int_list(c.strides), l.int_list(c.pads),
            l.int_list(c.dilations), l.bool_value(false), l.int_list(std::vector<int64_t>(c.strides.size(), 0)),
            l.int_value(c.group)});
}

// cumsum.out(self, dim, dtype=None): the result keeps x's type.
HFX_ET_OP(CumSum) { l.result(n, "aten::cumsum", "out", {l.in(n, 0), l.int_value(n.attrs_as<AxisAttrs>().axis), l.null_value()}); }
HFX_ET_OP(Softmax) {
  l.result(n, "aten::_softmax", "out", {l.in(n, 0), l.int_value(n.attrs_as<AxisAttrs>().axis), l.bool_value(false)});
}

// ONNX reduces over every axis when none are given; ATen's dim lists name them.
std::vector<int64_t> reduce_axes(const Node& n) {
  std::vector<int64_t> axes = n.attrs_as<ReduceAttrs>().axes;
  if (axes.empty())
    for (size_t i = 0; i < n.inputs[0]->rank(); ++i) axes.push_back(static_cast<int64_t>(i));
  return axes;
}
HFX_ET_OP(ReduceMean) {
  l.result(n, "aten::mean", "out", {l.in(n, 0), l.int_list(reduce_axes(n)),
                                    l.bool_value(n.attrs_as<ReduceAttrs>().keepdims), l.null_value()});
}
HFX_ET_OP(ReduceSum) {
  l.result(n, "aten::sum", "IntList_out", {l.in(n, 0), l.int_list(reduce_axes(n)),
                                           l.bool_value(n.attrs_as<ReduceAttrs>().keepdims), l.null_value()});
}
HFX_ET_OP(ReduceMax) {
  l.result(n, "aten::amax", "out",
           {l.in(n, 0), l.int_list(reduce_axes(n)), l.bool_value(n.attrs_as<ReduceAttrs>().keepdims)});
}

// topk.values writes (values, indices); the IR op keeps one of them.
HFX_ET_OP(TopK) {
  const TopKAttrs& a = n.attrs_as<TopKAttrs>();
  const Value* y = n.outputs[0];
  const int values = l.new_tensor(n.inputs[0]->dtype, l.bounds(y->shape));
  const int indices = l.new_tensor(DType::I64, l.bounds(y->shape));
  l.kernel("aten::topk", "values",
           {l.in(n, 0), l.int_value(a.k), l.int_value(-1), l.bool_value(true), l.bool_value(true)}, {values, indices});
  l.define(y, a.indices ? indices : values);
}

HFX_ET_OP(Cast) { l.result(n, "aten::_to_copy", "out", {l.in(n, 0), l.bool_value(false), l.null_value()}); }

// Tensors here are contiguous, so a reshape is a view of the same memory.
HFX_ET_OP(Reshape) {
  const Value* y = n.outputs[0];
  l.define(y, l.view(l.in(n, 0), l.sym_ints(n.attrs_as<ShapeAttrs>().shape), y->dtype));
}

// The Expand's shape input is shape arithmetic; its result's dims say the same.
HFX_ET_OP(Expand) {
  l.result(n, "aten::expand_copy", "out",
           {l.in(n, 0), l.sym_list(n.attrs_as<ShapeAttrs>().shape), l.bool_value(false)});
}

HFX_ET_OP(Transpose) {
  l.result(n, "aten::permute_copy", "out", {l.in(n, 0), l.int_list(n.attrs_as<PermAttrs>().perm)});
}

HFX_ET_OP(Slice) {
  const SliceAttrs& s = n.attrs_as<SliceAttrs>();
  l.result(n, "aten::slice_copy", "Tensor_out",
           {l.in(n, 0), l.int_value(s.axis), l.int_value(s.start), l.int_value(s.end), l.int_value(1)});
}

HFX_ET_OP(Concat) {
  std::vector<int> parts;
  for (size_t i = 0; i < n.inputs.size(); ++i) parts.push_back(l.in(n, i));
  l.result(n, "aten::cat", "out", {l.tensor_list(parts), l.int_value(n.attrs_as<ConcatAttrs>().axis)});
}
HFX_ET_OP(KVAppend) { l.result(n, "aten::cat", "out", {l.tensor_list({l.in(n, 0), l.in(n, 1)}), l.int_value(2)}); }

// ONNX Gather: data[..., indices, ...] with the indices' dims in place of `axis`, which is what
// index.Tensor does with one index tensor after `axis` full slices.
HFX_ET_OP(Gather) {
  std::vector<int> indices(static_cast<size_t>(n.attrs_as<AxisAttrs>().axis), -1);
  indices.push_back(l.in(n, 1));
  l.result(n, "aten::index", "Tensor_out", {l.in(n, 0), l.optional_tensor_list(indices)});
}

HFX_ET_OP(Unsqueeze) {
  const Value* x = n.inputs[0];
  Shape shape = x->shape;
  for (int64_t axis : n.attrs_as<AxesAttrs>().axes)  // sorted: each inserts at its final place
    shape.insert(shape.begin() + axis, Dim(1));
  l.define(n.outputs[0], l.view(l.in(n, 0), l.sym_ints(shape), x->dtype));
}

HFX_ET_OP(Where) { l.result(n, "aten::where", "self_out", {l.in(n, 0), l.in(n, 1), l.in(n, 2)}); }

// start, limit and delta are shape arithmetic (Int EValues).
HFX_ET_OP(Range) {
  std::vector<int> ends;
  for (size_t i = 0; i < 3; ++i) {
    const auto* s = l.shape_value(n.inputs[i]);
    HFX_CHECK(s && s->size() == 1, "executorch: Range over a computed tensor (", n.name, ")");
    ends.push_back(l.int_value(s->front()));
  }
  l.result(n, "aten::arange", "start_out", ends);
}

HFX_ET_OP(ScatterElements) {
  if (l.updates_in_place(n)) return l.update_in_place(n);
  l.result(n, "aten::scatter", "src_out",
           {l.in(n, 0), l.int_value(n.attrs_as<AxisAttrs>().axis), l.in(n, 1), l.in(n, 2)});
}

// ONNX MatMul broadcasts the batch dims; bmm multiplies [B, M, K] by [B, K, N]: each operand is
// expanded to the result's batch dims and viewed as 3-D, and the product viewed back.
HFX_ET_OP(MatMul) {
  const Value* a = n.inputs[0];
  const Value* b = n.inputs[1];
  const Value* y = n.outputs[0];
  if (a->rank() == 2 && b->rank() == 2) return l.result(n, "aten::mm", "out", {l.in(n, 0), l.in(n, 1)});
  HFX_CHECK(a->rank() >= 2 && b->rank() >= 2, "executorch: MatMul of a vector (", n.name, ")");
  const Shape batch(y->shape.begin(), y->shape.end() - 2);
  EtInt count = EtInt::of(1);
  for (const EtInt& d : l.sym_ints(batch)) count = l.arith("mul", count, d);
  auto as_3d = [&](const Value* v, size_t i) {
    int cur = l.in(n, i);
    const Shape own(v->shape.end() - 2, v->shape.end());
    Shape full = batch;
    full.insert(full.end(), own.begin(), own.end());
    if (!(v->shape == full)) cur = l.call("aten::expand_copy", "out", {cur, l.sym_list(full), l.bool_value(false)},
                                          v->dtype, l.bounds(full));
    if (batch.size() == 1) return cur;
    std::vector<EtInt> dims = {count};
    for (const EtInt& d : l.sym_ints(own)) dims.push_back(d);
    return l.view(cur, dims, v->dtype);
  };
  const int a3 = as_3d(a, 0), b3 = as_3d(b, 1);
  std::vector<EtInt> dims = {count};
  for (const EtInt& d : l.bounds(Shape(y->shape.end() - 2, y->shape.end()))) dims.push_back(d);
  const int product = l.call("aten::bmm", "out", {a3, b3}, y->dtype, dims);
  if (batch.size() == 1) return l.define(y, product);
  l.define(y, l.view(product, l.sym_ints(y->shape), y->dtype));
}

// Attention as the reference decomposition computes it, without copying the cache: the G query
// heads of each kv head are one [G*S, D] matrix (a view, no repeated kv heads), and the scores
// are (k q^T)^T, so only the small query and score matrices are transposed. Sinks (gpt-oss) take
// the reference decomposition.
bool attention_without_sinks(const Node& n) { return !n.input(4) && !n.input(5); }  // nor an additive bias
HFX_ET_OP_NATIVE(Attention, attention_without_sinks) {
  HFX_CHECK(!n.input(5), "internal error: ", n.name, ": a native attention was given an additive bias");
  const Value *q = n.inputs[0], *k = n.inputs[1], *v = n.inputs[2], *mask = n.input(3);
  const AttentionAttrs& a = n.attrs_as<AttentionAttrs>();
  if (l.runs_hfexport_attention(n))  // the cache read in place, the masked slots skipped
    return l.result(n, "hfexport::sdpa", "out",
                    {l.in(n, 0), l.in(n, 1), l.in(n, 2), mask ? l.in(n, 3) : l.null_value(), l.double_value(a.scale),
                     l.double_value(a.softcap)});
  const int64_t hkv = k->shape[1].value(), groups = q->shape[1].value() / hkv;
  const EtInt batch = l.sym_int(q->shape[0]), s = l.sym_int(q->shape[2]), t = l.sym_int(k->shape[2]);
  const EtInt d = EtInt::of(q->shape[3].value()), dv = EtInt::of(v->shape[3].value());
  const EtInt heads = l.arith("mul", batch, EtInt::of(hkv)), rows = l.arith("mul", EtInt::of(groups), s);
  const int transpose = l.int_list(std::vector<int64_t>{0, 2, 1});
  const int q_t = l.call("aten::permute_copy", "out", {l.view(l.in(n, 0), {heads, rows, d}, q->dtype), transpose},
                         q->dtype, {heads, d, rows});
  const int scores_t = l.call("aten::bmm", "out", {l.view(l.in(n, 1), {heads, t, d}, k->dtype), q_t}, q->dtype,
                              {heads, t, rows});
  int scores = l.call("aten::permute_copy", "out", {scores_t, transpose}, q->dtype, {heads, rows, t});
  scores = l.call("aten::mul", "Scalar_out", {scores, l.double_value(a.scale)}, q->dtype, {heads, rows, t});
  if (q->dtype != DType::F32)
    scores = l.call("aten::_to_copy", "out", {scores, l.bool_value(false), l.null_value()}, DType::F32, {heads, rows, t});
  if (const double cap = a.softcap; cap > 0) {
    scores = l.call("aten::div", "Scalar_out", {scores, l.double_value(cap)}, DType::F32, {heads, rows, t});
    scores = l.call("aten::tanh", "out", {scores}, DType::F32, {heads, rows, t});
    scores = l.call("aten::mul", "Scalar_out", {scores, l.double_value(cap)}, DType::F32, {heads, rows, t});
  }
  if (mask) {
    // [B, Hkv, G, S, T] scores against the mask's [B, 1 or Hq, S, T], broadcast.
    const std::vector<EtInt> grouped = {batch, EtInt::of(hkv), EtInt::of(groups), s, t};
    const std::vector<EtInt> m = l.sym_ints(mask->shape);
    const bool per_head = mask->shape[1] != Dim(1);
    const int mask5 = l.view(l.in(n, 3), {m[0], EtInt::of(per_head ? hkv : 1), EtInt::of(per_head ? groups : 1), m[2], m[3]},
                             mask->dtype);
    const int lowest = l.call("aten::scalar_tensor", "out", {l.double_value(std::numeric_limits<float>::lowest())},
                              DType::F32, {});
    scores = l.call("aten::where", "self_out", {mask5, l.view(scores, grouped, DType::F32), lowest}, DType::F32, grouped);
    scores = l.view(scores, {heads, rows, t}, DType::F32);
  }
  int probs = l.call("aten::_softmax", "out", {scores, l.int_value(-1), l.bool_value(false)}, DType::F32, {heads, rows, t});
  if (v->dtype != DType::F32)
    probs = l.call("aten::_to_copy", "out", {probs, l.bool_value(false), l.null_value()}, v->dtype, {heads, rows, t});
  const int out = l.call("aten::bmm", "out", {probs, l.view(l.in(n, 2), {heads, t, dv}, v->dtype)}, v->dtype,
                         {heads, rows, dv});
  const Value* y = n.outputs[0];
  l.define(y, l.view(out, l.sym_ints(y->shape), y->dtype));
}

// High-level ops the runtime has kernels for: the weight stays [out, in] (linear reads it
// transposed).
HFX_ET_OP(Linear) {
  if (l.delegates(n)) return l.delegate_linear(n);
  l.result(n, "aten::linear", "out", {l.in(n, 0), l.in(n, 1), n.input(2) ? l.in(n, 2) : l.null_value()});
}
HFX_ET_OP(Embedding) {
  l.result(n, "aten::embedding", "out",
           {l.in(n, 0), l.in(n, 1), l.int_value(-1), l.bool_value(false), l.bool_value(false)});
}

}  // namespace
}  // namespace hfx
