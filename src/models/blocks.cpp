#include "models/blocks.h"

#include <cmath>
#include <tuple>

#include "core/error.h"

namespace hfx {

void declare_attention(ModelBuilder& m, const std::string& p, const AttentionSpec& s) {
  const int64_t q_out = s.heads * s.head_dim, kv_out = s.kv_heads * s.head_dim;
  m.expect(p + "q_proj.weight", {q_out, s.hidden});
  m.expect(p + "k_proj.weight", {kv_out, s.hidden});
  m.expect(p + "v_proj.weight", {kv_out, s.hidden});
  m.expect(p + "o_proj.weight", {s.hidden, q_out});
  if (s.qkv_bias) {
    m.expect(p + "q_proj.bias", {q_out});
    m.expect(p + "k_proj.bias", {kv_out});
    m.expect(p + "v_proj.bias", {kv_out});
  }
  if (s.o_bias) m.expect(p + "o_proj.bias", {s.hidden});
  if (s.qk_norm) {
    m.expect(p + "q_norm.weight", {s.head_dim});
    m.expect(p + "k_norm.weight", {s.head_dim});
  }
}

namespace {

// Projects x to heads: [B, S, hidden] -> [B, heads, S, head_dim].
Value* project_heads(ModelBuilder& m, const std::string& proj, bool bias, int64_t heads, int64_t head_dim,
                     Value* x, const std::string& norm, double eps) {
  Builder& b = m.b();
  Value* y = b.linear(x, m.weight(proj + ".weight"), bias ? m.weight(proj + ".bias") : nullptr);
  y = b.reshape(y, {x->shape[0], x->shape[1], Dim(heads), Dim(head_dim)});
  if (!norm.empty()) y = b.rms_norm(y, m.weight(norm), eps);
  return b.transpose(y, {0, 2, 1, 3});
}

}  // namespace

Value* attention_block(ModelBuilder& m, const std::string& p, const AttentionSpec& s, Value* x, Value* cos,
                       Value* sin, Value* mask, const KvCacheHook& cache) {
  Builder& b = m.b();
  b.set_scope(p.substr(0, p.size() - 1));
  Value* q = project_heads(m, p + "q_proj", s.qkv_bias, s.heads, s.head_dim, x,
                           s.qk_norm ? p + "q_norm.weight" : "", s.norm_epsilon);
  Value* k = project_heads(m, p + "k_proj", s.qkv_bias, s.kv_heads, s.head_dim, x,
                           s.qk_norm ? p + "k_norm.weight" : "", s.norm_epsilon);
  Value* v = project_heads(m, p + "v_proj", s.qkv_bias, s.kv_heads, s.head_dim, x, "", 0);
  q = b.rope(q, cos, sin, false);
  k = b.rope(k, cos, sin, false);
  std::tie(k, v) = cache(k, v);
  const double scale = s.scale > 0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  Value* o = b.attention(q, k, v, mask, scale, 0.0);
  o = b.reshape(b.transpose(o, {0, 2, 1, 3}), {x->shape[0], x->shape[1], Dim(s.heads * s.head_dim)});
  return b.linear(o, m.weight(p + "o_proj.weight"), s.o_bias ? m.weight(p + "o_proj.bias") : nullptr);
}

void declare_gated_mlp(ModelBuilder& m, const std::string& p, const MlpSpec& s) {
  m.expect(p + "gate_proj.weight", {s.intermediate, s.hidden});
  m.expect(p + "up_proj.weight", {s.intermediate, s.hidden});
  m.expect(p + "down_proj.weight", {s.hidden, s.intermediate});
  if (s.bias) {
    m.expect(p + "gate_proj.bias", {s.intermediate});
    m.expect(p + "up_proj.bias", {s.intermediate});
    m.expect(p + "down_proj.bias", {s.hidden});
  }
}

Value* gated_mlp(ModelBuilder& m, const std::string& p, const MlpSpec& s, Value* x) {
  Builder& b = m.b();
  b.set_scope(p.substr(0, p.size() - 1));
  auto bias = [&](const char* name) { return s.bias ? m.weight(p + name) : nullptr; };
  Value* gate = b.linear(x, m.weight(p + "gate_proj.weight"), bias("gate_proj.bias"));
  Value* up = b.linear(x, m.weight(p + "up_proj.weight"), bias("up_proj.bias"));
  Value* act;
  if (s.activation == "silu" || s.activation == "swish") act = b.silu(gate);
  else if (s.activation == "gelu") act = b.gelu(gate, "none");
  else act = b.gelu(gate, "tanh");  // gelu_pytorch_tanh, gelu_new, gelu_fast: validated by the frontend
  return b.linear(b.mul(act, up), m.weight(p + "down_proj.weight"), bias("down_proj.bias"));
}

}  // namespace hfx
