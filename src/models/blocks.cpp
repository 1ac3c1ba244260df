#include "models/blocks.h"

#include <cmath>
#include <tuple>

#include "core/error.h"

namespace hfx {
namespace {

// A projection's weight and bias: its own module, or rows [begin, end) of a fused one.
struct Projection {
  Value* weight;
  Value* bias;
};

Projection fused_rows(ModelBuilder& m, const std::string& module, bool bias, int64_t total, int64_t hidden,
                      int64_t begin, int64_t end) {
  Value* w = m.rows(m.weight(module + ".weight", {total, hidden}), begin, end);
  return {w, bias ? m.rows(m.weight(module + ".bias", {total}), begin, end) : nullptr};
}

// (The bias is declared first: the order the graph's values are numbered in, kept stable.)
Projection own(ModelBuilder& m, const std::string& module, bool bias, int64_t out, int64_t in) {
  Value* b = m.weight_if(bias, module + ".bias", {out});
  return {m.weight(module + ".weight", {out, in}), b};
}

// Projects x to heads: [B, S, hidden] -> [B, heads, S, head_dim], with an optional per-head
// RMSNorm (`norm` names its weight).
Value* project_heads(ModelBuilder& m, const Projection& p, int64_t heads, int64_t head_dim, Value* x,
                     const std::string& norm, double eps) {
  Builder& b = m.b();
  Value* y = b.linear(x, p.weight, p.bias);
  y = b.reshape(y, {x->shape[0], x->shape[1], Dim(heads), Dim(head_dim)});
  if (!norm.empty()) y = b.rms_norm(y, m.weight(norm, {head_dim}), eps);
  return b.transpose(y, {0, 2, 1, 3});
}

}  // namespace

Value* attention_block(ModelBuilder& m, const std::string& p, const AttentionSpec& s, Value* x,
                       const AttentionContext& ctx) {
  Builder& b = m.b();
  b.set_scope(p.substr(0, p.size() - 1));
  const int64_t q_out = s.heads * s.head_dim, kv_out = s.kv_heads * s.head_dim;
  auto projection = [&](const std::string& name, int64_t out, int64_t begin) {
    if (s.qkv.empty()) return own(m, p + name, s.qkv_bias, out, s.hidden);
    return fused_rows(m, p + s.qkv, s.qkv_bias, q_out + 2 * kv_out, s.hidden, begin, begin + out);
  };
  // Built one after another: each projection's weights are declared as it is built.
  Value* q = project_heads(m, projection(s.q, q_out, 0), s.heads, s.head_dim, x,
                           s.qk_norm ? p + "q_norm.weight" : "", s.norm_epsilon);
  Value* k = project_heads(m, projection(s.k, kv_out, q_out), s.kv_heads, s.head_dim, x,
                           s.qk_norm ? p + "k_norm.weight" : "", s.norm_epsilon);
  Value* v = project_heads(m, projection(s.v, kv_out, q_out + kv_out), s.kv_heads, s.head_dim, x, "", 0);
  if (ctx.cos) {
    q = b.rope(q, ctx.cos, ctx.sin, false);
    k = b.rope(k, ctx.cos, ctx.sin, false);
  }
  std::tie(k, v) = ctx.cache(k, v);
  const double scale = s.scale > 0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  Value* o = b.attention(q, k, v, ctx.mask, scale, s.softcap);
  o = b.reshape(b.transpose(o, {0, 2, 1, 3}), {x->shape[0], x->shape[1], Dim(q_out)});
  const Projection out = own(m, p + s.o, s.o_bias, s.hidden, q_out);
  return b.linear(o, out.weight, out.bias);
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
  const int64_t inter = s.intermediate;
  auto up_projection = [&](const std::string& name, int64_t begin) {
    if (s.gate_up.empty()) return own(m, p + name, s.bias, inter, s.hidden);
    return fused_rows(m, p + s.gate_up, s.bias, 2 * inter, s.hidden, begin, begin + inter);
  };
  if (!s.gated) {
    const Projection up_p = own(m, p + s.up, s.bias, inter, s.hidden);
    Value* h = activation(b, s.activation, b.linear(x, up_p.weight, up_p.bias));
    const Projection down = own(m, p + s.down, s.bias, s.hidden, inter);
    return b.linear(h, down.weight, down.bias);
  }
  const Projection gate_p = up_projection(s.gate, 0);
  Value* gate = b.linear(x, gate_p.weight, gate_p.bias);
  const Projection up_p = up_projection(s.up, inter);
  Value* up = b.linear(x, up_p.weight, up_p.bias);
  Value* act = activation(b, s.activation, gate);
  const Projection down = own(m, p + s.down, s.bias, s.hidden, inter);
  return b.linear(b.mul(act, up), down.weight, down.bias);
}

}  // namespace hfx
