#include "models/gated_deltanet.h"

#include <cmath>

#include "core/error.h"

namespace hfx {
namespace {

// x * rsqrt(sum(x^2) + 1e-6) over the last axis (transformers' l2norm in the delta rule).
Value* l2_normalized(Builder& b, Value* x) {
  Value* sum = b.reduce(OpKind::ReduceSum, b.mul(x, x), {static_cast<int64_t>(x->shape.size()) - 1}, true);
  return b.mul(x, b.unary(OpKind::Reciprocal, b.unary(OpKind::Sqrt, b.add(sum, b.scalar(1e-6, DType::F32)))));
}

struct Projected {
  Value* qkv;  // [batch, L, conv_channels]: q | k | v, the convolution's input
  Value* z;    // [batch, L, value_channels]
  Value* b;    // [batch, L, value_heads]: beta's logits
  Value* a;    // [batch, L, value_heads]: the decay's input
};

// Qwen3.5: one module each.
Projected project_separate(ModelBuilder& m, const std::string& p, const GatedDeltaSpec& s, Value* x) {
  Builder& b = m.b();
  Projected out{};
  out.qkv = b.linear(x, m.weight(p + "in_proj_qkv.weight", {s.conv_channels(), s.hidden}));
  out.z = b.linear(x, m.weight(p + "in_proj_z.weight", {s.value_channels(), s.hidden}));
  out.b = b.linear(x, m.weight(p + "in_proj_b.weight", {s.value_heads, s.hidden}));
  out.a = b.linear(x, m.weight(p + "in_proj_a.weight", {s.value_heads, s.hidden}));
  return out;
}

// Qwen3-Next: in_proj_qkvz holds per key head [q | k | v | z] (v and z: value_heads / key_heads
// heads each), in_proj_ba per key head [b | a].
Projected project_per_key_head(ModelBuilder& m, const std::string& p, const GatedDeltaSpec& s, Value* x) {
  Builder& b = m.b();
  const int64_t per = s.value_heads / s.key_heads, dk = s.key_dim, vd = per * s.value_dim;
  const int64_t stride = 2 * dk + 2 * vd;
  const Dim batch = x->shape[0], length = x->shape[1];
  Value* qkvz = b.linear(x, m.weight(p + "in_proj_qkvz.weight", {s.key_heads * stride, s.hidden}));
  qkvz = b.reshape(qkvz, {batch, length, Dim(s.key_heads), Dim(stride)});
  auto part = [&](Value* grouped, int64_t begin, int64_t end, int64_t channels) {
    return b.reshape(b.slice(grouped, 3, begin, end), {batch, length, Dim(channels)});
  };
  Value* q = part(qkvz, 0, dk, s.key_channels());
  Value* k = part(qkvz, dk, 2 * dk, s.key_channels());
  Value* v = part(qkvz, 2 * dk, 2 * dk + vd, s.value_channels());
  Projected out{};
  out.qkv = b.concat({q, k, v}, 2);
  out.z = part(qkvz, 2 * dk + vd, stride, s.value_channels());
  Value* ba = b.linear(x, m.weight(p + "in_proj_ba.weight", {s.key_heads * 2 * per, s.hidden}));
  ba = b.reshape(ba, {batch, length, Dim(s.key_heads), Dim(2 * per)});
  out.b = part(ba, 0, per, s.value_heads);
  out.a = part(ba, per, 2 * per, s.value_heads);
  return out;
}

}  // namespace

int64_t doublings_for(int64_t tokens) {
  int64_t n = 0;
  while ((int64_t{1} << n) < tokens) ++n;
  return n;
}

std::pair<Value*, Value*> gated_delta_rule(Builder& b, Value* q, Value* k, Value* v, Value* g, Value* beta,
                                           Value* initial, Dim length, int64_t doublings) {
  auto heads_first = [&](Value* x) { return b.transpose(x, {0, 2, 1, 3}); };
  auto exp = [&](Value* x) { return b.unary(OpKind::Exp, x); };
  Value* qh = heads_first(q), * kh = heads_first(k), * vh = heads_first(v);  // [batch, heads, L, D]
  Value* bt = b.transpose(beta, {0, 2, 1});                                    // [batch, heads, L]
  Value* cum = b.cumsum(b.transpose(g, {0, 2, 1}), 2);  // log decay from the call's start to each token
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
  Value* n = b.unary(OpKind::Neg, b.mul(b.mul(b.matmul(k_beta, swap_last(b, kh)), decay), strict));
  const int64_t dv = v->shape[3].value(), dk = k->shape[3].value();
  Value* x = b.concat({v_beta, b.mul(k_beta, b.unsqueeze(exp(cum), {3}))}, 3);
  for (int64_t i = 0; i < doublings; ++i) {
    x = b.add(x, b.matmul(n, x));
    if (i + 1 < doublings) n = b.matmul(n, n);
  }
  Value* new_values = b.slice(x, 3, 0, dv);
  Value* k_cumdecay = b.slice(x, 3, dv, dv + dk);
  // What the state before the call already predicts is taken out: only the correction is written.
  Value* v_new = b.sub(new_values, b.matmul(k_cumdecay, initial));
  Value* from_state = b.matmul(b.mul(qh, b.unsqueeze(exp(cum), {3})), initial);
  Value* within = b.matmul(b.mul(b.matmul(qh, swap_last(b, kh)), decay), v_new);
  Value* o = b.add(from_state, within);
  Value* last = b.slice(cum, 2, -1, INT64_MAX);  // [batch, heads, 1]
  Value* keys_to_end = b.mul(kh, b.unsqueeze(exp(b.sub(last, cum)), {3}));
  Value* final_state = b.add(b.mul(initial, b.unsqueeze(exp(last), {3})), b.matmul(swap_last(b, keys_to_end), v_new));
  return {heads_first(o), final_state};
}

Value* gated_deltanet(DecoderGraph& g, int64_t layer, const std::string& p, const GatedDeltaSpec& s, Value* x,
                      int64_t longest) {
  Builder& b = g.b();
  b.set_scope(p.substr(0, p.size() - 1));
  const Dim batch = x->shape[0], length = x->shape[1];
  const int64_t kc = s.key_channels(), channels = s.conv_channels();
  auto f32 = [&](Value* v) { return b.cast(v, DType::F32); };
  if (Value* real = g.io->real_tokens(x->dtype)) x = b.mul(x, b.unsqueeze(real, {2}));  // padding zeroed
  const Projected in = s.layout == GatedDeltaSpec::Layout::Separate ? project_separate(g.m, p, s, x)
                                                                     : project_per_key_head(g.m, p, s, x);
  // The convolution sums in float32 and rounds once (as torch's conv1d does in half precision).
  Value* window = f32(g.io->conv_window(layer, in.qkv, s.kernel));
  Value* taps = b.transpose(b.reshape(f32(g.m.weight(p + "conv1d.weight", {channels, 1, s.kernel})), {channels, s.kernel}), {1, 0});
  Value* mixed = b.silu(b.cast(causal_depthwise_conv(b, window, taps, nullptr, g.io->query_dim()), x->dtype));
  auto heads = [&](int64_t begin, int64_t end, int64_t count, int64_t dim) {
    return b.reshape(f32(b.slice(mixed, 2, begin, end)), {batch, length, Dim(count), Dim(dim)});
  };
  Value* q = l2_normalized(b, heads(0, kc, s.key_heads, s.key_dim));
  q = b.mul(q, b.scalar(1.0 / std::sqrt(static_cast<double>(s.key_dim)), DType::F32));
  Value* k = l2_normalized(b, heads(kc, 2 * kc, s.key_heads, s.key_dim));
  Value* v = heads(2 * kc, channels, s.value_heads, s.value_dim);
  // Each key head serves value_heads / key_heads consecutive value heads.
  q = groups_to_heads(b, q, s.key_heads, s.value_heads, 2);
  k = groups_to_heads(b, k, s.key_heads, s.value_heads, 2);
  Value* beta = f32(b.unary(OpKind::Sigmoid, in.b));
  // g = -exp(A_log) * softplus(a + dt_bias), in float32.
  Value* dt = b.unary(OpKind::Softplus, b.add(f32(in.a), f32(g.m.weight(p + "dt_bias", {s.value_heads}))));
  Value* decay = b.mul(b.unary(OpKind::Neg, b.unary(OpKind::Exp, f32(g.m.weight(p + "A_log", {s.value_heads})))), dt);
  Value* initial = g.io->recurrent_state(layer, {s.value_heads, s.key_dim, s.value_dim});
  const Symbol* symbol = length.symbol();
  const int64_t most = length.is_static() ? length.value()
                       : symbol->op == Symbol::Op::Free && symbol->max < longest ? symbol->max
                                                                                 : longest;
  auto [o, final_state] = gated_delta_rule(b, q, k, v, decay, beta, initial, length, doublings_for(most));
  g.io->update_recurrent_state(layer, final_state);

  // Qwen3_5RMSNormGated per value head: the norm in float32, times the weight in the model dtype,
  // times silu(z) in float32.
  b.set_scope(p + "norm");
  Value* y = f32(b.cast(o, x->dtype));
  Value* variance = b.reduce(OpKind::ReduceMean, b.mul(y, y), {3}, true);
  Value* inv = b.unary(OpKind::Reciprocal, b.unary(OpKind::Sqrt, b.add(variance, b.scalar(s.norm_eps, DType::F32))));
  Value* normed = b.mul(g.m.weight(p + "norm.weight", {s.value_dim}), b.cast(b.mul(y, inv), x->dtype));
  Value* z = f32(b.reshape(in.z, {batch, length, Dim(s.value_heads), Dim(s.value_dim)}));
  Value* gated = b.cast(b.mul(f32(normed), b.silu(z)), x->dtype);
  b.set_scope(p.substr(0, p.size() - 1));
  return b.linear(b.reshape(gated, {batch, length, Dim(s.value_channels())}),
                  g.m.weight(p + "out_proj.weight", {s.hidden, s.value_channels()}));
}

}  // namespace hfx
