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
  Value* conv = g.io->causal_conv(layer, f32(in.qkv), f32(g.m.weight(p + "conv1d.weight", {channels, 1, s.kernel})), nullptr);
  Value* mixed = b.silu(b.cast(conv, x->dtype));
  auto heads = [&](int64_t begin, int64_t end, int64_t count, int64_t dim) {
    return b.reshape(f32(b.slice(mixed, 2, begin, end)), {batch, length, Dim(count), Dim(dim)});
  };
  Value* q = l2_normalized(b, heads(0, kc, s.key_heads, s.key_dim));
  q = b.mul(q, b.scalar(1.0 / std::sqrt(static_cast<double>(s.key_dim)), DType::F32));
  Value* k = l2_normalized(b, heads(kc, 2 * kc, s.key_heads, s.key_dim));
  Value* v = heads(2 * kc, channels, s.value_heads, s.value_dim);
  // Each key head serves value_heads / key_heads consecutive value heads.
  q = b.groups_to_heads(q, s.key_heads, s.value_heads, 2);
  k = b.groups_to_heads(k, s.key_heads, s.value_heads, 2);
  Value* beta = f32(b.unary(OpKind::Sigmoid, in.b));
  // g = -exp(A_log) * softplus(a + dt_bias), in float32.
  Value* dt = b.unary(OpKind::Softplus, b.add(f32(in.a), f32(g.m.weight(p + "dt_bias", {s.value_heads}))));
  Value* decay = b.mul(b.unary(OpKind::Neg, b.unary(OpKind::Exp, f32(g.m.weight(p + "A_log", {s.value_heads})))), dt);
  Value* initial = g.io->recurrent_state(layer, {s.value_heads, s.key_dim, s.value_dim});
  const Symbol* symbol = length.symbol();
  const int64_t most = length.is_static() ? length.value()
                       : symbol->op == Symbol::Op::Free && symbol->max < longest ? symbol->max
                                                                                 : longest;
  auto [o, final_state] = b.gated_delta_rule(q, k, v, decay, beta, initial, doublings_for(most));
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
