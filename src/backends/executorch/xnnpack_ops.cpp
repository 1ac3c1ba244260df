// The XNNPACK lowering of each IR op the delegate runs, one registered rule per op: which nodes it
// takes (float32 throughout, except where a rule says) and the XNNPACK nodes it writes for them.
#include <cmath>

#include "backends/executorch/xnnpack_lowering.h"
#include "core/error.h"
#include "xnnpack/schema_generated.h"

namespace hfx {
namespace {

using X = fb_xnnpack::XNodeUnion;

int64_t axis_of(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

#define HFX_XNN_BINARY(Op, kind) \
  HFX_XNN_OP(Op, all_float32) { x.g.binary(kind, x.in(n, 0), x.in(n, 1), x.out(n)); }
HFX_XNN_BINARY(Add, X::XNNAdd)
HFX_XNN_BINARY(Sub, X::XNNSubtract)
HFX_XNN_BINARY(Mul, X::XNNMultiply)
HFX_XNN_BINARY(Div, X::XNNDiv)
HFX_XNN_BINARY(Max, X::XNNMaximum)
HFX_XNN_BINARY(Min, X::XNNMinimum)
#undef HFX_XNN_BINARY

#define HFX_XNN_UNARY(Op, kind) \
  HFX_XNN_OP(Op, all_float32) { x.g.unary(kind, x.in(n, 0), x.out(n)); }
HFX_XNN_UNARY(Neg, X::XNNNegate)
HFX_XNN_UNARY(Sqrt, X::XNNSquareRoot)
HFX_XNN_UNARY(Exp, X::XNNExp)
HFX_XNN_UNARY(Tanh, X::XNNTanh)
HFX_XNN_UNARY(Sigmoid, X::XNNSigmoid)
HFX_XNN_UNARY(Cos, X::XNNCos)
HFX_XNN_UNARY(Sin, X::XNNSin)
#undef HFX_XNN_UNARY

HFX_XNN_OP(Reciprocal, all_float32) { x.g.binary(X::XNNDiv, x.scalar(1.0f), x.in(n, 0), x.out(n)); }

// XNNPACK's GELU is the exact (erf) one.
bool exact_gelu(const Node& n) {
  return all_float32(n) && n.attrs_as<GELUAttrs>().approximate == GeluApproximation::None;
}
HFX_XNN_OP(GELU, exact_gelu) { x.g.unary(X::XNNGelu, x.in(n, 0), x.out(n)); }

// XNNPACK's softmax runs along the last dim.
bool softmax_on_last_dim(const Node& n) {
  return all_float32(n) && axis_of(n.attrs_as<AxisAttrs>().axis, n.inputs[0]->rank()) + 1 ==
                               static_cast<int64_t>(n.inputs[0]->rank());
}
HFX_XNN_OP(Softmax, softmax_on_last_dim) { x.g.unary(X::XNNSoftmax, x.in(n, 0), x.out(n)); }

// A mean over the last (static) dim is a fully connected layer with one output channel whose
// weights are all 1/H: XNNPACK's schema has no reduction.
bool mean_of_last_dim(const Node& n) {
  const Value* v = n.inputs[0];
  const std::vector<int64_t>& axes = n.attrs_as<ReduceAttrs>().axes;
  return all_float32(n) && v->rank() >= 1 && axes.size() == 1 &&
         axis_of(axes[0], v->rank()) + 1 == static_cast<int64_t>(v->rank()) && v->shape.back().is_static() &&
         (n.attrs_as<ReduceAttrs>().keepdims || reshapable(n.outputs[0]->shape));
}

// The filter [1, H] of a fully connected layer that averages its input's last dim.
uint32_t averaging_filter(XnnLowering& x, int64_t h) {
  return x.made_constant(std::vector<float>(static_cast<size_t>(h), 1.0f / static_cast<float>(h)), {1, h});
}
HFX_XNN_OP(ReduceMean, mean_of_last_dim) {
  const Value* v = n.inputs[0];
  const uint32_t weights = averaging_filter(x, v->shape.back().value());
  if (n.attrs_as<ReduceAttrs>().keepdims)
    return x.g.fully_connected(x.in(n, 0), weights, XnnGraphBuilder::kNone, x.out(n));
  Shape kept = v->shape;
  kept.back() = Dim(1);
  const uint32_t mean = x.internal(x.dims(kept));
  x.g.fully_connected(x.in(n, 0), weights, XnnGraphBuilder::kNone, mean);
  x.g.reshape(mean, x.out(n), XnnLowering::reshape_target(n.outputs[0]->shape));
}

// HF's RMSNorm, x * rsqrt(mean(x^2) + eps) * weight, in five XNNPACK nodes: the mean and the
// epsilon are one fully connected layer (weights 1/H, bias eps), then XNNPACK's rsqrt.
bool float_rms_norm(const Node& n) {
  const Value* x = n.inputs[0];
  return all_float32(n) && x->rank() >= 1 && x->shape.back().is_static() && n.inputs[1]->is_constant();
}
HFX_XNN_OP(RMSNorm, float_rms_norm) {
  const Value* v = n.inputs[0];
  Shape kept = v->shape;
  kept.back() = Dim(1);
  const uint32_t input = x.in(n, 0), squares = x.internal(x.dims(v)), mean = x.internal(x.dims(kept)),
                 inverse = x.internal(x.dims(kept)), normed = x.internal(x.dims(v));
  const float eps = static_cast<float>(n.attrs_as<NormAttrs>().epsilon);
  x.g.binary(X::XNNMultiply, input, input, squares);
  x.g.fully_connected(squares, averaging_filter(x, v->shape.back().value()), x.made_constant({eps}, {1}), mean);
  x.g.unary(X::XNNReciprocalSquareRoot, mean, inverse);
  x.g.binary(X::XNNMultiply, input, inverse, normed);
  x.g.binary(X::XNNMultiply, normed, x.in(n, 1), x.out(n));
}

bool float_linear(const Node& n) {
  const Value* w = n.inputs[1];
  const Value* b = n.input(2);
  return all_float32(n) && w->is_constant() && (!b || b->is_constant());
}
HFX_XNN_OP(Linear, float_linear) {
  const uint32_t input = x.in(n, 0);
  const uint32_t weight = x.g.named_constant(XnnFloat::F32, x.et.named_weight(n.inputs[1]));
  const uint32_t bias = n.input(2) ? x.g.named_constant(XnnFloat::F32, x.et.named_weight(n.input(2)))
                                   : XnnGraphBuilder::kNone;
  x.g.fully_connected(input, weight, bias, x.out(n));
}

// 8da4w / 8da8w (the weights: EtLowering::quantized_weights): x quantized per token, then the
// fully connected layer over the codes.
bool dynamically_quantized(const Node& n) {
  const QuantizedLinearAttrs& a = n.attrs_as<QuantizedLinearAttrs>();
  const Value* bias = n.input(3);
  return a.int8_compute && (a.bits == 4 || a.bits == 8) && n.inputs[0]->dtype == DType::F32 &&
         n.outputs[0]->dtype == DType::F32 && n.inputs[0]->rank() <= 6 && (!bias || bias->dtype == DType::F32);
}
HFX_XNN_OP(QuantizedLinear, dynamically_quantized) {
  const uint32_t input = x.in(n, 0);
  const XnnQuantizedWeights w = x.et.quantized_weights(n);
  const uint32_t quantized = x.g.per_token_int8(x.dims(n.inputs[0]));
  const uint32_t weight = w.bits == 4 ? x.g.qb4_weight(w.codes, w.scales, w.group_size) : x.g.qc8_weight(w.codes, w.scales);
  x.g.unary(X::XNNConvert, input, quantized);
  const uint32_t bias = w.bias ? x.g.named_constant(XnnFloat::F32, *w.bias) : XnnGraphBuilder::kNone;
  x.g.fully_connected(quantized, weight, bias, x.out(n));
}

bool float_reshape(const Node& n) { return all_float32(n) && reshapable(n.outputs[0]->shape); }
HFX_XNN_MOVE(Reshape, float_reshape) {
  x.g.reshape(x.in(n, 0), x.out(n), XnnLowering::reshape_target(n.outputs[0]->shape));
}
HFX_XNN_MOVE(Unsqueeze, float_reshape) {
  x.g.reshape(x.in(n, 0), x.out(n), XnnLowering::reshape_target(n.outputs[0]->shape));
}

HFX_XNN_MOVE(Transpose, all_float32) { x.g.transpose(x.in(n, 0), x.out(n), n.attrs_as<PermAttrs>().perm); }

// A slice of a static dim; the other dims whole (size 0 at offset 0).
bool static_slice(const Node& n) {
  const Value* v = n.inputs[0];
  const SliceAttrs& s = n.attrs_as<SliceAttrs>();
  const int64_t axis = axis_of(s.axis, v->rank());
  return all_float32(n) && axis >= 0 && axis < static_cast<int64_t>(v->rank()) &&
         v->shape[static_cast<size_t>(axis)].is_static() && n.outputs[0]->shape[static_cast<size_t>(axis)].is_static() &&
         n.outputs[0]->shape[static_cast<size_t>(axis)].value() > 0;
}
HFX_XNN_MOVE(Slice, static_slice) {
  const Value* v = n.inputs[0];
  const SliceAttrs& s = n.attrs_as<SliceAttrs>();
  const size_t axis = static_cast<size_t>(axis_of(s.axis, v->rank()));
  const int64_t dim = v->shape[axis].value();
  int64_t start = s.start < 0 ? s.start + dim : s.start;
  start = std::clamp<int64_t>(start, 0, dim);
  std::vector<int64_t> offsets(v->rank(), 0), sizes(v->rank(), 0);
  offsets[axis] = start;
  sizes[axis] = n.outputs[0]->shape[axis].value();
  x.g.slice(x.in(n, 0), x.out(n), offsets, sizes);
}

bool concat_of_few(const Node& n) { return all_float32(n) && n.inputs.size() >= 2 && n.inputs.size() <= 5; }
HFX_XNN_MOVE(Concat, concat_of_few) {
  std::vector<uint32_t> parts;
  for (size_t i = 0; i < n.inputs.size(); ++i) parts.push_back(x.in(n, i));
  x.g.concat(axis_of(n.attrs_as<ConcatAttrs>().axis, n.inputs[0]->rank()), parts, x.out(n));
}
HFX_XNN_MOVE(KVAppend, all_float32) { x.g.concat(2, {x.in(n, 0), x.in(n, 1)}, x.out(n)); }

// Attention as the reference decomposition computes it: the G query heads of each kv head as one
// [G*S, D] matrix (no repeated kv heads), scores q k^T (k read transposed, never copied), scaled,
// soft-capped, the mask added as 0 / the lowest float (kernels make it once per mask), softmax,
// then the values. Sinks (gpt-oss) stay on the kernels.
// q [B, Hq, S, D] seen as [B, Hkv, G*S, D]: its dims (upper bounds) and reshape target.
struct GroupedRows {
  std::vector<int64_t> dims, target;
};
GroupedRows grouped_rows(const Dim& batch, int64_t heads, int64_t groups, const Dim& rows, int64_t last) {
  const auto fixed_or_zero = [](const Dim& d, int64_t times) {
    return XnnLowering::dynamic(d) ? 0 : times * XnnLowering::upper(d);
  };
  return {{XnnLowering::upper(batch), heads, groups * XnnLowering::upper(rows), last},
          {fixed_or_zero(batch, 1), heads, fixed_or_zero(rows, groups), last}};
}

bool attention_on_xnnpack(const Node& n) {
  const Value *q = n.inputs[0], *k = n.inputs[1], *v = n.inputs[2], *mask = n.input(3);
  if (n.input(4) || n.input(5) || q->dtype != DType::F32 || k->dtype != DType::F32 || v->dtype != DType::F32)
    return false;  // sinks and an additive bias: the reference decomposition
  if (mask && (mask->dtype != DType::Bool || mask->rank() != 4 || mask->shape[1] != Dim(1))) return false;
  const int64_t groups = q->shape[1].value() / k->shape[1].value();
  return groups == 1 || (XnnLowering::dynamic(q->shape[0]) + XnnLowering::dynamic(q->shape[2]) <= 1);
}
HFX_XNN_OP(Attention, attention_on_xnnpack) {
  HFX_CHECK(!n.input(5), "internal error: ", n.name, ": a native attention was given an additive bias");
  const Value *q = n.inputs[0], *k = n.inputs[1], *v = n.inputs[2], *mask = n.input(3);
  const AttentionAttrs& a = n.attrs_as<AttentionAttrs>();
  const int64_t hkv = k->shape[1].value(), groups = q->shape[1].value() / hkv;
  const GroupedRows rows = grouped_rows(q->shape[0], hkv, groups, q->shape[2], q->shape[3].value());
  uint32_t query = x.in(n, 0);
  if (groups > 1) {
    const uint32_t g = x.internal(rows.dims);
    x.g.reshape(query, g, rows.target);
    query = g;
  }
  std::vector<int64_t> score_dims = rows.dims;
  score_dims.back() = XnnLowering::upper(k->shape[2]);
  auto step = [&](auto&& emit) {
    const uint32_t next = x.internal(score_dims);
    emit(next);
    return next;
  };
  uint32_t scores = step([&](uint32_t y) { x.g.batch_matmul(query, x.in(n, 1), y, true); });
  scores = step([&](uint32_t y) { x.g.binary(X::XNNMultiply, scores, x.scalar(static_cast<float>(a.scale)), y); });
  if (const double cap = a.softcap; cap > 0) {
    scores = step([&](uint32_t y) { x.g.binary(X::XNNDiv, scores, x.scalar(static_cast<float>(cap)), y); });
    scores = step([&](uint32_t y) { x.g.unary(X::XNNTanh, scores, y); });
    scores = step([&](uint32_t y) { x.g.binary(X::XNNMultiply, scores, x.scalar(static_cast<float>(cap)), y); });
  }
  if (mask) {
    const std::vector<int64_t> mask_dims = {XnnLowering::upper(mask->shape[0]), 1,
                                            groups * XnnLowering::upper(mask->shape[2]),
                                            XnnLowering::upper(mask->shape[3])};
    const int additive = x.et.reads_filled_slots(k) ? x.et.filled_slots_mask(mask, groups) : x.et.additive_mask(mask, groups);
    const uint32_t added = x.prepared(additive, mask_dims);
    scores = step([&](uint32_t y) { x.g.binary(X::XNNAdd, scores, added, y); });
  }
  const uint32_t probs = step([&](uint32_t y) { x.g.unary(X::XNNSoftmax, scores, y); });
  if (groups == 1) return x.g.batch_matmul(probs, x.in(n, 2), x.out(n), false);
  std::vector<int64_t> out_dims = rows.dims;
  out_dims.back() = v->shape[3].value();
  const uint32_t out = x.internal(out_dims);
  x.g.batch_matmul(probs, x.in(n, 2), out, false);
  x.g.reshape(out, x.out(n), XnnLowering::reshape_target(n.outputs[0]->shape));
}

}  // namespace
}  // namespace hfx
