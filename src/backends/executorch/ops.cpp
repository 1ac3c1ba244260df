// The ExecuTorch lowering of the IR's ops: every primitive is the out variant of the ATen table's
// call (backends/aten/ops.cpp, executorch/out_variants.cpp) unless a rule here says otherwise; the
// high-level ops named here are kept (the ATen table's call or a rule of their own), the others
// decomposed into primitives first.
#include "backends/executorch/lowering.h"

#include <limits>

#include "core/error.h"

namespace hfx {
namespace {

HFX_ET_ATEN_OP(GELU);
HFX_ET_ATEN_OP(Embedding);
HFX_ET_ATEN_OP(KVAppend);

// a - floor(a / b) * b: the portable remainder.Tensor_out truncates integers (-6 % 5 = -1, torch
// gives 4; executorch 1.5.1, measured).
HFX_ET_OP(Mod) {
  const Value* y = n.outputs[0];
  const std::vector<EtInt> dims = l.bounds(y->shape);
  const int quotient = l.call("aten::div", "out_mode", {l.in(n, 0), l.in(n, 1), l.string_value("floor")}, y->dtype, dims);
  const int multiple = l.call("aten::mul", "out", {quotient, l.in(n, 1)}, y->dtype, dims);
  l.result(n, "aten::sub", "out", {l.in(n, 0), multiple, l.int_value(1)});
}

// Tensors here are contiguous, so a reshape is a view of the same memory.
HFX_ET_OP(Reshape) {
  const Value* y = n.outputs[0];
  l.define(y, l.view(l.in(n, 0), l.sym_ints(n.attrs_as<ShapeAttrs>().shape), y->dtype));
}

HFX_ET_OP(Unsqueeze) {
  const Value* x = n.inputs[0];
  Shape shape = x->shape;
  for (int64_t axis : n.attrs_as<AxesAttrs>().axes)  // sorted: each inserts at its final place
    shape.insert(shape.begin() + axis, Dim(1));
  l.define(n.outputs[0], l.view(l.in(n, 0), l.sym_ints(shape), x->dtype));
}

HFX_ET_OP(ScatterElements) {
  if (l.updates_in_place(n)) return l.update_in_place(n);
  l.aten(n);
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

// Linear runs on the kernels unless XNNPACK runs it (a float16 linear the partition left).
HFX_ET_OP(Linear) {
  if (l.delegates(n)) return l.delegate_linear(n);
  l.aten(n);
}

}  // namespace
}  // namespace hfx
