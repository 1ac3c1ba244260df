#include "models/blocks.h"

#include <cmath>
#include <tuple>

#include "core/error.h"

namespace hfx {
namespace {

// Projects x to heads: [B, S, hidden] -> [B, heads, S, head_dim], with an optional per-head
// RMSNorm (`norm` names its weight).
Value* project_heads(ModelBuilder& m, const std::string& proj, bool bias, int64_t heads, int64_t head_dim,
                     int64_t hidden, Value* x, const std::string& norm, double eps) {
  Builder& b = m.b();
  const int64_t out = heads * head_dim;
  Value* y = b.linear(x, m.weight(proj + ".weight", {out, hidden}), m.weight_if(bias, proj + ".bias", {out}));
  y = b.reshape(y, {x->shape[0], x->shape[1], Dim(heads), Dim(head_dim)});
  if (!norm.empty()) y = b.rms_norm(y, m.weight(norm, {head_dim}), eps);
  return b.transpose(y, {0, 2, 1, 3});
}

}  // namespace

Value* attention_block(ModelBuilder& m, const std::string& p, const AttentionSpec& s, Value* x,
                       const AttentionContext& ctx) {
  Builder& b = m.b();
  b.set_scope(p.substr(0, p.size() - 1));
  Value* q = project_heads(m, p + "q_proj", s.qkv_bias, s.heads, s.head_dim, s.hidden, x,
                           s.qk_norm ? p + "q_norm.weight" : "", s.norm_epsilon);
  Value* k = project_heads(m, p + "k_proj", s.qkv_bias, s.kv_heads, s.head_dim, s.hidden, x,
                           s.qk_norm ? p + "k_norm.weight" : "", s.norm_epsilon);
  Value* v = project_heads(m, p + "v_proj", s.qkv_bias, s.kv_heads, s.head_dim, s.hidden, x, "", 0);
  if (ctx.cos) {
    q = b.rope(q, ctx.cos, ctx.sin, false);
    k = b.rope(k, ctx.cos, ctx.sin, false);
  }
  std::tie(k, v) = ctx.cache(k, v);
  const double scale = s.scale > 0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  Value* o = b.attention(q, k, v, ctx.mask, scale, s.softcap);
  const int64_t q_out = s.heads * s.head_dim;
  o = b.reshape(b.transpose(o, {0, 2, 1, 3}), {x->shape[0], x->shape[1], Dim(q_out)});
  return b.linear(o, m.weight(p + "o_proj.weight", {s.hidden, q_out}), m.weight_if(s.o_bias, p + "o_proj.bias", {s.hidden}));
}

void check_activation(const JsonConfig& c, const std::string& key, const std::string& act) {
  if (act != "silu" && act != "swish" && act != "gelu" && act != "gelu_pytorch_tanh" && act != "gelu_new" &&
      act != "gelu_fast")
    c.invalid(key, "is not a supported activation (silu, gelu, gelu_pytorch_tanh, gelu_new)");
}

Value* activation(Builder& b, const std::string& name, Value* x) {
  if (name == "silu" || name == "swish") return b.silu(x);
  if (name == "gelu") return b.gelu(x, GeluApproximation::None);
  return b.gelu(x, GeluApproximation::Tanh);  // gelu_pytorch_tanh, gelu_new, gelu_fast: validated by check_activation
}

Value* gated_mlp(ModelBuilder& m, const std::string& p, const MlpSpec& s, Value* x) {
  Builder& b = m.b();
  b.set_scope(p.substr(0, p.size() - 1));
  const std::vector<int64_t> up_shape{s.intermediate, s.hidden};
  auto bias = [&](const char* name, int64_t n) { return m.weight_if(s.bias, p + name, {n}); };
  Value* gate = b.linear(x, m.weight(p + "gate_proj.weight", up_shape), bias("gate_proj.bias", s.intermediate));
  Value* up = b.linear(x, m.weight(p + "up_proj.weight", up_shape), bias("up_proj.bias", s.intermediate));
  Value* act = activation(b, s.activation, gate);
  return b.linear(b.mul(act, up), m.weight(p + "down_proj.weight", {s.hidden, s.intermediate}),
                  bias("down_proj.bias", s.hidden));
}

}  // namespace hfx
