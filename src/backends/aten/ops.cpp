// Each IR op as the ATen call a traced torch program makes for it (functional overloads, with the
// argument names of their schemas). IR primitives follow ONNX semantics; each rule notes where
// ATen differs. High-level ops are here for the backends that keep them (a backend says which).
#include <vector>

#include "backends/aten/dialect.h"
#include "core/error.h"

namespace hfx {
namespace {

using Args = std::vector<std::pair<std::string, AtenArg>>;

std::pair<std::string, AtenArg> self(const Node& n, size_t i = 0) { return {"self", aten_tensor(n.inputs[i])}; }
std::pair<std::string, AtenArg> other(const Node& n, size_t i = 1) { return {"other", aten_tensor(n.inputs[i])}; }
AtenArg optional_input(const Node& n, size_t i) { return n.input(i) ? aten_tensor(n.inputs[i]) : aten_none(); }

#define HFX_ATEN_BINARY(Op, schema) \
  HFX_ATEN_OP(Op) { return aten_call(schema, {self(n), other(n)}); }
HFX_ATEN_BINARY(Add, "add.Tensor")
HFX_ATEN_BINARY(Sub, "sub.Tensor")
HFX_ATEN_BINARY(Mod, "remainder.Tensor")  // floored, as the IR's Mod
HFX_ATEN_BINARY(Mul, "mul.Tensor")
HFX_ATEN_BINARY(Max, "maximum.default")
HFX_ATEN_BINARY(Min, "minimum.default")
HFX_ATEN_BINARY(Equal, "eq.Tensor")
HFX_ATEN_BINARY(Less, "lt.Tensor")
HFX_ATEN_BINARY(LessOrEqual, "le.Tensor")
HFX_ATEN_BINARY(Greater, "gt.Tensor")
HFX_ATEN_BINARY(And, "logical_and.default")
HFX_ATEN_BINARY(BitwiseAnd, "bitwise_and.Tensor")
HFX_ATEN_BINARY(BitShiftRight, "bitwise_right_shift.Tensor")
HFX_ATEN_BINARY(MatMul, "matmul.default")
#undef HFX_ATEN_BINARY

// ONNX divides integers truncating; div.Tensor would give floats.
HFX_ATEN_OP(Div) {
  if (is_float(n.outputs[0]->dtype)) return aten_call("div.Tensor", {self(n), other(n)});
  return aten_call("div.Tensor_mode", {self(n), other(n), {"rounding_mode", aten_string("trunc")}});
}
HFX_ATEN_OP(Pow) { return aten_call("pow.Tensor_Tensor", {self(n), {"exponent", aten_tensor(n.inputs[1])}}); }

#define HFX_ATEN_UNARY(Op, schema) \
  HFX_ATEN_OP(Op) { return aten_call(schema, {self(n)}); }
HFX_ATEN_UNARY(Neg, "neg.default")
HFX_ATEN_UNARY(Sqrt, "sqrt.default")
HFX_ATEN_UNARY(Reciprocal, "reciprocal.default")
HFX_ATEN_UNARY(Exp, "exp.default")
HFX_ATEN_UNARY(Log, "log.default")
HFX_ATEN_UNARY(Softplus, "softplus.default")  // beta 1, threshold 20: as HF calls it
HFX_ATEN_UNARY(Tanh, "tanh.default")
HFX_ATEN_UNARY(Erf, "erf.default")
HFX_ATEN_UNARY(Cos, "cos.default")
HFX_ATEN_UNARY(Sin, "sin.default")
HFX_ATEN_UNARY(Sigmoid, "sigmoid.default")
HFX_ATEN_UNARY(Not, "logical_not.default")
HFX_ATEN_UNARY(SiLU, "silu.default")
#undef HFX_ATEN_UNARY

HFX_ATEN_OP(GELU) {
  const bool tanh = n.attrs_as<GELUAttrs>().approximate == GeluApproximation::Tanh;
  return aten_call("gelu.default", {self(n), {"approximate", aten_string(tanh ? "tanh" : "none")}});
}

// constant_pad_nd's `pad` runs from the last axis: (begin, end) of the last, then of the one
// before, ..., down to the first padded axis.
std::vector<int64_t> aten_pad_list(const PadAttrs& p) {
  size_t first = 0;
  while (first < p.begin.size() && p.begin[first] == 0 && p.end[first] == 0) ++first;
  std::vector<int64_t> out;
  for (size_t i = p.begin.size(); i-- > first;) {
    out.push_back(p.begin[i]);
    out.push_back(p.end[i]);
  }
  return out;
}
HFX_ATEN_OP(Pad) {
  const PadAttrs& p = n.attrs_as<PadAttrs>();
  return aten_call("constant_pad_nd.default", {self(n), {"pad", aten_ints(aten_pad_list(p))}, {"value", aten_float(p.value)}});
}
HFX_ATEN_OP(Conv) {
  const ConvAttrs& c = n.attrs_as<ConvAttrs>();
  return aten_call("convolution.default",
                   {{"input", aten_tensor(n.inputs[0])}, {"weight", aten_tensor(n.inputs[1])}, {"bias", optional_input(n, 2)},
                    {"stride", aten_ints(c.strides)}, {"padding", aten_ints(c.pads)}, {"dilation", aten_ints(c.dilations)},
                    {"transposed", aten_bool(false)},
                    {"output_padding", aten_ints(std::vector<int64_t>(c.strides.size(), 0))}, {"groups", aten_int(c.group)}});
}
HFX_ATEN_OP(CumSum) { return aten_call("cumsum.default", {self(n), {"dim", aten_int(n.attrs_as<AxisAttrs>().axis)}}); }
HFX_ATEN_OP(Softmax) { return aten_call("softmax.int", {self(n), {"dim", aten_int(n.attrs_as<AxisAttrs>().axis)}}); }

// ONNX reduces over every axis when none are given; ATen's dim lists name them.
AtenCall reduce(const Node& n, std::string_view schema) {
  std::vector<int64_t> axes = n.attrs_as<ReduceAttrs>().axes;
  if (axes.empty())
    for (size_t i = 0; i < n.inputs[0]->rank(); ++i) axes.push_back(static_cast<int64_t>(i));
  return aten_call(schema, {self(n), {"dim", aten_ints(axes)}, {"keepdim", aten_bool(n.attrs_as<ReduceAttrs>().keepdims)}});
}
HFX_ATEN_OP(ReduceMean) { return reduce(n, "mean.dim"); }
HFX_ATEN_OP(ReduceMax) { return reduce(n, "amax.default"); }
HFX_ATEN_OP(ReduceSum) { return reduce(n, "sum.dim_IntList"); }

// topk yields (values, indices); the IR op keeps one of them.
HFX_ATEN_OP(TopK) {
  const TopKAttrs& a = n.attrs_as<TopKAttrs>();
  AtenCall call = aten_call("topk.default", {self(n), {"k", aten_int(a.k)}});
  call.results = {n.inputs[0]->dtype, DType::I64};
  call.result = a.indices ? 1 : 0;
  return call;
}

HFX_ATEN_OP(Cast) { return aten_call("to.dtype", {self(n), {"dtype", aten_scalar_type(n.attrs_as<CastAttrs>().to)}}); }
HFX_ATEN_OP(Reshape) { return aten_call("reshape.default", {self(n), {"shape", aten_sym_ints(n.attrs_as<ShapeAttrs>().shape)}}); }
// The Expand's shape input is shape arithmetic; its result's dims say the same as SymInts.
HFX_ATEN_OP(Expand) { return aten_call("expand.default", {self(n), {"size", aten_sym_ints(n.attrs_as<ShapeAttrs>().shape)}}); }
HFX_ATEN_OP(Transpose) { return aten_call("permute.default", {self(n), {"dims", aten_ints(n.attrs_as<PermAttrs>().perm)}}); }
HFX_ATEN_OP(Slice) {
  const SliceAttrs& s = n.attrs_as<SliceAttrs>();
  return aten_call("slice.Tensor", {self(n), {"dim", aten_int(s.axis)}, {"start", aten_int(s.start)}, {"end", aten_int(s.end)}});
}
HFX_ATEN_OP(Concat) {
  return aten_call("cat.default", {{"tensors", aten_tensors({n.inputs.begin(), n.inputs.end()})},
                                   {"dim", aten_int(n.attrs_as<ConcatAttrs>().axis)}});
}
HFX_ATEN_OP(KVAppend) {
  return aten_call("cat.default", {{"tensors", aten_tensors({n.inputs[0], n.inputs[1]})}, {"dim", aten_int(2)}});
}

// ONNX Gather: data[..., indices, ...] with the indices' dims in place of `axis`, which is what
// index.Tensor does with one index tensor after `axis` full slices.
HFX_ATEN_OP(Gather) {
  std::vector<const Value*> indices(static_cast<size_t>(n.attrs_as<AxisAttrs>().axis), nullptr);
  indices.push_back(n.inputs[1]);
  return aten_call("index.Tensor", {self(n), {"indices", aten_optional_tensors(std::move(indices))}});
}

HFX_ATEN_OP(Where) {
  return aten_call("where.self", {{"condition", aten_tensor(n.inputs[0])}, self(n, 1), other(n, 2)});
}

// start, limit and delta are shape arithmetic (SymInts).
HFX_ATEN_OP(Range) {
  return aten_call("arange.start_step", {{"start", aten_shape_int(n.inputs[0])}, {"end", aten_shape_int(n.inputs[1])},
                                         {"step", aten_shape_int(n.inputs[2])},
                                         {"dtype", aten_scalar_type(n.outputs[0]->dtype)}});
}

HFX_ATEN_OP(GatherElements) {
  return aten_call("gather.default", {self(n), {"dim", aten_int(n.attrs_as<AxisAttrs>().axis)},
                                      {"index", aten_tensor(n.inputs[1])}});
}

HFX_ATEN_OP(ScatterElements) {
  return aten_call("scatter.src", {self(n), {"dim", aten_int(n.attrs_as<AxisAttrs>().axis)},
                                   {"index", aten_tensor(n.inputs[1])}, {"src", aten_tensor(n.inputs[2])}});
}

// The weight stays [out, in] (linear reads it transposed).
HFX_ATEN_OP(Linear) {
  return aten_call("linear.default",
                   {{"input", aten_tensor(n.inputs[0])}, {"weight", aten_tensor(n.inputs[1])}, {"bias", optional_input(n, 2)}});
}
HFX_ATEN_OP(Embedding) {
  return aten_call("embedding.default", {{"weight", aten_tensor(n.inputs[0])}, {"indices", aten_tensor(n.inputs[1])}});
}

}  // namespace
}  // namespace hfx
