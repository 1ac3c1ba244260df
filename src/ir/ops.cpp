// The op table (ops.def) and each op's shape/dtype rule. Rules check what they rely on; a failure
// is a bug in a frontend or pass, reported as an internal error.
#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "ir/builder.h"
#include "ir/graph.h"

namespace hfx {
namespace {

using Inputs = std::vector<Value*>;
using Types = std::vector<ValueType>;

template <class A>
const A& attrs(const OpAttrs& a) {
  return std::get<A>(a);
}

Types one(DType dtype, Shape shape) { return {{dtype, std::move(shape)}}; }

void need(bool ok, const char* what) {
  if (!ok) fail("internal error: ", what);
}

Types rule_binary(const Inputs& in, const OpAttrs&) {
  need(in[0]->dtype == in[1]->dtype, "operand dtypes differ");
  return one(in[0]->dtype, broadcast_shapes(in[0]->shape, in[1]->shape));
}

Types rule_integer_binary(const Inputs& in, const OpAttrs& a) {
  need(!is_float(in[0]->dtype), "Mod of floats");
  return rule_binary(in, a);
}

Types rule_compare(const Inputs& in, const OpAttrs&) {
  need(in[0]->dtype == in[1]->dtype, "compared dtypes differ");
  return one(DType::Bool, broadcast_shapes(in[0]->shape, in[1]->shape));
}

Types rule_logical(const Inputs& in, const OpAttrs&) {
  for (const Value* v : in) need(v->dtype == DType::Bool, "logical op on a non-bool");
  return one(DType::Bool, in.size() == 1 ? in[0]->shape : broadcast_shapes(in[0]->shape, in[1]->shape));
}

Types rule_same(const Inputs& in, const OpAttrs&) { return one(in[0]->dtype, in[0]->shape); }

Types rule_matmul(const Inputs& in, const OpAttrs&) {
  const Value* a = in[0];
  const Value* b = in[1];
  need(a->rank() >= 2 && b->rank() >= 2 && a->dtype == b->dtype, "MatMul operands");
  need(a->shape.back() == b->shape[b->rank() - 2], "MatMul inner dims differ");
  Shape out = broadcast_shapes(Shape(a->shape.begin(), a->shape.end() - 2), Shape(b->shape.begin(), b->shape.end() - 2));
  out.push_back(a->shape[a->rank() - 2]);
  out.push_back(b->shape.back());
  return one(a->dtype, std::move(out));
}

Types rule_softmax(const Inputs& in, const OpAttrs& a) {
  need(attrs<AxisAttrs>(a).axis < static_cast<int64_t>(in[0]->rank()), "axis out of range");
  return rule_same(in, a);
}

Types rule_reduce(const Inputs& in, const OpAttrs& a) {
  const ReduceAttrs& r = attrs<ReduceAttrs>(a);
  Shape out;
  for (size_t i = 0; i < in[0]->rank(); ++i) {
    const bool reduced = r.axes.empty() || std::find(r.axes.begin(), r.axes.end(), static_cast<int64_t>(i)) != r.axes.end();
    if (!reduced) out.push_back(in[0]->shape[i]);
    else if (r.keepdims) out.push_back(Dim(1));
  }
  return one(in[0]->dtype, std::move(out));
}

Types rule_top_k(const Inputs& in, const OpAttrs& a) {
  const TopKAttrs& t = attrs<TopKAttrs>(a);
  need(in[0]->rank() >= 1 && in[0]->shape.back().is_static() && t.k >= 1 && t.k <= in[0]->shape.back().value(),
       "TopK k");
  Shape out = in[0]->shape;
  out.back() = Dim(t.k);
  return one(t.indices ? DType::I64 : in[0]->dtype, std::move(out));
}

Types rule_moe(const Inputs& in, const OpAttrs& a) {
  const Value *x = in[0], *logits = in[1], *gate_up = in[2], *down = in[3];
  need(gate_up->rank() == 3 && down->rank() == 3 && logits->rank() == x->rank(), "MoE ranks");
  const Dim& experts = gate_up->shape[0];
  need(logits->shape.back() == experts && down->shape[0] == experts, "MoE experts");
  need(gate_up->shape[2] == x->shape.back() && down->shape[1] == x->shape.back(), "MoE hidden size");
  need(gate_up->shape[1].value() == 2 * down->shape[2].value(), "MoE intermediate size");
  need(attrs<MoEAttrs>(a).top_k >= 1 && attrs<MoEAttrs>(a).top_k <= experts.value(), "MoE top_k");
  need(in.size() < 7 || !in[6] || (in[6]->rank() == 1 && in[6]->shape[0] == experts), "MoE selection bias");
  return one(x->dtype, x->shape);
}

Types rule_quantized_moe(const Inputs& in, const OpAttrs& a) {
  const Value *x = in[0], *logits = in[1];
  const QuantizedMoEAttrs& q = attrs<QuantizedMoEAttrs>(a);
  need(logits->rank() == x->rank() && logits->shape.back().is_static(), "QuantizedMoE logits");
  const int64_t experts = logits->shape.back().value(), hidden = x->shape.back().value();
  const int64_t group = q.quant.group_size, group_bytes = group * q.quant.bits / 8;
  auto check = [&](const Value* codes, const Value* scales, int64_t in_features, const char* what) {
    need(codes->rank() == 3 && scales->rank() == 2 && codes->shape[0] == scales->shape[0] &&
             codes->shape[0].value() % experts == 0 && codes->shape[1].value() * group == in_features &&
             codes->shape[2].value() == group_bytes && scales->shape[1] == codes->shape[1],
         what);
    return codes->shape[0].value() / experts;  // the weight's rows per expert
  };
  const int64_t gate_up_rows = check(in[2], in[3], hidden, "QuantizedMoE gate_up");
  need(check(in[4], in[5], gate_up_rows / 2, "QuantizedMoE down") == hidden, "QuantizedMoE down rows");
  need(q.moe.top_k >= 1 && q.moe.top_k <= experts, "QuantizedMoE top_k");
  need(in.size() < 9 || !in[8] || (in[8]->rank() == 1 && in[8]->shape[0] == Dim(experts)), "QuantizedMoE selection bias");
  return one(x->dtype, x->shape);
}

Types rule_cast(const Inputs& in, const OpAttrs& a) { return one(attrs<CastAttrs>(a).to, in[0]->shape); }

Types rule_reshape(const Inputs& in, const OpAttrs& a) { return one(in[0]->dtype, attrs<ShapeAttrs>(a).shape); }

Types rule_transpose(const Inputs& in, const OpAttrs& a) {
  const auto& perm = attrs<PermAttrs>(a).perm;
  need(perm.size() == in[0]->rank(), "Transpose perm rank");
  Shape out;
  for (int64_t p : perm) {
    need(p >= 0 && p < static_cast<int64_t>(in[0]->rank()), "Transpose perm entry");
    out.push_back(in[0]->shape[static_cast<size_t>(p)]);
  }
  return one(in[0]->dtype, std::move(out));
}

Types rule_slice(const Inputs& in, const OpAttrs& a) {
  const SliceAttrs& s = attrs<SliceAttrs>(a);
  need(s.axis >= 0 && s.axis < static_cast<int64_t>(in[0]->rank()), "Slice axis");
  Shape out = in[0]->shape;
  const Dim d = out[static_cast<size_t>(s.axis)];
  if (d.is_static()) {
    const int64_t b = std::clamp(s.start < 0 ? s.start + d.value() : s.start, int64_t{0}, d.value());
    const int64_t e = std::clamp(s.end < 0 ? s.end + d.value() : s.end, int64_t{0}, d.value());
    out[static_cast<size_t>(s.axis)] = Dim(std::max<int64_t>(0, e - b));
  } else if (s.start < 0 && s.end == INT64_MAX) {  // the last -start entries (the dim must hold them)
    out[static_cast<size_t>(s.axis)] = Dim(-s.start);
  } else {
    need(s.start == 0 && s.end == INT64_MAX, "Slice of a symbolic dim");
  }
  return one(in[0]->dtype, std::move(out));
}

Types rule_concat(const Inputs& in, const OpAttrs& a) {
  const ConcatAttrs& c = attrs<ConcatAttrs>(a);
  need(c.axis >= 0 && c.axis < static_cast<int64_t>(in[0]->rank()), "Concat axis");
  const auto axis = static_cast<size_t>(c.axis);
  Shape out = in[0]->shape;
  for (size_t i = 1; i < in.size(); ++i) {
    need(in[i]->rank() == out.size() && in[i]->dtype == in[0]->dtype, "Concat operands");
    for (size_t j = 0; j < out.size(); ++j)
      if (j != axis) need(in[i]->shape[j] == out[j], "Concat dims differ");
    if (!c.axis_dim) {
      need(out[axis].is_static() && in[i]->shape[axis].is_static(), "Concat of a symbolic axis without its dim");
      out[axis] = Dim(out[axis].value() + in[i]->shape[axis].value());
    }
  }
  if (c.axis_dim) out[axis] = *c.axis_dim;
  return one(in[0]->dtype, std::move(out));
}

Types rule_gather(const Inputs& in, const OpAttrs& a) {
  const int64_t axis = attrs<AxisAttrs>(a).axis;
  const Value* data = in[0];
  need(axis >= 0 && axis < static_cast<int64_t>(data->rank()), "Gather axis");
  Shape out(data->shape.begin(), data->shape.begin() + axis);
  out.insert(out.end(), in[1]->shape.begin(), in[1]->shape.end());
  out.insert(out.end(), data->shape.begin() + axis + 1, data->shape.end());
  return one(data->dtype, std::move(out));
}

Types rule_unsqueeze(const Inputs& in, const OpAttrs& a) {
  const auto& axes = attrs<AxesAttrs>(a).axes;
  const size_t rank = in[0]->rank() + axes.size();
  Shape out;
  size_t src = 0;
  for (size_t i = 0; i < rank; ++i) {
    if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) != axes.end()) out.push_back(Dim(1));
    else out.push_back(in[0]->shape[src++]);
  }
  need(src == in[0]->rank(), "Unsqueeze axes");
  return one(in[0]->dtype, std::move(out));
}

Types rule_where(const Inputs& in, const OpAttrs&) {
  need(in[0]->dtype == DType::Bool && in[1]->dtype == in[2]->dtype, "Where operands");
  return one(in[1]->dtype, broadcast_shapes(in[0]->shape, broadcast_shapes(in[1]->shape, in[2]->shape)));
}

Types rule_range(const Inputs& in, const OpAttrs& a) {
  need(in[0]->dtype == in[1]->dtype && in[1]->dtype == in[2]->dtype, "Range operands");
  return one(in[0]->dtype, {attrs<RangeAttrs>(a).length});
}

Types rule_shape_of(const Inputs& in, const OpAttrs&) {
  return one(DType::I64, {Dim(static_cast<int64_t>(in[0]->rank()))});
}

Types rule_expand(const Inputs& in, const OpAttrs& a) {
  need(in[1]->dtype == DType::I64 && in[1]->rank() == 1, "Expand shape tensor");
  return one(in[0]->dtype, attrs<ShapeAttrs>(a).shape);
}

Types rule_scatter(const Inputs& in, const OpAttrs& a) {
  need(in[0]->rank() == in[1]->rank() && in[1]->shape == in[2]->shape && in[0]->dtype == in[2]->dtype,
       "ScatterElements operands");
  need(attrs<AxisAttrs>(a).axis < static_cast<int64_t>(in[0]->rank()), "ScatterElements axis");
  return one(in[0]->dtype, in[0]->shape);
}

// The result has the indices' shape; off the axis they index no further than data reaches.
Types rule_gather_elements(const Inputs& in, const OpAttrs& a) {
  const int64_t axis = attrs<AxisAttrs>(a).axis;
  need(in[0]->rank() == in[1]->rank() && in[1]->dtype == DType::I64, "GatherElements operands");
  need(axis >= 0 && axis < static_cast<int64_t>(in[0]->rank()), "GatherElements axis");
  return one(in[0]->dtype, in[1]->shape);
}

Types rule_linear(const Inputs& in, const OpAttrs&) {
  const Value* w = in[1];
  need(w->rank() == 2 && in[0]->shape.back() == w->shape[1], "Linear weight does not match the input");
  if (in.size() > 2 && in[2]) need(in[2]->rank() == 1 && in[2]->shape[0] == w->shape[0], "Linear bias");
  Shape out = in[0]->shape;
  out.back() = w->shape[0];
  return one(in[0]->dtype, std::move(out));
}

Types rule_quantized_linear(const Inputs& in, const OpAttrs& a) {
  const QuantizedLinearAttrs& q = attrs<QuantizedLinearAttrs>(a);
  const Value* codes = in[1];
  need(codes->dtype == DType::U8 && codes->rank() == 3 && in[2]->rank() == 2, "QuantizedLinear codes/scales");
  need(codes->shape[1].value() * q.group_size == in[0]->shape.back().value(), "QuantizedLinear groups");
  Shape out = in[0]->shape;
  out.back() = codes->shape[0];
  return one(in[0]->dtype, std::move(out));
}

Types rule_quantized_embedding(const Inputs& in, const OpAttrs& a) {
  const QuantizedLinearAttrs& q = attrs<QuantizedLinearAttrs>(a);
  const Value* codes = in[0];
  need(codes->dtype == DType::U8 && codes->rank() == 3 && in[1]->rank() == 2 && in[2]->dtype == DType::I64,
       "QuantizedEmbedding operands");
  need(codes->shape[2].value() * 8 == q.group_size * q.bits, "QuantizedEmbedding group bytes");
  Shape out = in[2]->shape;
  out.push_back(Dim(codes->shape[1].value() * q.group_size));
  return one(in[1]->dtype, std::move(out));
}

Types rule_embedding(const Inputs& in, const OpAttrs&) {
  need(in[0]->rank() == 2 && in[1]->dtype == DType::I64, "Embedding operands");
  Shape out = in[1]->shape;
  out.push_back(in[0]->shape[1]);
  return one(in[0]->dtype, std::move(out));
}

Types rule_rms_norm(const Inputs& in, const OpAttrs& a) {
  need(in[1]->rank() == 1 && in[1]->shape[0] == in[0]->shape.back(), "RMSNorm weight");
  return rule_same(in, a);
}

Types rule_layer_norm(const Inputs& in, const OpAttrs& a) {
  const Dim& h = in[0]->shape.back();
  need(in[1]->rank() == 1 && in[1]->shape[0] == h, "LayerNorm weight");
  need(in.size() < 3 || !in[2] || (in[2]->rank() == 1 && in[2]->shape[0] == h), "LayerNorm bias");
  return rule_same(in, a);
}

Types rule_rope(const Inputs& in, const OpAttrs& a) {
  need(in[0]->rank() == 4 && in[1]->rank() == 3 && in[1]->shape == in[2]->shape, "RoPE ranks");
  return rule_same(in, a);
}

Types rule_rope_table(const Inputs& in, const OpAttrs&) {
  need(in[0]->rank() == 2 && in[0]->dtype == DType::I64 && in[1]->rank() == 1 && in[1]->dtype == DType::F32,
       "RoPETable operands");
  return one(DType::F32, {in[0]->shape[0], in[0]->shape[1], Dim(2 * in[1]->shape[0].value())});
}

Types rule_attention(const Inputs& in, const OpAttrs&) {
  const Value *q = in[0], *k = in[1], *v = in[2];
  need(q->rank() == 4 && k->rank() == 4 && v->rank() == 4, "Attention ranks");
  need(q->shape[1].value() % k->shape[1].value() == 0, "Attention heads");
  need(in.size() < 5 || !in[4] || (in[4]->rank() == 1 && in[4]->shape[0] == q->shape[1]), "Attention sinks");
  if (const Value* bias = in.size() > 5 ? in[5] : nullptr) {
    need(bias->rank() == 4 && is_float(bias->dtype), "Attention bias rank / dtype");
    need((bias->shape[1] == Dim(1) || bias->shape[1] == q->shape[1]) && bias->shape[2] == q->shape[2] &&
             bias->shape[3] == k->shape[2],
         "Attention bias dims");
  }
  Shape out = q->shape;
  out[3] = v->shape[3];
  return one(q->dtype, std::move(out));
}

Types rule_gated_delta_rule(const Inputs& in, const OpAttrs&) {
  const Value *q = in[0], *k = in[1], *v = in[2], *decay = in[3], *beta = in[4], *state = in[5];
  for (const Value* x : in) need(x->dtype == DType::F32, "GatedDeltaRule computes in float32");
  need(q->rank() == 4 && k->shape == q->shape && v->rank() == 4, "GatedDeltaRule q / k / v ranks");
  need(v->shape[0] == q->shape[0] && v->shape[1] == q->shape[1] && v->shape[2] == q->shape[2], "GatedDeltaRule v");
  const Shape gates(q->shape.begin(), q->shape.begin() + 3);
  need(decay->shape == gates && beta->shape == gates, "GatedDeltaRule decay / beta [B, L, H]");
  need(state->shape == Shape{q->shape[0], q->shape[2], q->shape[3], v->shape[3]}, "GatedDeltaRule state [B, H, Dk, Dv]");
  return {{DType::F32, v->shape}, {DType::F32, state->shape}};
}

Types rule_causal_conv(const Inputs& in, const OpAttrs&) {
  const Value *x = in[0], *weight = in[1], *state = in[2], *bias = in.size() > 3 ? in[3] : nullptr;
  need(x->rank() == 3 && weight->rank() == 3 && weight->shape[1] == Dim(1) && weight->shape[0] == x->shape[2] &&
           weight->shape[2].is_static() && weight->shape[2].value() >= 2,
       "CausalConv x [B, L, C], weight [C, 1, K >= 2]");
  need(state->shape == Shape{x->shape[0], x->shape[2], Dim(weight->shape[2].value() - 1)}, "CausalConv state [B, C, K - 1]");
  need(!bias || bias->shape == Shape{x->shape[2]}, "CausalConv bias [C]");
  for (const Value* v : in) need(v->dtype == x->dtype, "CausalConv operands share one type");
  return {{x->dtype, x->shape}, {x->dtype, state->shape}};
}

Types rule_state_space_scan(const Inputs& in, const OpAttrs&) {
  const Value *x = in[0], *dt = in[1], *a = in[2], *bm = in[3], *cm = in[4], *state = in[5];
  for (const Value* v : in) need(v->dtype == DType::F32, "StateSpaceScan computes in float32");
  need(x->rank() == 4 && bm->rank() == 4 && cm->shape == bm->shape, "StateSpaceScan x / b / c ranks");
  need(bm->shape[0] == x->shape[0] && bm->shape[1] == x->shape[1], "StateSpaceScan b / c [B, L, G, N]");
  need(x->shape[2].is_static() && bm->shape[2].is_static() && x->shape[2].value() % bm->shape[2].value() == 0,
       "StateSpaceScan groups divide heads");
  need(dt->shape == Shape(x->shape.begin(), x->shape.begin() + 3), "StateSpaceScan dt [B, L, H]");
  need(a->shape == Shape{x->shape[2]}, "StateSpaceScan a [H]");
  need(state->shape == Shape{x->shape[0], x->shape[2], x->shape[3], bm->shape[3]}, "StateSpaceScan state [B, H, P, N]");
  return {{DType::F32, x->shape}, {DType::F32, state->shape}};
}

Types rule_kv_append(const Inputs& in, const OpAttrs& a) {
  need(in[0]->rank() == 4 && in[1]->rank() == 4 && in[0]->dtype == in[1]->dtype, "KVAppend operands");
  Shape out = in[0]->shape;
  out[2] = attrs<KVAppendAttrs>(a).total;
  return one(in[0]->dtype, std::move(out));
}

Types rule_pad(const Inputs& in, const OpAttrs& a) {
  const PadAttrs& p = attrs<PadAttrs>(a);
  const Shape& x = in[0]->shape;
  need(p.begin.size() == x.size() && p.end.size() == x.size() && p.shape.size() == x.size(), "Pad rank");
  for (size_t i = 0; i < x.size(); ++i) need(dim_plus(x[i], p.begin[i] + p.end[i]).is(p.shape[i]), "Pad result dim");
  return one(in[0]->dtype, p.shape);
}

// A spatial result dim: (in + 2 pad - dilation (kernel - 1) - 1) // stride + 1, in the form the
// builder makes it (core/shape.h).
bool conv_dim_is(const Dim& out, const Dim& in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  const int64_t shift = 2 * pad - dilation * (kernel - 1) - 1;
  if (stride == 1) return dim_plus(in, shift + 1).is(out);
  if (in.is_static()) return out == Dim((in.value() + shift) / stride + 1);
  const Symbol* s = out.symbol();
  if (!s || s->op != Symbol::Op::Add || s->b || s->k != 1) return false;
  const Symbol* quotient = s->a;
  return quotient->op == Symbol::Op::FloorDiv && quotient->k == stride && dim_plus(in, shift).is(Dim(quotient->a));
}

Types rule_conv(const Inputs& in, const OpAttrs& a) {
  const ConvAttrs& c = attrs<ConvAttrs>(a);
  const Value* bias = in.size() > 2 ? in[2] : nullptr;
  const Shape& x = in[0]->shape;
  const Shape& w = in[1]->shape;
  const size_t spatial = x.size() - 2;
  need(x.size() >= 3 && w.size() == x.size() && c.shape.size() == x.size(), "Conv rank");
  need(c.strides.size() == spatial && c.pads.size() == spatial && c.dilations.size() == spatial, "Conv attributes");
  need(in[0]->dtype == in[1]->dtype && (!bias || bias->dtype == in[0]->dtype), "Conv dtypes");
  for (const Dim& d : w) need(d.is_static(), "Conv weight dims");
  need(c.group >= 1 && x[1].is_static() && x[1].value() == w[1].value() * c.group && w[0].value() % c.group == 0,
       "Conv channels");
  need(!bias || (bias->rank() == 1 && bias->shape[0] == w[0]), "Conv bias");
  need(c.shape[0] == x[0] && c.shape[1] == w[0], "Conv result dims");
  for (size_t i = 0; i < spatial; ++i)
    need(conv_dim_is(c.shape[i + 2], x[i + 2], w[i + 2].value(), c.strides[i], c.pads[i], c.dilations[i]),
         "Conv result spatial dim");
  return one(in[0]->dtype, c.shape);
}

// State ops' results have the type the frontend recorded from the state's declaration.
Types rule_state(const Inputs&, const OpAttrs& a) {
  const StateAttrs& s = attrs<StateAttrs>(a);
  return one(s.dtype, s.shape);
}

// Each op's rule under the name the table expects.
#define RULE(op, rule) \
  Types infer_##op(const Inputs& in, const OpAttrs& a) { return rule(in, a); }
RULE(Add, rule_binary)
RULE(Sub, rule_binary)
RULE(Mul, rule_binary)
RULE(Div, rule_binary)
RULE(Pow, rule_binary)
RULE(Mod, rule_integer_binary)
RULE(Max, rule_binary)
RULE(Min, rule_binary)
RULE(BitwiseAnd, rule_binary)
RULE(BitShiftRight, rule_binary)
RULE(Neg, rule_same)
RULE(Sqrt, rule_same)
RULE(Reciprocal, rule_same)
RULE(Exp, rule_same)
RULE(Log, rule_same)
RULE(Tanh, rule_same)
RULE(Erf, rule_same)
RULE(Cos, rule_same)
RULE(Sin, rule_same)
RULE(Sigmoid, rule_same)
RULE(SiLU, rule_same)
RULE(Softplus, rule_same)
RULE(GELU, rule_same)
RULE(MatMul, rule_matmul)
RULE(Softmax, rule_softmax)
RULE(CumSum, rule_softmax)  // an axis of x; same type
RULE(Pad, rule_pad)
RULE(Conv, rule_conv)
RULE(ReduceMean, rule_reduce)
RULE(ReduceMax, rule_reduce)
RULE(ReduceSum, rule_reduce)
RULE(TopK, rule_top_k)
RULE(Cast, rule_cast)
RULE(Reshape, rule_reshape)
RULE(Transpose, rule_transpose)
RULE(Slice, rule_slice)
RULE(Concat, rule_concat)
RULE(Gather, rule_gather)
RULE(Unsqueeze, rule_unsqueeze)
RULE(Where, rule_where)
RULE(Equal, rule_compare)
RULE(Less, rule_compare)
RULE(LessOrEqual, rule_compare)
RULE(Greater, rule_compare)
RULE(And, rule_logical)
RULE(Not, rule_logical)
RULE(Range, rule_range)
RULE(ShapeOf, rule_shape_of)
RULE(Expand, rule_expand)
RULE(ScatterElements, rule_scatter)
RULE(GatherElements, rule_gather_elements)
RULE(Linear, rule_linear)
RULE(QuantizedLinear, rule_quantized_linear)
RULE(Embedding, rule_embedding)
RULE(QuantizedEmbedding, rule_quantized_embedding)
RULE(RMSNorm, rule_rms_norm)
RULE(LayerNorm, rule_layer_norm)
RULE(MoE, rule_moe)
RULE(QuantizedMoE, rule_quantized_moe)
RULE(RoPE, rule_rope)
RULE(RoPETable, rule_rope_table)
RULE(Attention, rule_attention)
RULE(KVAppend, rule_kv_append)
RULE(GatedDeltaRule, rule_gated_delta_rule)
RULE(StateSpaceScan, rule_state_space_scan)
RULE(CausalConv, rule_causal_conv)
RULE(StateRead, rule_state)
RULE(StateUpdate, rule_state)
#undef RULE

template <class A>
size_t attrs_index() {
  return OpAttrs(std::in_place_type<A>).index();
}

std::vector<InputSpec> parse_inputs(std::string_view spec) {
  std::vector<InputSpec> out;
  std::istringstream words{std::string(spec)};
  std::string w;
  while (words >> w) {
    InputSpec s;
    if (w.ends_with("?")) s.optional = true, w.pop_back();
    if (w.ends_with("...")) s.variadic = true, w.resize(w.size() - 3);
    s.name = w;
    out.push_back(s);
  }
  return out;
}

const std::vector<OpInfo>& table() {
  static const std::vector<OpInfo> ops = {
#define X(name, cls, inputs, attrs) {#name, OpClass::cls, parse_inputs(inputs), attrs_index<attrs>(), infer_##name},
#include "ir/ops.def"
#undef X
  };
  return ops;
}

}  // namespace

const OpInfo& op_info(OpKind op) { return table()[static_cast<size_t>(op)]; }
std::string_view op_name(OpKind op) { return op_info(op).name; }
bool op_is_high_level(OpKind op) { return op_info(op).cls == OpClass::HighLevel; }
bool op_is_state(OpKind op) { return op_info(op).cls == OpClass::State; }

std::vector<ValueType> infer_types(OpKind op, const std::vector<Value*>& inputs, const OpAttrs& attrs) {
  const OpInfo& info = op_info(op);
  const std::vector<InputSpec>& specs = info.inputs;
  const bool variadic = !specs.empty() && specs.back().variadic;
  size_t required = 0;
  for (const InputSpec& s : specs) required += !s.optional;
  if (inputs.size() < required || (!variadic && inputs.size() > specs.size()))
    fail("internal error: ", info.name, " takes ", specs.size(), " inputs, got ", inputs.size());
  for (size_t i = 0; i < inputs.size() && !specs.empty(); ++i) {
    const InputSpec& s = specs[std::min(i, specs.size() - 1)];
    if (!inputs[i] && !s.optional) fail("internal error: ", info.name, " input '", s.name, "' is missing");
  }
  if (attrs.index() != info.attrs_index) fail("internal error: ", info.name, " node carries another op's attributes");
  return info.infer(inputs, attrs);
}

}  // namespace hfx
