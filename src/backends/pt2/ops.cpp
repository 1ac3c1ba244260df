// The ATen lowering of each IR op, one registered function per op (torch.ops.aten overloads, with
// the argument names of their schemas). High-level ops without a rule here are decomposed into
// primitives first. IR primitives follow ONNX semantics; each rule notes where ATen differs.
#include <limits>

#include "backends/aten_semantics.h"
#include "backends/pt2/lowering.h"
#include "core/error.h"

namespace hfx {
namespace {

Pt2Arg self(Pt2Lowering& l, const Node& n, size_t i = 0) { return {"self", tensor_arg(l.in(n, i))}; }
Pt2Arg other(Pt2Lowering& l, const Node& n, size_t i = 1) { return {"other", tensor_arg(l.in(n, i))}; }

#define HFX_PT2_BINARY(Op, target) \
  HFX_PT2_OP(Op) { l.result(n, target, {self(l, n), other(l, n)}); }
HFX_PT2_BINARY(Add, "torch.ops.aten.add.Tensor")
HFX_PT2_BINARY(Sub, "torch.ops.aten.sub.Tensor")
HFX_PT2_BINARY(Mod, "torch.ops.aten.remainder.Tensor")  // floored, as the IR's Mod
HFX_PT2_BINARY(Mul, "torch.ops.aten.mul.Tensor")
HFX_PT2_BINARY(Max, "torch.ops.aten.maximum.default")
HFX_PT2_BINARY(Min, "torch.ops.aten.minimum.default")
HFX_PT2_BINARY(Equal, "torch.ops.aten.eq.Tensor")
HFX_PT2_BINARY(Less, "torch.ops.aten.lt.Tensor")
HFX_PT2_BINARY(LessOrEqual, "torch.ops.aten.le.Tensor")
HFX_PT2_BINARY(Greater, "torch.ops.aten.gt.Tensor")
HFX_PT2_BINARY(And, "torch.ops.aten.logical_and.default")
HFX_PT2_BINARY(BitwiseAnd, "torch.ops.aten.bitwise_and.Tensor")
HFX_PT2_BINARY(BitShiftRight, "torch.ops.aten.bitwise_right_shift.Tensor")
HFX_PT2_BINARY(MatMul, "torch.ops.aten.matmul.default")
#undef HFX_PT2_BINARY

// ONNX divides integers truncating; aten.div.Tensor would give floats.
HFX_PT2_OP(Div) {
  if (is_float(n.outputs[0]->dtype)) return l.result(n, "torch.ops.aten.div.Tensor", {self(l, n), other(l, n)});
  l.result(n, "torch.ops.aten.div.Tensor_mode", {self(l, n), other(l, n), {"rounding_mode", string_arg("trunc"), true}});
}
HFX_PT2_OP(Pow) { l.result(n, "torch.ops.aten.pow.Tensor_Tensor", {self(l, n), {"exponent", tensor_arg(l.in(n, 1))}}); }

#define HFX_PT2_UNARY(Op, target) \
  HFX_PT2_OP(Op) { l.result(n, target, {self(l, n)}); }
HFX_PT2_UNARY(Neg, "torch.ops.aten.neg.default")
HFX_PT2_UNARY(Sqrt, "torch.ops.aten.sqrt.default")
HFX_PT2_UNARY(Reciprocal, "torch.ops.aten.reciprocal.default")
HFX_PT2_UNARY(Exp, "torch.ops.aten.exp.default")
HFX_PT2_UNARY(Log, "torch.ops.aten.log.default")
HFX_PT2_UNARY(Softplus, "torch.ops.aten.softplus.default")  // beta 1, threshold 20: as HF calls it
HFX_PT2_UNARY(Tanh, "torch.ops.aten.tanh.default")
HFX_PT2_UNARY(Erf, "torch.ops.aten.erf.default")
HFX_PT2_UNARY(Cos, "torch.ops.aten.cos.default")
HFX_PT2_UNARY(Sin, "torch.ops.aten.sin.default")
HFX_PT2_UNARY(Sigmoid, "torch.ops.aten.sigmoid.default")
HFX_PT2_UNARY(Not, "torch.ops.aten.logical_not.default")
HFX_PT2_UNARY(SiLU, "torch.ops.aten.silu.default")
#undef HFX_PT2_UNARY

HFX_PT2_OP(GELU) {
  const bool tanh = n.attrs_as<GELUAttrs>().approximate == GeluApproximation::Tanh;
  l.result(n, "torch.ops.aten.gelu.default", {self(l, n), {"approximate", string_arg(tanh ? "tanh" : "none"), true}});
}

HFX_PT2_OP(Pad) {
  const PadAttrs& p = n.attrs_as<PadAttrs>();
  l.result(n, "torch.ops.aten.constant_pad_nd.default", {self(l, n), {"pad", ints_arg(aten_pad_list(p))}, {"value", float_arg(p.value)}});
}
HFX_PT2_OP(Conv) {
  const ConvAttrs& c = n.attrs_as<ConvAttrs>();
  l.result(n, "torch.ops.aten.convolution.default",
           {{"input", tensor_arg(l.in(n, 0))}, {"weight", tensor_arg(l.in(n, 1))},
            {"bias", n.input(2) ? tensor_arg(l.in(n, 2)) : none_arg()}, {"stride", ints_arg(c.strides)},
            {"padding", ints_arg(c.pads)}, {"dilation", ints_arg(c.dilations)}, {"transposed", bool_arg(false)},
            {"output_padding", ints_arg(std::vector<int64_t>(c.strides.size(), 0))}, {"groups", int_arg(c.group)}});
}
HFX_PT2_OP(CumSum) { l.result(n, "torch.ops.aten.cumsum.default", {self(l, n), {"dim", int_arg(n.attrs_as<AxisAttrs>().axis)}}); }
HFX_PT2_OP(Softmax) {
  l.result(n, "torch.ops.aten.softmax.int", {self(l, n), {"dim", int_arg(n.attrs_as<AxisAttrs>().axis)}});
}

// ONNX reduces over every axis when none are given; ATen's dim lists name them.
std::vector<int64_t> reduce_axes(const Node& n) {
  std::vector<int64_t> axes = n.attrs_as<ReduceAttrs>().axes;
  if (axes.empty())
    for (size_t i = 0; i < n.inputs[0]->rank(); ++i) axes.push_back(static_cast<int64_t>(i));
  return axes;
}
void lower_reduce(Pt2Lowering& l, const Node& n, const char* target) {
  l.result(n, target, {self(l, n), {"dim", ints_arg(reduce_axes(n))},
                       {"keepdim", bool_arg(n.attrs_as<ReduceAttrs>().keepdims)}});
}
HFX_PT2_OP(ReduceMean) { lower_reduce(l, n, "torch.ops.aten.mean.dim"); }
HFX_PT2_OP(ReduceMax) { lower_reduce(l, n, "torch.ops.aten.amax.default"); }
HFX_PT2_OP(ReduceSum) { lower_reduce(l, n, "torch.ops.aten.sum.dim_IntList"); }

// aten.topk yields (values, indices); the IR op keeps one of them.
HFX_PT2_OP(TopK) {
  const TopKAttrs& a = n.attrs_as<TopKAttrs>();
  const Value* y = n.outputs[0];
  const std::vector<SymExpr> shape = l.sizes(y->shape);
  const auto names = l.call_multi("torch.ops.aten.topk.default", {self(l, n), {"k", int_arg(a.k)}},
                                  {{n.inputs[0]->dtype, shape}, {DType::I64, shape}}, y->name);
  l.define(y, names[a.indices ? 1 : 0]);
}

HFX_PT2_OP(Cast) {
  l.result(n, "torch.ops.aten.to.dtype", {self(l, n), {"dtype", scalar_type_arg(n.attrs_as<CastAttrs>().to)}});
}

HFX_PT2_OP(Reshape) {
  l.result(n, "torch.ops.aten.reshape.default",
           {self(l, n), {"shape", sym_ints_arg(l.sym_ints(n.attrs_as<ShapeAttrs>().shape))}});
}

// The Expand's shape input is shape arithmetic; its result's dims say the same as SymInts.
HFX_PT2_OP(Expand) {
  l.result(n, "torch.ops.aten.expand.default",
           {self(l, n), {"size", sym_ints_arg(l.sym_ints(n.attrs_as<ShapeAttrs>().shape))}});
}

HFX_PT2_OP(Transpose) {
  l.result(n, "torch.ops.aten.permute.default", {self(l, n), {"dims", ints_arg(n.attrs_as<PermAttrs>().perm)}});
}

HFX_PT2_OP(Slice) {
  const SliceAttrs& s = n.attrs_as<SliceAttrs>();
  l.result(n, "torch.ops.aten.slice.Tensor",
           {self(l, n), {"dim", int_arg(s.axis)}, {"start", int_arg(s.start)}, {"end", int_arg(s.end)}});
}

HFX_PT2_OP(Concat) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < n.inputs.size(); ++i) list.push_back({{"name", l.in(n, i)}});
  l.result(n, "torch.ops.aten.cat.default",
           {{"tensors", {{"as_tensors", list}}}, {"dim", int_arg(n.attrs_as<ConcatAttrs>().axis)}});
}
HFX_PT2_OP(KVAppend) {
  l.result(n, "torch.ops.aten.cat.default",
           {{"tensors", {{"as_tensors", {{{"name", l.in(n, 0)}}, {{"name", l.in(n, 1)}}}}}}, {"dim", int_arg(2)}});
}

// ONNX Gather: data[..., indices, ...] with the indices' dims in place of `axis`, which is what
// aten.index does with one index tensor after `axis` full slices.
HFX_PT2_OP(Gather) {
  const int64_t axis = n.attrs_as<AxisAttrs>().axis;
  nlohmann::json indices = nlohmann::json::array();
  for (int64_t i = 0; i < axis; ++i) indices.push_back(none_arg());
  indices.push_back(tensor_arg(l.in(n, 1)));
  l.result(n, "torch.ops.aten.index.Tensor", {self(l, n), {"indices", {{"as_optional_tensors", indices}}}});
}

HFX_PT2_OP(Unsqueeze) {
  const Value* x = n.inputs[0];
  std::string cur = l.in(n, 0);
  Shape shape = x->shape;
  const std::vector<int64_t>& axes = n.attrs_as<AxesAttrs>().axes;  // sorted: each inserts at its final place
  for (size_t i = 0; i < axes.size(); ++i) {
    shape.insert(shape.begin() + axes[i], Dim(1));
    const bool last = i + 1 == axes.size();
    cur = l.call("torch.ops.aten.unsqueeze.default", {{"self", tensor_arg(cur)}, {"dim", int_arg(axes[i])}}, x->dtype,
                 l.sizes(shape), last ? n.outputs[0]->name : n.outputs[0]->name + "_part");
  }
  l.define(n.outputs[0], cur);
}

HFX_PT2_OP(Where) {
  l.result(n, "torch.ops.aten.where.self",
           {{"condition", tensor_arg(l.in(n, 0))}, self(l, n, 1), {"other", tensor_arg(l.in(n, 2))}});
}

// start, limit and delta are shape arithmetic (SymInts).
HFX_PT2_OP(Range) {
  std::vector<nlohmann::json> ends;
  for (size_t i = 0; i < 3; ++i) {
    const auto* s = l.shape_value(n.inputs[i]);
    HFX_CHECK(s && s->size() == 1, "pt2: Range over a computed tensor (", n.name, ")");
    ends.push_back(sym_int_arg(s->front()));
  }
  l.result(n, "torch.ops.aten.arange.start_step",
           {{"start", ends[0]}, {"end", ends[1]}, {"step", ends[2]},
            {"dtype", scalar_type_arg(n.outputs[0]->dtype), true}});
}


HFX_PT2_OP(ScatterElements) {
  l.result(n, l.updates_in_place(n) ? "torch.ops.aten.scatter_.src" : "torch.ops.aten.scatter.src",
           {self(l, n), {"dim", int_arg(n.attrs_as<AxisAttrs>().axis)}, {"index", tensor_arg(l.in(n, 1))},
            {"src", tensor_arg(l.in(n, 2))}});
}

// High-level ops ATen has: the weight stays [out, in] (aten.linear reads it transposed).
HFX_PT2_OP(Linear) {
  l.result(n, "torch.ops.aten.linear.default",
           {{"input", tensor_arg(l.in(n, 0))}, {"weight", tensor_arg(l.in(n, 1))},
            {"bias", n.input(2) ? tensor_arg(l.in(n, 2)) : none_arg()}});
}
HFX_PT2_OP(Embedding) {
  l.result(n, "torch.ops.aten.embedding.default",
           {{"weight", tensor_arg(l.in(n, 0))}, {"indices", tensor_arg(l.in(n, 1))}});
}

// HF's RMSNorm computes in float32; aten.rms_norm does the same ops on a float32 input (others
// are decomposed, so the cast back to the input's type comes before the weight as in HF).
bool rms_norm_in_float32(const Node& n) { return n.inputs[0]->dtype == DType::F32; }
HFX_PT2_OP_NATIVE(RMSNorm, rms_norm_in_float32) {
  const Value* x = n.inputs[0];
  l.result(n, "torch.ops.aten.rms_norm.default",
           {{"input", tensor_arg(l.in(n, 0))}, {"normalized_shape", sym_ints_arg({l.sym_int(x->shape.back())})},
            {"weight", tensor_arg(l.in(n, 1))}, {"eps", float_arg(n.attrs_as<NormAttrs>().epsilon)}});
}

// scaled_dot_product_attention with the boolean mask (true = attend) and grouped heads; a fully
// masked row (a left pad's query) comes out as zeros. Softcapping and sinks are decomposed.
bool sdpa_computes(const Node& n) {  // no softcap, sinks or additive bias
  return n.attrs_as<AttentionAttrs>().softcap == 0.0 && !n.input(4) && !n.input(5);
}
HFX_PT2_OP_NATIVE(Attention, sdpa_computes) {
  HFX_CHECK(!n.input(5), "internal error: ", n.name, ": a native attention was given an additive bias");
  const Dim q_heads = n.inputs[0]->shape[1], kv_heads = n.inputs[1]->shape[1];
  l.result(n, "torch.ops.aten.scaled_dot_product_attention.default",
           {{"query", tensor_arg(l.in(n, 0))}, {"key", tensor_arg(l.in(n, 1))}, {"value", tensor_arg(l.in(n, 2))},
            {"attn_mask", n.input(3) ? tensor_arg(l.in(n, 3)) : none_arg()},
            {"scale", float_arg(n.attrs_as<AttentionAttrs>().scale), true},
            {"enable_gqa", bool_arg(!(q_heads == kv_heads)), true}});
}

}  // namespace
}  // namespace hfx
