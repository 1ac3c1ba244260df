// The OpenVINO lowering of each IR op, one registered function per op (public opsets). High-level
// ops without a rule here, or whose native predicate says no, are decomposed into primitives first.
#include <cstdio>
#include <limits>

#include "backends/openvino/lowering.h"
#include "core/error.h"

namespace hfx {
namespace {

// Element-wise ops with numpy broadcasting, by their OpenVINO names.
#define HFX_OV_ELEMENTWISE(Op, type) \
  HFX_OV_OP(Op) { return l.result(n, type, "opset1", kOvNumpy, in); }
HFX_OV_ELEMENTWISE(Add, "Add")
HFX_OV_ELEMENTWISE(Sub, "Subtract")
HFX_OV_ELEMENTWISE(Mul, "Multiply")
HFX_OV_ELEMENTWISE(Div, "Divide")
HFX_OV_ELEMENTWISE(Pow, "Power")
HFX_OV_ELEMENTWISE(Mod, "FloorMod")
HFX_OV_ELEMENTWISE(Max, "Maximum")
HFX_OV_ELEMENTWISE(Min, "Minimum")
HFX_OV_ELEMENTWISE(Equal, "Equal")
HFX_OV_ELEMENTWISE(Less, "Less")
HFX_OV_ELEMENTWISE(LessOrEqual, "LessEqual")
HFX_OV_ELEMENTWISE(Greater, "Greater")
HFX_OV_ELEMENTWISE(And, "LogicalAnd")
HFX_OV_ELEMENTWISE(Where, "Select")
#undef HFX_OV_ELEMENTWISE

#define HFX_OV_UNARY(Op, type) \
  HFX_OV_OP(Op) { return l.result(n, type, "opset1", {}, in); }
HFX_OV_UNARY(Sqrt, "Sqrt")
HFX_OV_UNARY(Exp, "Exp")
HFX_OV_UNARY(Log, "Log")
HFX_OV_UNARY(Tanh, "Tanh")
HFX_OV_UNARY(Erf, "Erf")
HFX_OV_UNARY(Cos, "Cos")
HFX_OV_UNARY(Sin, "Sin")
HFX_OV_UNARY(Sigmoid, "Sigmoid")
HFX_OV_UNARY(Not, "LogicalNot")
#undef HFX_OV_UNARY

// x * -1: the form OpenVINO's RoPE fusion matches in rotate_half.
HFX_OV_OP(Neg) { return l.result(n, "Multiply", "opset1", kOvNumpy, {in[0], l.scalar(-1.0, n.inputs[0]->dtype)}); }

// No public Reciprocal: 1 / x.
HFX_OV_OP(Reciprocal) { return l.result(n, "Divide", "opset1", kOvNumpy, {l.scalar(1.0, n.inputs[0]->dtype), in[0]}); }

HFX_OV_OP(BitwiseAnd) { return l.result(n, "BitwiseAnd", "opset13", kOvNumpy, in); }
HFX_OV_OP(BitShiftRight) { return l.result(n, "BitwiseRightShift", "opset15", kOvNumpy, in); }

HFX_OV_OP(MatMul) { return l.result(n, "MatMul", "opset1", {{"transpose_a", "false"}, {"transpose_b", "false"}}, in); }

// The weight stays [out, in]: MatMul reads it transposed.
HFX_OV_OP(Linear) {
  const Value* y = n.outputs[0];
  const bool bias = n.input(2) != nullptr;
  OvPort out = l.op("MatMul", "opset1", n, {{"transpose_a", "false"}, {"transpose_b", "true"}}, {in[0], in[1]},
                    y->dtype, y->shape, bias ? "/matmul" : "");
  return bias ? l.result(n, "Add", "opset1", kOvNumpy, {out, in[2]}) : out;
}

// The weight-compression subgraph OpenVINO's CPU plugin keeps compressed (Convert -> Subtract zero
// point -> Multiply scale), reshaped to [N, K] for a MatMul that reads it transposed. Unlike the
// f16 path, the Convert must not carry the "decompression" mark: with it the plugin folds the
// weights to f32 at compile time (measured). Codes, scales and bias are fetched here, in that order.
HFX_OV_OP_RULE(QuantizedLinear, nullptr, 0b1110) {
  const Value* codes = n.inputs[1];
  const OvPort packed = l.compressed_weight(codes), scales = l.compressed_weight(n.inputs[2]);
  const Value* bias = n.input(3);
  const OvPort bias_port = bias ? l.port(bias) : OvPort{};
  const QuantizedLinearAttrs& q = n.attrs_as<QuantizedLinearAttrs>();
  const int64_t rows = codes->shape[0].value(), groups = codes->shape[1].value(), group = q.group_size;
  const Shape grouped{Dim(rows), Dim(groups), Dim(group)};
  OvPort w = l.op("Convert", "opset1", n, {{"destination_type", "f32"}}, {packed}, DType::F32, grouped, "/decompress");
  const double zero_point = static_cast<double>(int64_t{1} << (q.bits - 1));
  w = l.op("Subtract", "opset1", n, kOvNumpy, {w, l.scalar(zero_point, DType::F32)}, DType::F32, grouped,
           "/zero_point");
  w = l.op("Multiply", "opset1", n, kOvNumpy, {w, scales}, DType::F32, grouped, "/scale");
  w = l.op("Reshape", "opset1", n, {{"special_zero", "false"}}, {w, l.i64_vector({rows, groups * group})}, DType::F32,
           Shape{Dim(rows), Dim(groups * group)}, "/weight");
  OvPort out = l.op("MatMul", "opset1", n, {{"transpose_a", "false"}, {"transpose_b", "true"}}, {in[0], w},
                    n.outputs[0]->dtype, n.outputs[0]->shape, bias ? "/matmul" : "");
  return bias ? l.result(n, "Add", "opset1", kOvNumpy, {out, bias_port}) : out;
}

HFX_OV_OP(Embedding) { return l.result(n, "Gather", "opset8", {{"batch_dims", "0"}}, {in[0], in[1], l.i64({0}, {})}); }

HFX_OV_OP(Softplus) { return l.result(n, "SoftPlus", "opset4", {}, in); }
HFX_OV_OP(Pad) {
  const PadAttrs& p = n.attrs_as<PadAttrs>();
  return l.result(n, "Pad", "opset12", {{"pad_mode", "constant"}},
                  {in[0], l.i64_vector(p.begin), l.i64_vector(p.end), l.scalar(p.value, n.inputs[0]->dtype)});
}

std::string ov_ints(const std::vector<int64_t>& v) {
  std::string out;
  for (int64_t x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

// Convolution, or GroupConvolution over the weight regrouped [group, O / group, C / group, *kernel];
// a bias is added over the channel axis.
HFX_OV_OP(Conv) {
  const ConvAttrs& c = n.attrs_as<ConvAttrs>();
  const Value* w = n.inputs[1];
  const OvNetwork::Attrs attrs = {{"strides", ov_ints(c.strides)}, {"pads_begin", ov_ints(c.pads)},
                                  {"pads_end", ov_ints(c.pads)}, {"dilations", ov_ints(c.dilations)},
                                  {"auto_pad", "explicit"}};
  const Value* y = n.outputs[0];
  OvPort weight = in[1];
  if (c.group > 1) {
    std::vector<int64_t> grouped = {c.group, w->shape[0].value() / c.group};
    for (size_t i = 1; i < w->rank(); ++i) grouped.push_back(w->shape[i].value());
    Shape grouped_shape(grouped.begin(), grouped.end());
    weight = l.op("Reshape", "opset1", n, {{"special_zero", "false"}}, {in[1], l.i64_vector(grouped)}, w->dtype,
                  grouped_shape, "/weight");
  }
  const std::string type = c.group > 1 ? "GroupConvolution" : "Convolution";
  if (!n.input(2)) return l.result(n, type, "opset1", attrs, {in[0], weight});
  const OvPort conv = l.op(type, "opset1", n, attrs, {in[0], weight}, y->dtype, y->shape, "/conv");
  std::vector<int64_t> channel(y->rank(), 1);
  channel[1] = y->shape[1].value();
  const OvPort bias = l.op("Reshape", "opset1", n, {{"special_zero", "false"}}, {in[2], l.i64_vector(channel)},
                           y->dtype, Shape(channel.begin(), channel.end()), "/bias");
  return l.result(n, "Add", "opset1", kOvNumpy, {conv, bias});
}

HFX_OV_OP(CumSum) {
  return l.result(n, "CumSum", "opset3", {{"exclusive", "false"}, {"reverse", "false"}},
                  {in[0], l.i64({n.attrs_as<AxisAttrs>().axis}, {})});
}
HFX_OV_OP(Softmax) {
  return l.result(n, "SoftMax", "opset8", {{"axis", std::to_string(n.attrs_as<AxisAttrs>().axis)}}, in);
}

OvPort lower_reduce(OvLowering& l, const char* type, const Node& n, const std::vector<OvPort>& in) {
  const ReduceAttrs& r = n.attrs_as<ReduceAttrs>();
  std::vector<int64_t> axes = r.axes;
  if (axes.empty())
    for (size_t i = 0; i < n.inputs[0]->rank(); ++i) axes.push_back(static_cast<int64_t>(i));
  return l.result(n, type, "opset1", {{"keep_dims", r.keepdims ? "true" : "false"}}, {in[0], l.i64_vector(axes)});
}
HFX_OV_OP(ReduceMean) { return lower_reduce(l, "ReduceMean", n, in); }
HFX_OV_OP(ReduceMax) { return lower_reduce(l, "ReduceMax", n, in); }
HFX_OV_OP(ReduceSum) { return lower_reduce(l, "ReduceSum", n, in); }
HFX_OV_OP(TopK) {
  const TopKAttrs& t = n.attrs_as<TopKAttrs>();
  const Value* x = n.inputs[0];
  const Shape& shape = n.outputs[0]->shape;
  return l.op_outputs("TopK", "opset11", n,
                      {{"axis", "-1"}, {"mode", "max"}, {"sort", "value"}, {"index_element_type", "i64"}},
                      {in[0], l.i64({t.k}, {})}, {{x->dtype, shape}, {DType::I64, shape}}, t.indices ? 1 : 0);
}

HFX_OV_OP(Cast) {
  return l.result(n, "Convert", "opset1", {{"destination_type", ov_element_type(n.attrs_as<CastAttrs>().to)}}, in);
}

HFX_OV_OP(Reshape) {
  const auto target = reshape_target(n.inputs[0]->shape, n.attrs_as<ShapeAttrs>().shape);
  return l.result(n, "Reshape", "opset1", {{"special_zero", "true"}}, {in[0], l.i64_vector(target)});
}

HFX_OV_OP(Transpose) { return l.result(n, "Transpose", "opset1", {}, {in[0], l.i64_vector(n.attrs_as<PermAttrs>().perm)}); }

// A slice that runs to the end is written with INT32_MAX, the sentinel OpenVINO's fusion
// patterns (RoPE's rotate_half) look for.
HFX_OV_OP(Slice) {
  const SliceAttrs& s = n.attrs_as<SliceAttrs>();
  const Dim dim = n.inputs[0]->shape[static_cast<size_t>(s.axis)];
  const bool to_end = s.end == INT64_MAX || (dim.is_static() && s.end >= dim.value());
  const int64_t end = to_end ? std::numeric_limits<int32_t>::max() : s.end;
  return l.result(n, "Slice", "opset8", {},
                  {in[0], l.i64({s.start}, {1}), l.i64({end}, {1}), l.i64({1}, {1}), l.i64({s.axis}, {1})});
}

// The last axis as -1, as fusion patterns spell it.
HFX_OV_OP(Concat) {
  const int64_t axis = n.attrs_as<ConcatAttrs>().axis;
  const bool last = axis == static_cast<int64_t>(n.outputs[0]->rank()) - 1;
  return l.result(n, "Concat", "opset1", {{"axis", last ? "-1" : std::to_string(axis)}}, in);
}

HFX_OV_OP(Gather) {
  return l.result(n, "Gather", "opset8", {{"batch_dims", "0"}}, {in[0], in[1], l.i64({n.attrs_as<AxisAttrs>().axis}, {})});
}

HFX_OV_OP(Unsqueeze) { return l.result(n, "Unsqueeze", "opset1", {}, {in[0], l.i64_vector(n.attrs_as<AxesAttrs>().axes)}); }

HFX_OV_OP(Range) {
  return l.result(n, "Range", "opset4", {{"output_type", ov_element_type(n.outputs[0]->dtype)}}, in);
}

HFX_OV_OP(ShapeOf) { return l.result(n, "ShapeOf", "opset3", {{"output_type", "i64"}}, in); }

HFX_OV_OP(Expand) { return l.result(n, "Broadcast", "opset3", {{"mode", "bidirectional"}}, in); }

HFX_OV_OP(GatherElements) {
  return l.result(n, "GatherElements", "opset6", {{"axis", std::to_string(n.attrs_as<AxisAttrs>().axis)}}, in);
}

HFX_OV_OP(ScatterElements) {
  return l.result(n, "ScatterElementsUpdate", "opset12", {{"reduction", "none"}, {"use_init_val", "true"}},
                  {in[0], in[1], in[2], l.i64({n.attrs_as<AxisAttrs>().axis}, {})});
}

// MoE as the "tiled" block OpenVINO's CPU plugin rewrites into sparse GatherMatmul nodes
// (ConvertTiledMoeBlockToGatherMatmuls: each token through its top-k experts only): the tokens
// tiled over the experts, gate / up / down MatMuls against [E, out, in] constants (transpose_b),
// a one-input Swish (or gpt-oss's biased, clamped form over the fused gate_up), and the routing
// weights scattered into a dense [E, T, 1] map multiplied in before a ReduceSum over the experts.
// Other forms are decomposed.
// The plugin's two forms: SwiGLU without biases (three GEMMs, gate and up apart), and gpt-oss's
// clamped SwiGLU over the fused interleaved gate_up with biases (two GEMMs).
bool moe_is_plain_swiglu(const Node& n) {
  const MoEAttrs& a = n.attrs_as<MoEAttrs>();
  return a.alpha == 1.0 && a.beta == 0.0 && a.limit == 0.0 && !n.input(4) && !n.input(5);
}
bool moe_is_clamped_swiglu(const Node& n) {
  const MoEAttrs& a = n.attrs_as<MoEAttrs>();
  return a.limit > 0.0 && a.beta == 1.0 && n.input(4) && n.input(5) && n.inputs[4]->is_constant() &&
         n.inputs[5]->is_constant();
}
bool moe_fuses_in_cpu_plugin(const Node& n) {
  return (moe_is_plain_swiglu(n) || moe_is_clamped_swiglu(n)) && n.inputs[2]->is_constant() && n.inputs[3]->is_constant() &&
         n.attrs_as<MoEAttrs>().plain_softmax_routing() && !n.input(6);  // this lowering routes by softmax
}
HFX_OV_OP_RULE(MoE, moe_fuses_in_cpu_plugin, 0b110100) {  // gate_up (halves) and biases are read as views
  const MoEAttrs& a = n.attrs_as<MoEAttrs>();
  const Value *x = n.inputs[0], *gate_up = n.inputs[2], *down = n.inputs[3];
  const DType t = x->dtype;
  const int64_t hidden = x->shape.back().value(), experts = gate_up->shape[0].value();
  const int64_t inter = down->shape[2].value();
  Dim tokens = x->shape[0];
  for (size_t i = 1; i + 1 < x->rank(); ++i)
    tokens = tokens.is_static() && x->shape[i].is_static() ? Dim(tokens.value() * x->shape[i].value())
             : tokens.is_static() ? x->shape[i] : tokens;
  const Shape th{tokens, Dim(hidden)}, te{tokens, Dim(experts)}, tk{tokens, Dim(a.top_k)};
  const Shape eth{Dim(experts), tokens, Dim(hidden)}, eti{Dim(experts), tokens, Dim(inter)};
  auto matmul = [&](OvPort lhs, OvPort w, const Shape& shape) {
    return l.op("MatMul", "opset1", n, {{"transpose_a", "false"}, {"transpose_b", "true"}}, {lhs, w}, t, shape, "/matmul");
  };
  // Gate and up rows of the interleaved [E, 2I, H] weight, as two [E, I, H] constants.
  auto half = [&](int64_t offset, const char* name) {
    auto rows = ConstantData::view(gate_up->constant, {experts * 2 * inter, hidden});
    auto picked = ConstantData::view(ConstantData::strided_rows(rows, offset, 2), {experts, inter, hidden});
    return l.derived_weight(gate_up, picked, gate_up->name + name);
  };
  const OvPort x2 = l.op("Reshape", "opset1", n, {{"special_zero", "false"}}, {in[0], l.i64({-1, hidden}, {2})}, t, th, "/tokens");
  // Routing in float32, as the reference: softmax, top-k, renormalised, scattered to [E, T, 1].
  OvPort logits = l.op("Reshape", "opset1", n, {{"special_zero", "false"}}, {in[1], l.i64({-1, experts}, {2})},
                       n.inputs[1]->dtype, te, "/logits");
  if (n.inputs[1]->dtype != DType::F32)
    logits = l.op("Convert", "opset1", n, {{"destination_type", "f32"}}, {logits}, DType::F32, te, "/logits_f32");
  const OvPort probs = l.op("SoftMax", "opset8", n, {{"axis", "-1"}}, {logits}, DType::F32, te, "/probs");
  const OvNetwork::Attrs topk{{"axis", "-1"}, {"mode", "max"}, {"sort", "value"}, {"index_element_type", "i64"}};
  OvPort weights = l.op_outputs("TopK", "opset11", n, topk, {probs, l.i64({a.top_k}, {})},
                                {{DType::F32, tk}, {DType::I64, tk}}, 0);
  const OvPort chosen{weights.layer, weights.port + 1};
  if (a.normalize) {
    const OvPort sum = l.op("ReduceSum", "opset1", n, {{"keep_dims", "true"}}, {weights, l.i64({-1}, {1})}, DType::F32,
                            {tokens, Dim(1)}, "/weight_sum");
    weights = l.op("Divide", "opset1", n, kOvNumpy, {weights, sum}, DType::F32, tk, "/weights");
  }
  if (t != DType::F32)
    weights = l.op("Convert", "opset1", n, {{"destination_type", ov_element_type(t)}}, {weights}, t, tk, "/weights_t");
  const OvPort shape = l.op("ShapeOf", "opset3", n, {{"output_type", "i64"}}, {logits}, DType::I64, {Dim(2)}, "/logits_shape");
  const OvPort zeros = l.op("Broadcast", "opset3", n, {{"mode", "numpy"}}, {l.scalar(0.0, t), shape}, t, te, "/zeros");
  OvPort routing = l.op("ScatterElementsUpdate", "opset12", n, {{"reduction", "none"}, {"use_init_val", "true"}},
                        {zeros, chosen, weights, l.i64({1}, {})}, t, te, "/routing");
  routing = l.op("Transpose", "opset1", n, {}, {routing, l.i64({1, 0}, {2})}, t, {Dim(experts), tokens}, "/routing_et");
  routing = l.op("Reshape", "opset1", n, {{"special_zero", "false"}}, {routing, l.i64({experts, -1}, {2})}, t,
                 {Dim(experts), tokens}, "/routing_e");
  routing = l.op("Unsqueeze", "opset1", n, {}, {routing, l.i64({-1}, {})}, t, {Dim(experts), tokens, Dim(1)}, "/routing_et1");
  // Every token against every expert's weights: the pattern the plugin turns into gathered GEMMs.
  OvPort tiled = l.op("Tile", "opset1", n, {}, {x2, l.i64({experts, 1}, {2})}, t, th, "/tiled");
  tiled = l.op("Reshape", "opset1", n, {{"special_zero", "false"}}, {tiled, l.i64({experts, -1, hidden}, {3})}, t, eth,
               "/tiled_e");
  OvPort h;
  if (moe_is_plain_swiglu(n)) {
    const OvPort gate = l.op("Swish", "opset4", n, {}, {matmul(tiled, half(0, ".gate"), eti)}, t, eti, "/swish");
    const OvPort up = matmul(tiled, half(1, ".up"), eti);
    h = l.op("Multiply", "opset1", n, kOvNumpy, {gate, up}, t, eti, "/glu");
  } else {  // gpt-oss: biased fused gate_up, gate / up as its even / odd columns
    const Shape et2i{Dim(experts), tokens, Dim(2 * inter)};
    auto bias = [&](size_t i, int64_t width, const char* name) {
      const Value* b = n.inputs[i];
      return l.derived_weight(b, ConstantData::view(b->constant, {experts, 1, width}), b->name + name);
    };
    OvPort gu = matmul(tiled, l.port(gate_up), et2i);
    gu = l.op("Add", "opset1", n, kOvNumpy, {gu, bias(4, 2 * inter, ".e1")}, t, et2i, "/gate_up");
    auto columns = [&](int64_t start) {
      return l.op("Slice", "opset8", n, {}, {gu, l.i64({start}, {1}), l.i64({2 * inter}, {1}), l.i64({2}, {1}), l.i64({2}, {1})},
                  t, eti, "/cols");
    };
    char limit[32];
    std::snprintf(limit, sizeof limit, "%.9g", a.limit);
    OvPort up = l.op("Clamp", "opset1", n, {{"min", std::string("-") + limit}, {"max", limit}}, {columns(1)}, t, eti, "/up");
    up = l.op("Add", "opset1", n, kOvNumpy, {up, l.scalar(a.beta, t)}, t, eti, "/up1");
    OvPort gate = l.op("Minimum", "opset1", n, kOvNumpy, {columns(0), l.scalar(a.limit, t)}, t, eti, "/gate");
    gate = l.op("Swish", "opset4", n, {}, {gate, l.scalar(a.alpha, t)}, t, eti, "/swish");
    h = l.op("Multiply", "opset1", n, kOvNumpy, {up, gate}, t, eti, "/glu");
  }
  OvPort out = matmul(h, in[3], eth);
  if (moe_is_clamped_swiglu(n))
    out = l.op("Add", "opset1", n, kOvNumpy, {out, [&] {
                 const Value* b = n.inputs[5];
                 return l.derived_weight(b, ConstantData::view(b->constant, {experts, 1, hidden}), b->name + ".e1");
               }()},
               t, eth, "/down_bias");
  out = l.op("Reshape", "opset1", n, {{"special_zero", "false"}}, {out, l.i64({experts, -1, hidden}, {3})}, t, eth, "/out_e");
  out = l.op("Multiply", "opset1", n, kOvNumpy, {out, routing}, t, eth, "/weighted");
  out = l.op("ReduceSum", "opset1", n, {{"keep_dims", "false"}}, {out, l.i64({0}, {1})}, t, th, "/sum");
  const OvPort x_shape = l.op("ShapeOf", "opset3", n, {{"output_type", "i64"}}, {in[0]}, DType::I64,
                              {Dim(static_cast<int64_t>(x->rank()))}, "/shape");
  return l.result(n, "Reshape", "opset1", {{"special_zero", "false"}}, {out, x_shape});
}

HFX_OV_OP(GELU) {
  const bool tanh = n.attrs_as<GELUAttrs>().approximate == GeluApproximation::Tanh;
  return l.result(n, "Gelu", "opset7", {{"approximation_mode", tanh ? "TANH" : "ERF"}}, in);
}

// MVN-6 over the last axis (variance inside the sqrt, as torch), then the scale and the bias.
HFX_OV_OP(LayerNorm) {
  const Value* x = n.inputs[0];
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.9g", n.attrs_as<NormAttrs>().epsilon);
  const OvPort normed = l.op("MVN", "opset6", n,
                             {{"normalize_variance", "true"}, {"eps", eps}, {"eps_mode", "inside_sqrt"}},
                             {in[0], l.i64({-1}, {1})}, x->dtype, x->shape, "/mvn");
  if (!n.input(2)) return l.result(n, "Multiply", "opset1", kOvNumpy, {normed, in[1]});
  const OvPort scaled = l.op("Multiply", "opset1", n, kOvNumpy, {normed, in[1]}, x->dtype, x->shape, "/scale");
  return l.result(n, "Add", "opset1", kOvNumpy, {scaled, in[2]});
}

// Grouped kv heads repeated to the query heads, the shape the CPU plugin's SDPA fusions expect:
// [B, Hkv, T, D] -> Unsqueeze -> Broadcast [B, Hkv, G, T, D] -> Reshape [B, Hkv * G, T, D].
OvPort repeat_kv(OvLowering& l, const Node& n, OvPort kv, const Value* value, int64_t groups) {
  const Shape& s = value->shape;
  const Shape five{s[0], s[1], Dim(groups), s[2], s[3]};
  const OvPort unsqueezed = l.op("Unsqueeze", "opset1", n, {}, {kv, l.i64({2}, {1})}, value->dtype,
                                 {s[0], s[1], Dim(int64_t{1}), s[2], s[3]}, "/kv_unsqueeze");
  const OvPort target = l.i64({1, 1, groups, 1, 1}, {5});
  const OvPort broadcast = l.op("Broadcast", "opset3", n, {{"mode", "bidirectional"}}, {unsqueezed, target},
                                value->dtype, five, "/kv_broadcast");
  const Shape four{s[0], Dim(s[1].value() * groups), s[2], s[3]};
  return l.op("Reshape", "opset1", n, {{"special_zero", "true"}}, {broadcast, l.i64(reshape_target(five, four), {4})},
              value->dtype, four, "/kv_reshape");
}

// SDPA has no softcap and no sinks.
bool no_softcap(const Node& n) {  // nor sinks, nor an additive bias
  return n.attrs_as<AttentionAttrs>().softcap == 0.0 && !n.input(4) && !n.input(5);
}

// ScaledDotProductAttention (opset13) with an additive mask: masked scores get the lowest finite
// value so fully padded rows stay finite, as in the reference decomposition.
HFX_OV_OP_NATIVE(Attention, no_softcap) {
  HFX_CHECK(!n.input(5), "internal error: ", n.name, ": a native attention was given an additive bias");
  const Value* q = n.inputs[0];
  const int64_t groups = q->shape[1].value() / n.inputs[1]->shape[1].value();
  OvPort k = in[1], v = in[2];
  if (groups > 1) {
    k = repeat_kv(l, n, k, n.inputs[1], groups);
    v = repeat_kv(l, n, v, n.inputs[2], groups);
  }
  const AttentionAttrs& a = n.attrs_as<AttentionAttrs>();
  // Unmasked (cross-attention over cached encoder keys): the CPU plugin decomposes it and would
  // multiply the scale into every key each step; scaling the query rows instead costs nothing.
  const bool scale_query = !n.input(3) && a.scale != 1.0;
  const OvPort query = scale_query ? l.op("Multiply", "opset1", n, kOvNumpy, {in[0], l.scalar(a.scale, q->dtype)},
                                          q->dtype, q->shape, "/scaled_query")
                                   : in[0];
  std::vector<OvPort> inputs{query, k, v};
  if (const Value* mask = n.input(3)) {
    OvPort& additive = l.additive_mask(mask);
    if (additive.layer < 0) {
      const float lowest = q->dtype == DType::F16 ? -65504.0f : std::numeric_limits<float>::lowest();
      additive = l.op("Select", "opset1", n, kOvNumpy, {in[3], l.scalar(0.0, q->dtype), l.scalar(lowest, q->dtype)},
                      q->dtype, mask->shape, "/additive_mask");
    }
    inputs.push_back(additive);
  } else {
    inputs.push_back(l.scalar(0.0, q->dtype));
  }
  HFX_CHECK(a.softcap == 0.0, "OpenVINO SDPA has no softcap (decompose instead)");
  inputs.push_back(l.scalar(scale_query ? 1.0 : a.scale, q->dtype));
  return l.result(n, "ScaledDotProductAttention", "opset13", {{"causal", "false"}}, inputs);
}

}  // namespace
}  // namespace hfx
