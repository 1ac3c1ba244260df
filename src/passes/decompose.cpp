// Reference decompositions of the high-level ops into primitives. These define the semantics a
// fused backend op must reproduce; they follow transformers' eager implementations.
#include <cmath>
#include <limits>
#include <map>

#include "core/error.h"
#include "ir/builder.h"
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace hfx {
namespace {

Value* decompose_linear(Builder& b, const Node& n) {
  Value* y = b.matmul(n.inputs[0], b.transpose(n.inputs[1], {1, 0}));
  return n.inputs.size() > 2 && n.inputs[2] ? b.add(y, n.inputs[2]) : y;
}

// Dequantizes codes [..., G, group * bits / 8] with scales [..., G] (core/quantize.h) to values
// [..., G * group] of `dtype`. The unpacking stays in uint8 so that no intermediate is wider than
// the float result.
Value* dequantize(Builder& b, Value* codes, Value* scales, const QuantizedLinearAttrs& q, DType dtype) {
  const int64_t bits = q.bits, group = q.group_size;
  Shape lead(codes->shape.begin(), codes->shape.end() - 1);
  if (bits == 4) {  // two codes per byte, the earlier one in the low nibble
    Value* low = b.binary(OpKind::BitwiseAnd, codes, b.u8_scalar(0x0f));
    Value* high = b.binary(OpKind::BitShiftRight, codes, b.u8_scalar(4));
    Shape unpacked = lead;
    unpacked.push_back(Dim(group));
    codes = b.reshape(b.concat({b.unsqueeze(low, {-1}), b.unsqueeze(high, {-1})}, -1), unpacked);
  }
  Value* levels = b.sub(b.cast(codes, DType::F32), b.scalar(static_cast<double>(int64_t{1} << (bits - 1)), DType::F32));
  Value* w = b.mul(levels, b.unsqueeze(b.cast(scales, DType::F32), {-1}));
  Shape flat(lead.begin(), lead.end() - 1);
  flat.push_back(Dim(lead.back().value() * group));
  return b.cast(b.reshape(w, flat), dtype);
}

// Dequantizes the weight [N, K] and applies it as a Linear (runtimes fold the dequantization at
// load, and skip folding very large intermediates).
Value* decompose_quantized_linear(Builder& b, const Node& n) {
  Value* x = n.inputs[0];
  Value* w = dequantize(b, n.inputs[1], n.inputs[2], n.attrs_as<QuantizedLinearAttrs>(), x->dtype);
  Value* y = b.matmul(x, b.transpose(w, {1, 0}));
  return n.inputs.size() > 3 && n.inputs[3] ? b.add(y, n.inputs[3]) : y;
}

// Gathers the rows' codes and scales, then dequantizes only those rows.
Value* decompose_quantized_embedding(Builder& b, const Node& n) {
  Value* ids = n.inputs[2];
  return dequantize(b, b.gather(n.inputs[0], ids, 0), b.gather(n.inputs[1], ids, 0),
                    n.attrs_as<QuantizedLinearAttrs>(), n.inputs[1]->dtype);
}

Value* decompose_embedding(Builder& b, const Node& n) { return b.gather(n.inputs[0], n.inputs[1], 0); }

// HF: x.float(); x * rsqrt(mean(x^2) + eps); weight * x.to(input dtype).
Value* decompose_rms_norm(Builder& b, const Node& n) {
  Value* x = b.cast(n.inputs[0], DType::F32);
  Value* mean_sq = b.reduce(OpKind::ReduceMean, b.mul(x, x), {-1}, true);
  Value* inv = b.unary(OpKind::Reciprocal,
                       b.unary(OpKind::Sqrt, b.add(mean_sq, b.scalar(n.attrs_as<NormAttrs>().epsilon, DType::F32))));
  Value* normed = b.cast(b.mul(x, inv), n.inputs[0]->dtype);
  Value* w = n.inputs[1];
  return b.mul(w->dtype == normed->dtype ? w : b.cast(w, normed->dtype), normed);
}

// Each token through its top-k experts, gathering only those experts' weights (a token's cost
// grows with k, not with the number of experts): softmax routing in float32, top-k, optional
// renormalisation; h = W_gu[e] x (+ b), gate / up interleaved; y = act(g) * (u + beta);
// out = sum_k w_k (W_d[e] y (+ b)). `gather(i, experts)` yields weight i's (0 gate_up, 1 down)
// rows for the chosen experts, [..., K, N, K_in].
template <class Gather>
Value* moe_reference(Builder& b, const Node& n, const MoEAttrs& a, int64_t inter, Value* gate_up_bias,
                     Value* down_bias, Value* selection_bias, Gather&& gather) {
  Value* x = n.inputs[0];
  const DType t = x->dtype;
  const int64_t k = a.top_k, hidden = x->shape.back().value();
  Value* logits = b.cast(n.inputs[1], DType::F32);
  Value* scores = a.sigmoid_routing ? b.unary(OpKind::Sigmoid, logits) : b.softmax(logits, -1);
  Value* experts;  // [..., K]
  Value* weights;
  if (selection_bias) {  // chosen by the biased scores, weighted by the unbiased ones
    experts = b.top_k(b.add(scores, b.cast(selection_bias, DType::F32)), k, true);
    weights = b.gather_elements(scores, experts, -1);
  } else {
    weights = b.top_k(scores, k, false);
    experts = b.top_k(scores, k, true);
  }
  if (a.normalize) {
    Value* sum = b.reduce(OpKind::ReduceSum, weights, {-1}, true);
    if (a.normalize_epsilon != 0.0) sum = b.add(sum, b.scalar(a.normalize_epsilon, DType::F32));
    weights = b.div(weights, sum);
  }
  if (a.routed_scaling != 1.0) weights = b.mul(weights, b.scalar(a.routed_scaling, DType::F32));
  weights = b.cast(weights, t);
  const Shape lead = experts->shape;  // [..., K]
  const auto last = static_cast<int64_t>(lead.size());
  auto with = [&](std::initializer_list<int64_t> dims) {
    Shape s = lead;
    for (int64_t d : dims) s.push_back(Dim(d));
    return s;
  };
  const int64_t r = static_cast<int64_t>(x->rank());
  Value* column = b.unsqueeze(x, {r - 1, r + 1});  // [..., 1, H, 1]
  Value* h = b.reshape(b.matmul(gather(0, experts), column), with({2 * inter}));
  if (gate_up_bias) h = b.add(h, b.gather(gate_up_bias, experts, 0));
  Value* pairs = b.reshape(h, with({inter, 2}));
  Value* gate = b.reshape(b.slice(pairs, -1, 0, 1), with({inter}));
  Value* up = b.reshape(b.slice(pairs, -1, 1, 2), with({inter}));
  if (a.limit > 0) {
    gate = b.min(gate, b.scalar(a.limit, t));
    up = b.max(b.min(up, b.scalar(a.limit, t)), b.scalar(-a.limit, t));
  }
  Value* scaled = a.alpha == 1.0 ? gate : b.mul(gate, b.scalar(a.alpha, t));
  Value* act = b.mul(gate, b.unary(OpKind::Sigmoid, scaled));
  Value* y = b.mul(act, a.beta == 0.0 ? up : b.add(up, b.scalar(a.beta, t)));
  Value* o = b.reshape(b.matmul(gather(1, experts), b.unsqueeze(y, {last + 1})), with({hidden}));
  if (down_bias) o = b.add(o, b.gather(down_bias, experts, 0));
  return b.reduce(OpKind::ReduceSum, b.mul(o, b.unsqueeze(weights, {last})), {last - 1}, false);
}

Value* decompose_moe(Builder& b, const Node& n) {
  return moe_reference(b, n, n.attrs_as<MoEAttrs>(), n.inputs[3]->shape[2].value(), n.input(4), n.input(5), n.input(6),
                       [&](int weight, Value* experts) { return b.gather(n.inputs[2 + weight], experts, 0); });
}

// The routed experts' codes and scales gathered (their rows regrouped per expert), then
// dequantized: only those experts' weights are expanded.
Value* decompose_quantized_moe(Builder& b, const Node& n) {
  const QuantizedMoEAttrs& q = n.attrs_as<QuantizedMoEAttrs>();
  const int64_t experts_count = n.inputs[1]->shape.back().value();
  const int64_t inter = n.inputs[4]->shape[1].value() * q.quant.group_size;
  const DType t = n.inputs[0]->dtype;
  return moe_reference(b, n, q.moe, inter, n.input(6), n.input(7), n.input(8), [&](int weight, Value* experts) {
    Value* codes = n.inputs[2 + 2 * weight];
    Value* scales = n.inputs[3 + 2 * weight];
    const int64_t rows = codes->shape[0].value() / experts_count;
    Value* c = b.reshape(codes, {Dim(experts_count), Dim(rows), codes->shape[1], codes->shape[2]});
    Value* s = b.reshape(scales, {Dim(experts_count), Dim(rows), scales->shape[1]});
    return dequantize(b, b.gather(c, experts, 0), b.gather(s, experts, 0), q.quant, t);
  });
}

// torch layer_norm: (x - mean) / sqrt(var + eps) * weight + bias, in float32, cast back once.
Value* decompose_layer_norm(Builder& b, const Node& n) {
  Value* x = b.cast(n.inputs[0], DType::F32);
  Value* centered = b.sub(x, b.reduce(OpKind::ReduceMean, x, {-1}, true));
  Value* var = b.reduce(OpKind::ReduceMean, b.mul(centered, centered), {-1}, true);
  Value* inv = b.unary(OpKind::Reciprocal,
                       b.unary(OpKind::Sqrt, b.add(var, b.scalar(n.attrs_as<NormAttrs>().epsilon, DType::F32))));
  Value* y = b.mul(b.mul(centered, inv), b.cast(n.inputs[1], DType::F32));
  if (Value* bias = n.input(2)) y = b.add(y, b.cast(bias, DType::F32));
  return b.cast(y, n.inputs[0]->dtype);
}

// HF rotate_half form: out = x * cos + concat(-x2, x1) * sin on the first R dims.
Value* decompose_rope(Builder& b, const Node& n) {
  Value* x = n.inputs[0];
  Value* cos = b.unsqueeze(b.cast(n.inputs[1], x->dtype), {1});
  Value* sin = b.unsqueeze(b.cast(n.inputs[2], x->dtype), {1});
  const int64_t rot = n.inputs[1]->shape.back().value();
  const int64_t head = x->shape.back().value();
  Value* xr = rot < head ? b.slice(x, -1, 0, rot) : x;
  Value* rotated;
  if (n.attrs_as<RoPEAttrs>().interleaved) {
    // Pairs (x0, x1) -> (-x1, x0) along the last dim.
    Shape pairs = xr->shape;
    pairs.back() = Dim(rot / 2);
    pairs.push_back(Dim(2));
    Value* p = b.reshape(xr, pairs);
    Value* even = b.slice(p, -1, 0, 1);
    Value* odd = b.slice(p, -1, 1, 2);
    rotated = b.reshape(b.concat({b.unary(OpKind::Neg, odd), even}, -1), xr->shape);
  } else {
    Value* x1 = b.slice(xr, -1, 0, rot / 2);
    Value* x2 = b.slice(xr, -1, rot / 2, rot);
    rotated = b.concat({b.unary(OpKind::Neg, x2), x1}, -1);
  }
  Value* out = b.add(b.mul(xr, cos), b.mul(rotated, sin));
  return rot < head ? b.concat({out, b.slice(x, -1, rot, head)}, -1) : out;
}

// HF's rotary embedding module: emb = positions x inv_freq, twice; cos(emb) or sin(emb), scaled.
Value* decompose_rope_table(Builder& b, const Node& n) {
  const RoPETableAttrs& a = n.attrs_as<RoPETableAttrs>();
  Value* pos = b.unsqueeze(b.cast(n.inputs[0], DType::F32), {-1});  // [B, S, 1]
  Value* freqs = b.mul(pos, n.inputs[1]);                            // [B, S, R/2]
  Value* table = b.unary(a.sine ? OpKind::Sin : OpKind::Cos, b.concat({freqs, freqs}, -1));
  return a.scaling != 1.0 ? b.mul(table, b.scalar(a.scaling, DType::F32)) : table;
}

// HF eager attention: softmax((q k^T) * scale + mask) v, with grouped kv heads broadcast.
// Masked scores take the lowest finite value so that fully masked (padding) rows stay finite.
Value* decompose_attention(Builder& b, const Node& n) {
  Value* q = n.inputs[0];
  Value* k = n.inputs[1];
  Value* v = n.inputs[2];
  Value* mask = n.inputs.size() > 3 ? n.inputs[3] : nullptr;
  const int64_t hq = q->shape[1].value(), hkv = k->shape[1].value();
  const int64_t groups = hq / hkv;
  const bool grouped = groups > 1;
  if (grouped) {
    q = b.reshape(q, {q->shape[0], Dim(hkv), Dim(groups), q->shape[2], q->shape[3]});
    k = b.unsqueeze(k, {2});
    v = b.unsqueeze(v, {2});
    if (mask) mask = b.unsqueeze(mask, {2});
  }
  const int64_t r = static_cast<int64_t>(k->rank());
  std::vector<int64_t> perm(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) perm[static_cast<size_t>(i)] = i;
  std::swap(perm[static_cast<size_t>(r - 1)], perm[static_cast<size_t>(r - 2)]);
  const AttentionAttrs& a = n.attrs_as<AttentionAttrs>();
  Value* scores = b.mul(b.matmul(q, b.transpose(k, perm)), b.scalar(a.scale, q->dtype));
  scores = b.cast(scores, DType::F32);
  if (const double cap = a.softcap; cap > 0) {
    Value* c = b.scalar(cap, DType::F32);
    scores = b.mul(b.unary(OpKind::Tanh, b.div(scores, c)), c);
  }
  if (Value* bias = n.input(5)) {  // [B, Hq or 1, S, T], grouped like the scores
    bias = b.cast(bias, DType::F32);
    if (grouped) {
      bias = bias->shape[1] == Dim(1) ? b.unsqueeze(bias, {2})
                                      : b.reshape(bias, {bias->shape[0], Dim(hkv), Dim(groups), bias->shape[2], bias->shape[3]});
    }
    scores = b.add(scores, bias);
  }
  if (mask) scores = b.where(mask, scores, b.scalar(std::numeric_limits<float>::lowest(), DType::F32));
  Value* probs;
  if (Value* sinks = n.input(4)) {
    // softmax over [scores, sink]: the sink joins the max and the sum, and is then dropped.
    Shape per_head(static_cast<size_t>(r), Dim(1));
    per_head[1] = Dim(hkv);
    if (grouped) per_head[2] = Dim(groups);
    Value* sink = b.reshape(b.cast(sinks, DType::F32), per_head);
    Value* top = b.max(b.reduce(OpKind::ReduceMax, scores, {-1}, true), sink);
    Value* e = b.unary(OpKind::Exp, b.sub(scores, top));
    Value* total = b.add(b.reduce(OpKind::ReduceSum, e, {-1}, true), b.unary(OpKind::Exp, b.sub(sink, top)));
    probs = b.cast(b.div(e, total), v->dtype);
  } else {
    probs = b.cast(b.softmax(scores, -1), v->dtype);
  }
  Value* out = b.matmul(probs, v);
  if (grouped) out = b.reshape(out, {out->shape[0], Dim(hq), out->shape[3], out->shape[4]});
  return out;
}

Value* decompose_silu(Builder& b, const Node& n) {
  return b.mul(n.inputs[0], b.unary(OpKind::Sigmoid, n.inputs[0]));
}

// max(x, 0) + log(1 + exp(-|x|)): exp never overflows (torch's softplus returns x past 20, which
// this equals in float32).
Value* decompose_softplus(Builder& b, const Node& n) {
  Value* x = n.inputs[0];
  const DType t = x->dtype;
  Value* minus_abs = b.min(x, b.unary(OpKind::Neg, x));
  Value* tail = b.unary(OpKind::Log, b.add(b.unary(OpKind::Exp, minus_abs), b.scalar(1.0, t)));
  return b.add(b.max(x, b.scalar(0.0, t)), tail);
}

Value* decompose_gelu(Builder& b, const Node& n) {
  Value* x = n.inputs[0];
  const DType t = x->dtype;
  if (n.attrs_as<GELUAttrs>().approximate == GeluApproximation::Tanh) {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    Value* cube = b.mul(b.mul(x, x), x);
    Value* inner = b.mul(b.add(x, b.mul(cube, b.scalar(0.044715, t))), b.scalar(std::sqrt(2.0 / M_PI), t));
    return b.mul(b.mul(x, b.scalar(0.5, t)), b.add(b.unary(OpKind::Tanh, inner), b.scalar(1.0, t)));
  }
  Value* e = b.unary(OpKind::Erf, b.mul(x, b.scalar(M_SQRT1_2, t)));
  return b.mul(b.mul(x, b.scalar(0.5, t)), b.add(e, b.scalar(1.0, t)));
}

Value* decompose_kv_append(Builder& b, const Node& n) {
  return b.concat({n.inputs[0], n.inputs[1]}, 2, n.attrs_as<KVAppendAttrs>().total);
}

// The whole call as one of transformers' chunks (its chunked form, the UT transform), from
// primitives only so every backend runs it; the triangular solve by doublings is exact for calls of
// up to 2^doublings tokens.
std::vector<Value*> decompose_gated_delta_rule(Builder& b, const Node& n) {
  Value *q = n.inputs[0], *k = n.inputs[1], *v = n.inputs[2], *initial = n.inputs[5];
  const Dim length = q->shape[1];
  auto heads_first = [&](Value* x) { return b.transpose(x, {0, 2, 1, 3}); };
  auto swap_last = [&](Value* x) { return b.transpose(x, {0, 1, 3, 2}); };
  auto exp = [&](Value* x) { return b.unary(OpKind::Exp, x); };
  Value* qh = heads_first(q), * kh = heads_first(k), * vh = heads_first(v);  // [batch, heads, L, D]
  Value* bt = b.transpose(n.inputs[4], {0, 2, 1});                             // [batch, heads, L]
  Value* cum = b.cumsum(b.transpose(n.inputs[3], {0, 2, 1}), 2);  // log decay from the call's start to each token
  // decay[l, s] = exp(cum[l] - cum[s]) for s <= l, else 0; min(., 0) only touches the masked half.
  Value* diff = b.sub(b.unsqueeze(cum, {3}), b.unsqueeze(cum, {2}));
  Value* steps = b.range(b.const_i64({0}), b.gather(b.shape_of(q), b.const_i64({1}), 0), b.const_i64({1}), length);
  Value* columns = b.unsqueeze(steps, {0}), * rows = b.unsqueeze(steps, {1});
  Value* inclusive = b.cast(b.compare(OpKind::LessOrEqual, columns, rows), DType::F32);
  Value* strict = b.cast(b.compare(OpKind::Less, columns, rows), DType::F32);
  Value* decay = b.mul(exp(b.min(diff, b.scalar(0.0, DType::F32))), inclusive);
  Value* k_beta = b.mul(kh, b.unsqueeze(bt, {3}));
  Value* v_beta = b.mul(vh, b.unsqueeze(bt, {3}));
  // The UT transform: (I - N) X = [v_beta | k_beta exp(cum)] with N = -(k_beta k^T * decay) strictly
  // below the diagonal. N is nilpotent, so (I - N)^-1 = (I + N)(I + N^2)(I + N^4)...
  Value* nil = b.unary(OpKind::Neg, b.mul(b.mul(b.matmul(k_beta, swap_last(kh)), decay), strict));
  const int64_t dv = v->shape[3].value(), dk = k->shape[3].value();
  const int64_t doublings = n.attrs_as<GatedDeltaRuleAttrs>().doublings;
  Value* x = b.concat({v_beta, b.mul(k_beta, b.unsqueeze(exp(cum), {3}))}, 3);
  for (int64_t i = 0; i < doublings; ++i) {
    x = b.add(x, b.matmul(nil, x));
    if (i + 1 < doublings) nil = b.matmul(nil, nil);
  }
  Value* new_values = b.slice(x, 3, 0, dv);
  Value* k_cumdecay = b.slice(x, 3, dv, dv + dk);
  // What the state before the call already predicts is taken out: only the correction is written.
  Value* v_new = b.sub(new_values, b.matmul(k_cumdecay, initial));
  Value* from_state = b.matmul(b.mul(qh, b.unsqueeze(exp(cum), {3})), initial);
  Value* within = b.matmul(b.mul(b.matmul(qh, swap_last(kh)), decay), v_new);
  Value* o = b.add(from_state, within);
  Value* last = b.slice(cum, 2, -1, INT64_MAX);  // [batch, heads, 1]
  Value* keys_to_end = b.mul(kh, b.unsqueeze(exp(b.sub(last, cum)), {3}));
  Value* final_state = b.add(b.mul(initial, b.unsqueeze(exp(last), {3})), b.matmul(swap_last(keys_to_end), v_new));
  return {heads_first(o), final_state};
}

// Over the window w = state ++ x [batch, K - 1 + L, channels]: out[t] = bias + sum_j taps[j] w[t + j],
// gathered with ranges, not slices, so that it holds for any symbolic length; the next state is
// w's last K - 1 rows.
std::vector<Value*> decompose_causal_conv(Builder& b, const Node& n) {
  Value *x = n.inputs[0], *weight = n.inputs[1], *state = n.inputs[2], *bias = n.input(3);
  const int64_t channels = x->shape[2].value(), kernel = weight->shape[2].value();
  const Dim length = x->shape[1];
  Value* window = b.concat({b.transpose(state, {0, 2, 1}), x}, 1, b.graph().dim(dim_plus(length, kernel - 1)));
  Value* taps = b.transpose(b.reshape(weight, {channels, kernel}), {1, 0});  // [kernel, channels]
  Value* window_length = b.gather(b.shape_of(window), b.const_i64({1}), 0);
  Value* sum = nullptr;
  for (int64_t j = 0; j < kernel; ++j) {
    // out[t] += taps[j] * window[t + j]: rows j .. j + length - 1 of the window.
    Value* rows = b.range(b.const_i64({j}), b.sub(window_length, b.const_i64({kernel - 1 - j})), b.const_i64({1}), length);
    Value* term = b.mul(b.gather(window, rows, 1), b.slice(taps, 0, j, j + 1));
    sum = sum ? b.add(sum, term) : term;
  }
  if (bias) sum = b.add(sum, bias);
  return {sum, b.transpose(b.slice(window, 1, -(kernel - 1), INT64_MAX), {0, 2, 1})};
}

// The SSD recurrence in its quadratic (one chunk) form, from primitives only: a call of L tokens
// costs L^2 per head.
std::vector<Value*> decompose_state_space_scan(Builder& b, const Node& n) {
  Value *x = n.inputs[0], *dt = n.inputs[1], *a = n.inputs[2], *bm = n.inputs[3], *cm = n.inputs[4];
  Value* initial = n.inputs[5];
  const int64_t heads = x->shape[2].value(), groups = bm->shape[2].value();
  const Dim length = x->shape[1];
  auto swap_last = [&](Value* v) { return b.transpose(v, {0, 1, 3, 2}); };
  auto exp = [&](Value* v) { return b.unary(OpKind::Exp, v); };
  // Per head, the log decay of each step and its running sum over the call: [batch, heads, L].
  Value* cum = b.cumsum(b.transpose(b.mul(dt, a), {0, 2, 1}), 2);
  // decay[l, s] = exp(cum[l] - cum[s]) for s <= l, else 0. cum never rises (dt >= 0, A < 0), so
  // min(., 0) only touches the masked half and keeps exp finite there.
  Value* diff = b.sub(b.unsqueeze(cum, {3}), b.unsqueeze(cum, {2}));
  Value* steps = b.range(b.const_i64({0}), b.gather(b.shape_of(x), b.const_i64({1}), 0), b.const_i64({1}), length);
  Value* causal = b.cast(b.compare(OpKind::LessOrEqual, b.unsqueeze(steps, {0}), b.unsqueeze(steps, {1})), DType::F32);
  Value* decay = b.mul(exp(b.min(diff, b.scalar(0.0, DType::F32))), causal);
  Value* bg = b.transpose(bm, {0, 2, 1, 3});  // [batch, groups, L, state]
  Value* cg = b.transpose(cm, {0, 2, 1, 3});
  // Within the call: y[l] = sum_s (C_l . B_s) decay[l, s] dt_s x_s.
  Value* scores = b.groups_to_heads(b.matmul(cg, swap_last(bg)), groups, heads, 1);  // [batch, heads, L, L]
  Value* xdt = b.transpose(b.mul(x, b.unsqueeze(dt, {3})), {0, 2, 1, 3});              // [batch, heads, L, P]
  Value* y = b.matmul(b.mul(scores, decay), xdt);
  // From the state before the call: y[l] += exp(cum[l]) C_l . S0.
  Value* ch = b.groups_to_heads(cg, groups, heads, 1);  // [batch, heads, L, state]
  Value* bh = b.groups_to_heads(bg, groups, heads, 1);
  y = b.add(y, b.mul(b.matmul(ch, swap_last(initial)), b.unsqueeze(exp(cum), {3})));
  // The state after the last token: exp(cum[-1]) S0 + sum_l exp(cum[-1] - cum[l]) dt_l x_l B_l^T.
  Value* last = b.slice(cum, 2, -1, INT64_MAX);  // [batch, heads, 1]
  Value* to_end = b.unsqueeze(exp(b.sub(last, cum)), {3});
  Value* final_state = b.add(b.mul(initial, b.unsqueeze(exp(last), {3})), b.matmul(swap_last(b.mul(xdt, to_end)), bh));
  return {b.transpose(y, {0, 2, 1, 3}), final_state};
}

// The single-result decompositions, as the registry's type.
template <Value* (*F)(Builder&, const Node&)>
std::vector<Value*> single(Builder& b, const Node& n) {
  return {F(b, n)};
}

}  // namespace

Decomposition reference_decomposition(OpKind op) {
  switch (op) {
    case OpKind::Linear: return single<decompose_linear>;
    case OpKind::QuantizedLinear: return single<decompose_quantized_linear>;
    case OpKind::Embedding: return single<decompose_embedding>;
    case OpKind::QuantizedEmbedding: return single<decompose_quantized_embedding>;
    case OpKind::RMSNorm: return single<decompose_rms_norm>;
    case OpKind::LayerNorm: return single<decompose_layer_norm>;
    case OpKind::MoE: return single<decompose_moe>;
    case OpKind::QuantizedMoE: return single<decompose_quantized_moe>;
    case OpKind::RoPE: return single<decompose_rope>;
    case OpKind::RoPETable: return single<decompose_rope_table>;
    case OpKind::Attention: return single<decompose_attention>;
    case OpKind::SiLU: return single<decompose_silu>;
    case OpKind::Softplus: return single<decompose_softplus>;
    case OpKind::KVAppend: return single<decompose_kv_append>;
    case OpKind::GELU: return single<decompose_gelu>;
    case OpKind::GatedDeltaRule: return decompose_gated_delta_rule;
    case OpKind::StateSpaceScan: return decompose_state_space_scan;
    case OpKind::CausalConv: return decompose_causal_conv;
    default: return nullptr;
  }
}

void decompose(Graph& graph, const std::function<bool(const Node&)>& backend_maps_natively) {
  rewrite_nodes(graph, [&](Node& n, Builder& b) {
    if (!op_is_high_level(n.op) || backend_maps_natively(n)) return Rewrite::keep();
    const Decomposition reference = reference_decomposition(n.op);
    HFX_CHECK(reference != nullptr, "no decomposition for ", op_name(n.op));
    std::vector<Value*> out = reference(b, n);
    HFX_CHECK(out.size() == n.outputs.size(), "decomposition of ", op_name(n.op), " changed the result count");
    for (size_t i = 0; i < out.size(); ++i)
      HFX_CHECK(out[i]->dtype == n.outputs[i]->dtype && out[i]->shape == n.outputs[i]->shape,
                "decomposition of ", op_name(n.op), " changed the result type");
    return Rewrite::replace(std::move(out));
  });
}

void eliminate_dead_code(Graph& graph) {
  std::map<const Value*, bool> live;
  for (Value* v : graph.outputs) live[v] = true;
  std::vector<Node*> kept;
  for (auto it = graph.order.rbegin(); it != graph.order.rend(); ++it) {
    bool used = false;
    for (Value* out : (*it)->outputs) used = used || live.count(out);
    if (!used) continue;
    kept.push_back(*it);
    for (Value* in : (*it)->inputs)
      if (in) live[in] = true;
  }
  graph.order.assign(kept.rbegin(), kept.rend());
}

}  // namespace hfx
