#include "models/mamba2_mixer.h"

#include <cmath>

#include "core/error.h"

namespace hfx {

Mamba2Spec read_mamba_keys(const JsonConfig& c, int64_t hidden, double norm_eps, std::optional<int64_t> d_ssm) {
  Mamba2Spec s;
  s.hidden = hidden;
  s.heads = c.positive("mamba_n_heads", 128);
  s.groups = c.positive("mamba_n_groups", 1);
  s.state_size = c.positive("mamba_d_state", 256);
  s.kernel = conv_kernel_size(c, "mamba_d_conv", 4);
  // mamba_d_ssm: absent takes the family's default, null (or no such default) mamba_expand * hidden.
  const bool sized = c.has("mamba_d_ssm") || (d_ssm && !c.json().contains("mamba_d_ssm"));
  const int64_t inner = sized ? c.positive("mamba_d_ssm", d_ssm.value_or(0)) : c.positive("mamba_expand", 2) * hidden;
  const char* inner_keys = sized ? "mamba_d_ssm" : "mamba_expand * hidden_size";
  const bool automatic = !c.has("mamba_d_head") || (c.at("mamba_d_head").is_string() && c.at("mamba_d_head") == "auto");
  if (automatic && inner % s.heads != 0) c.invalid("mamba_n_heads", str("must divide ", inner_keys, " (", inner, ")"));
  s.head_dim = automatic ? inner / s.heads : c.positive("mamba_d_head");
  if (s.head_dim * s.heads != inner)
    c.invalid("mamba_d_head", str("times mamba_n_heads must equal ", inner_keys, " (", inner, ")"));
  s.conv_bias = c.boolean("mamba_conv_bias", true);
  s.proj_bias = s.out_bias = c.boolean("mamba_proj_bias", false);
  s.norm_eps = norm_eps;
  finish_mamba2_spec(c, s, "mamba_n_heads", "mamba_n_groups");
  return s;
}

void finish_mamba2_spec(const JsonConfig& c, Mamba2Spec& s, const char* heads_key, const char* groups_key) {
  if (s.heads % s.groups != 0) c.invalid(groups_key, str("must divide ", heads_key, " (", s.heads, ")"));
  if (!c.has("time_step_limit")) return;
  const auto& limit = c.at("time_step_limit");
  const bool pair = limit.is_array() && limit.size() == 2;
  const double low = pair ? python_float(limit[0]).value_or(NAN) : NAN;
  const double high = pair ? python_float(limit[1]).value_or(NAN) : NAN;
  if (std::isnan(low) || std::isnan(high) || low < 0 || high < low)  // NaN: missing or not a float
    c.invalid("time_step_limit", "must be [min, max] with 0 <= min <= max");
  s.dt_min = low;
  s.dt_max = std::isinf(high) ? 0.0 : high;
}

namespace {

// FalconH1's mup vector: one scale per in_proj column, by section (z, x, B, C, dt).
Value* projection_scales(Builder& b, const Mamba2Spec& s) {
  const int64_t inner = s.intermediate(), group_state = s.groups * s.state_size;
  const int64_t sizes[] = {inner, inner, group_state, group_state, s.heads};
  std::vector<float> scales;
  for (size_t i = 0; i < 5; ++i) scales.insert(scales.end(), static_cast<size_t>(sizes[i]), static_cast<float>(s.projection_scales[i]));
  return b.const_f32(scales, {static_cast<int64_t>(scales.size())});
}

// y [batch, L, inner] and the gate z, float32: RMSNorm per group of inner / groups channels (gated
// before or after) times norm.weight, or y * silu(z) alone.
Value* gated_output(DecoderGraph& g, const std::string& p, const Mamba2Spec& s, Value* y, Value* z) {
  Builder& b = g.b();
  Value* gate = b.silu(z);
  if (s.gate == Mamba2Spec::Gate::GateOnly) return b.mul(y, gate);
  const int64_t inner = s.intermediate(), width = inner / s.groups;
  const Dim batch = y->shape[0], length = y->shape[1];
  Value* v = s.gate == Mamba2Spec::Gate::GateThenNorm ? b.mul(y, gate) : y;
  Value* grouped = b.reshape(v, {batch, length, Dim(s.groups), Dim(width)});
  Value* variance = b.reduce(OpKind::ReduceMean, b.mul(grouped, grouped), {3}, true);
  Value* inv = b.unary(OpKind::Reciprocal, b.unary(OpKind::Sqrt, b.add(variance, b.scalar(s.norm_eps, DType::F32))));
  // The weight multiplies in float32, one rounding to the model dtype after (as transformers does).
  Value* normed = b.mul(b.cast(g.m.weight(p + "norm.weight", {inner}), DType::F32),
                        b.reshape(b.mul(grouped, inv), {batch, length, Dim(inner)}));
  return s.gate == Mamba2Spec::Gate::NormThenGate ? b.mul(normed, gate) : normed;
}

}  // namespace

Value* mamba2_mixer(DecoderGraph& g, int64_t layer, const std::string& p, const Mamba2Spec& s, Value* x) {
  Builder& b = g.b();
  b.set_scope(p.substr(0, p.size() - 1));
  const int64_t hidden = s.hidden, inner = s.intermediate(), channels = s.conv_channels();
  const int64_t projected = inner + channels + s.heads, group_state = s.groups * s.state_size;
  const Dim batch = x->shape[0], length = x->shape[1];
  Value* real = g.io->real_tokens(x->dtype);
  auto unpadded = [&](Value* v) { return real ? b.mul(v, b.unsqueeze(b.cast(real, v->dtype), {2})) : v; };
  Value* in = scaled(b, unpadded(x), s.in_scale);  // built before the weights: a stable node order
  Value* zxbcdt = b.linear(in, g.m.weight(p + "in_proj.weight", {projected, hidden}),
                           g.m.weight_if(s.proj_bias, p + "in_proj.bias", {projected}));
  if (!s.projection_scales.empty()) zxbcdt = b.mul(zxbcdt, b.cast(projection_scales(b, s), zxbcdt->dtype));
  Value* z = b.slice(zxbcdt, 2, 0, inner);
  Value* xbc = b.slice(zxbcdt, 2, inner, inner + channels);
  Value* dt = b.slice(zxbcdt, 2, inner + channels, projected);

  auto f32 = [&](Value* v) { return b.cast(v, DType::F32); };
  // The convolution sums in float32 and rounds once (as torch's conv1d does in half precision).
  Value* conv_weight = f32(g.m.weight(p + "conv1d.weight", {channels, 1, s.kernel}));
  Value* conv_bias = s.conv_bias ? f32(g.m.weight(p + "conv1d.bias", {channels})) : nullptr;
  Value* conv = b.cast(g.io->causal_conv(layer, f32(xbc), conv_weight, conv_bias), x->dtype);
  // Padding is zeroed again after the convolution, as transformers does (its bias and SiLU).
  xbc = unpadded(b.silu(conv));

  Value* xs = b.reshape(f32(b.slice(xbc, 2, 0, inner)), {batch, length, Dim(s.heads), Dim(s.head_dim)});
  Value* bm = b.reshape(f32(b.slice(xbc, 2, inner, inner + group_state)), {batch, length, Dim(s.groups), Dim(s.state_size)});
  Value* cm = b.reshape(f32(b.slice(xbc, 2, inner + group_state, channels)), {batch, length, Dim(s.groups), Dim(s.state_size)});
  dt = b.unary(OpKind::Softplus, b.add(dt, g.m.weight(p + "dt_bias", {s.heads})));
  dt = f32(dt);
  if (s.dt_min > 0 || s.dt_max > 0) {
    // time_step_limit, except on a single step after earlier tokens (transformers' own rule there).
    Value* clamped = s.dt_min > 0 ? b.max(dt, b.scalar(s.dt_min, DType::F32)) : dt;
    if (s.dt_max > 0) clamped = b.min(clamped, b.scalar(s.dt_max, DType::F32));
    Value* step = g.io->single_step();
    dt = step ? b.where(step, dt, clamped) : clamped;
  }
  Value* a = b.unary(OpKind::Neg, b.unary(OpKind::Exp, f32(g.m.weight(p + "A_log", {s.heads}))));
  Value* d = f32(g.m.weight(p + "D", {s.heads}));
  Value* initial = g.io->recurrent_state(layer, {s.heads, s.head_dim, s.state_size});
  auto [scanned, final_state] = b.state_space_scan(xs, dt, a, bm, cm, initial);
  g.io->update_recurrent_state(layer, final_state);
  Value* y = b.add(scanned, b.mul(xs, b.unsqueeze(d, {1})));  // D's skip connection

  b.set_scope(p + "norm");
  Value* normed = gated_output(g, p, s, b.reshape(y, {batch, length, Dim(inner)}), f32(z));
  normed = b.cast(normed, x->dtype);
  b.set_scope(p.substr(0, p.size() - 1));
  return b.linear(normed, g.m.weight(p + "out_proj.weight", {hidden, inner}),
                  g.m.weight_if(s.out_bias, p + "out_proj.bias", {hidden}));
}

}  // namespace hfx
