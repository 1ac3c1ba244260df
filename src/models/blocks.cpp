#include "models/blocks.h"

#include <cmath>
#include <map>
#include <tuple>

#include "core/error.h"

namespace hfx {
namespace {

// A projection's weight and bias: its own module, or rows [begin, end) of a fused one.
struct Projection {
  Value* weight;
  Value* bias;
};

// A weight [out, in] as a Linear reads it, from a checkpoint storing [out, in] or, for Conv1D, [in, out].
Value* linear_weight(ModelBuilder& m, const std::string& name, int64_t out, int64_t in, bool conv1d) {
  return conv1d ? m.transposed(m.weight(name, {in, out})) : m.weight(name, {out, in});
}

Projection fused_rows(ModelBuilder& m, const std::string& module, bool bias, int64_t total, int64_t hidden,
                      int64_t begin, int64_t end, bool conv1d = false) {
  Value* w = m.rows(linear_weight(m, module + ".weight", total, hidden, conv1d), begin, end);
  return {w, bias ? m.rows(m.weight(module + ".bias", {total}), begin, end) : nullptr};
}

// Projection j of a per-head fused weight [heads * 3 * D, hidden]: rows h*3D + j*D ... + D of each head.
Projection per_head_rows(ModelBuilder& m, const std::string& module, bool bias, int64_t heads, int64_t head_dim,
                         int64_t hidden, int64_t j) {
  const int64_t total = heads * 3 * head_dim;
  auto pick = [&](Value* fused) { return m.row_blocks(fused, 3 * head_dim, j * head_dim, head_dim, heads); };
  Value* w = pick(m.weight(module + ".weight", {total, hidden}));
  return {w, bias ? pick(m.weight(module + ".bias", {total})) : nullptr};
}

// (The bias is declared first: the order the graph's values are numbered in, kept stable.)
Projection own(ModelBuilder& m, const std::string& module, bool bias, int64_t out, int64_t in, bool conv1d = false) {
  Value* b = m.weight_if(bias, module + ".bias", {out});
  return {linear_weight(m, module + ".weight", out, in, conv1d), b};
}

// An RMSNorm weight of `size` named `name`, stored as is or as an offset from 1.
Value* norm_weight(ModelBuilder& m, const std::string& name, int64_t size, bool offset) {
  Value* w = m.weight(name, {size});
  return offset ? m.plus(w, 1.0) : w;
}

// The q or k RMSNorm of a projection: its weight's name, and whether it spans the whole
// projection (OLMo-2) rather than each head.
struct HeadNorm {
  std::string weight;  // empty: none
  bool whole = false;
  bool offset = false;  // stored as an offset from 1 (Gemma-3)
};

// Projects x to heads: [B, S, hidden] -> [B, heads, S, head_dim], with an optional RMSNorm.
Value* project_heads(ModelBuilder& m, const Projection& p, int64_t heads, int64_t head_dim, Value* x,
                     const HeadNorm& norm, double eps) {
  Builder& b = m.b();
  Value* y = b.linear(x, p.weight, p.bias);
  if (!norm.weight.empty() && norm.whole) y = b.rms_norm(y, norm_weight(m, norm.weight, heads * head_dim, norm.offset), eps);
  y = b.reshape(y, {x->shape[0], x->shape[1], Dim(heads), Dim(head_dim)});
  if (!norm.weight.empty() && !norm.whole) y = b.rms_norm(y, norm_weight(m, norm.weight, head_dim, norm.offset), eps);
  return b.transpose(y, {0, 2, 1, 3});
}

// The query (part 0) or the output gate (part 1) of a q_proj holding per head [query | gate].
Projection gated_query_rows(ModelBuilder& m, const std::string& module, const AttentionSpec& s, int64_t part) {
  const int64_t d = s.head_dim, total = s.heads * 2 * d;
  auto pick = [&](Value* fused) { return m.row_blocks(fused, 2 * d, part * d, d, s.heads); };
  Value* bias = s.qkv_bias ? pick(m.weight(module + ".bias", {total})) : nullptr;
  return {pick(m.weight(module + ".weight", {total, s.hidden})), bias};
}

// Projection j (0 q, 1 k, 2 v) of attention `s` under prefix `p`: its own module, or rows of the fused one.
Projection qkv_projection(ModelBuilder& m, const std::string& p, const AttentionSpec& s, int64_t j) {
  const int64_t q_out = s.heads * s.head_dim, kv_out = s.kv_heads * s.head_dim;
  if (s.output_gate && j == 0) return gated_query_rows(m, p + s.q, s, 0);
  const int64_t out = j == 0 ? q_out : kv_out, begin = j == 0 ? 0 : q_out + (j - 1) * kv_out;
  const std::string& name = j == 0 ? s.q : j == 1 ? s.k : s.v;
  if (s.qkv.empty()) return own(m, p + name, s.qkv_bias && (j != 1 || s.k_bias), out, s.hidden, s.conv1d);
  if (s.qkv_layout == AttentionSpec::FusedLayout::PerHead)
    return per_head_rows(m, p + s.qkv, s.qkv_bias, s.heads, s.head_dim, s.hidden, j);
  return fused_rows(m, p + s.qkv, s.qkv_bias, q_out + 2 * kv_out, s.hidden, begin, begin + out, s.conv1d);
}

// Attention's result [B, heads, S, head_dim] back to [B, S, hidden] through the out projection.
Value* attention_output(ModelBuilder& m, const std::string& p, const AttentionSpec& s, Value* x, Value* o) {
  Builder& b = m.b();
  const int64_t q_out = s.heads * s.head_dim;
  o = b.reshape(b.transpose(o, {0, 2, 1, 3}), {x->shape[0], x->shape[1], Dim(q_out)});
  if (s.output_gate) {
    const Projection gate = gated_query_rows(m, p + s.q, s, 1);
    o = b.mul(o, b.unary(OpKind::Sigmoid, b.linear(x, gate.weight, gate.bias)));
  }
  const Projection out = own(m, p + s.o, s.o_bias, s.hidden, q_out, s.conv1d);
  return b.linear(o, out.weight, out.bias);
}

double attention_scale(const AttentionSpec& s) {
  return s.scale > 0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
}

}  // namespace

Value* attention_block(ModelBuilder& m, const std::string& p, const AttentionSpec& s, Value* x,
                       const AttentionContext& ctx) {
  Builder& b = m.b();
  b.set_scope(p.substr(0, p.size() - 1));
  auto head_norm = [&](const std::string& module) {
    const bool any = s.qk_norm || s.qk_norm_whole;
    return HeadNorm{any ? p + module + ".weight" : "", s.qk_norm_whole, s.qk_norm_offset};
  };
  // Built one after another: each projection's weights are declared as it is built.
  Value* q = project_heads(m, qkv_projection(m, p, s, 0), s.heads, s.head_dim, x, head_norm(s.q_norm),
                           s.norm_epsilon);
  Value* k = project_heads(m, qkv_projection(m, p, s, 1), s.kv_heads, s.head_dim, x, head_norm(s.k_norm),
                           s.norm_epsilon);
  Value* v = project_heads(m, qkv_projection(m, p, s, 2), s.kv_heads, s.head_dim, x, {}, 0);
  k = scaled(b, k, s.k_scale);
  if (ctx.cos) {
    q = b.rope(q, ctx.cos, ctx.sin, false);
    k = b.rope(k, ctx.cos, ctx.sin, false);
  }
  std::tie(k, v) = ctx.cache(k, v);
  Value* sinks = m.weight_if(s.sinks, p + "sinks", {s.heads});
  Value* o = b.attention(q, k, v, ctx.mask, {.scale = attention_scale(s), .softcap = s.softcap, .causal = ctx.causal},
                         sinks, ctx.bias);
  return attention_output(m, p, s, x, o);
}

std::pair<Value*, Value*> cross_keys_values(ModelBuilder& m, const std::string& p, const AttentionSpec& s, Value* memory) {
  m.b().set_scope(p.substr(0, p.size() - 1));
  Value* k = project_heads(m, qkv_projection(m, p, s, 1), s.kv_heads, s.head_dim, memory, {}, 0);
  return {k, project_heads(m, qkv_projection(m, p, s, 2), s.kv_heads, s.head_dim, memory, {}, 0)};
}

Value* cross_attention_block(ModelBuilder& m, const std::string& p, const AttentionSpec& s, Value* x, Value* keys,
                             Value* values, Value* mask, Value* bias) {
  Builder& b = m.b();
  b.set_scope(p.substr(0, p.size() - 1));
  Value* q = project_heads(m, qkv_projection(m, p, s, 0), s.heads, s.head_dim, x, {}, 0);
  if (mask && mask->shape[2] != q->shape[2]) {  // [B, 1, 1, T] over every query: kernels want the query dim
    Value* queries = b.range(b.const_i64({0}), b.gather(b.shape_of(x), b.const_i64({1}), 0), b.const_i64({1}), x->shape[1]);
    Value* every = b.compare(OpKind::LessOrEqual, b.const_i64({0}), queries);
    mask = b.logical_and(mask, b.unsqueeze(every, {0, 1, 3}));
  }
  Value* o = b.attention(q, keys, values, mask, {.scale = attention_scale(s), .softcap = s.softcap, .causal = false},
                         nullptr, bias);
  return attention_output(m, p, s, x, o);
}

namespace {

// The experts' gate_up [E, 2I, H] (gate and up rows interleaved) and down [E, H, I] weights.
std::pair<Value*, Value*> expert_weights(ModelBuilder& m, const std::string& p, const MoeSpec& s) {
  const int64_t e = s.experts, inter = s.intermediate, hidden = s.hidden;
  std::vector<Value*> gate_up, down;
  switch (s.layout) {
    case MoeSpec::Layout::PerExpert:
      for (int64_t i = 0; i < e; ++i) {
        const std::string ep = p + "experts." + std::to_string(i) + ".";
        Value* gate = m.weight(ep + s.gate + ".weight", {inter, hidden});
        gate_up.push_back(m.interleave_rows(gate, m.weight(ep + s.up + ".weight", {inter, hidden})));
        down.push_back(m.weight(ep + s.down + ".weight", {hidden, inter}));
      }
      break;
    case MoeSpec::Layout::FusedConcat: {
      Value* fused = m.view(m.weight(p + s.fused_gate_up, {e, 2 * inter, hidden}), {e * 2 * inter, hidden});
      for (int64_t i = 0; i < e; ++i)
        gate_up.push_back(m.interleave_rows(m.rows(fused, 2 * i * inter, (2 * i + 1) * inter),
                                            m.rows(fused, (2 * i + 1) * inter, (2 * i + 2) * inter)));
      return {m.view(m.stack(gate_up), {e, 2 * inter, hidden}, p + "experts.gate_up"),
              m.weight(p + s.fused_down, {e, hidden, inter})};
    }
    case MoeSpec::Layout::FusedInterleavedIn: {  // [E, in, out] per expert: transposed to [out, in]
      Value* fused = m.view(m.weight(p + "experts.gate_up_proj", {e, hidden, 2 * inter}), {e * hidden, 2 * inter});
      Value* fused_down = m.view(m.weight(p + "experts.down_proj", {e, inter, hidden}), {e * inter, hidden});
      for (int64_t i = 0; i < e; ++i) {
        gate_up.push_back(m.transposed(m.rows(fused, i * hidden, (i + 1) * hidden)));
        down.push_back(m.transposed(m.rows(fused_down, i * inter, (i + 1) * inter)));
      }
      break;
    }
    case MoeSpec::Layout::FusedConcatIn: {  // [E, in, out] per expert, gate columns then up
      Value* fused = m.view(m.weight(p + s.fused_gate_up, {e, hidden, 2 * inter}), {e * hidden, 2 * inter});
      Value* fused_down = m.view(m.weight(p + s.fused_down, {e, inter, hidden}), {e * inter, hidden});
      for (int64_t i = 0; i < e; ++i) {
        Value* rows = m.transposed(m.rows(fused, i * hidden, (i + 1) * hidden));  // [2I, H]
        gate_up.push_back(m.interleave_rows(m.rows(rows, 0, inter), m.rows(rows, inter, 2 * inter)));
        down.push_back(m.transposed(m.rows(fused_down, i * inter, (i + 1) * inter)));
      }
      break;
    }
    case MoeSpec::Layout::Mxfp4: {  // already [out, in] rows
      Value* gu = m.mxfp4(p + "experts.gate_up_proj_blocks", p + "experts.gate_up_proj_scales", {e, 2 * inter, hidden / 32});
      Value* d = m.mxfp4(p + "experts.down_proj_blocks", p + "experts.down_proj_scales", {e, hidden, inter / 32});
      return {m.view(gu, {e, 2 * inter, hidden}, p + "experts.gate_up"), m.view(d, {e, hidden, inter}, p + "experts.down")};
    }
  }
  return {m.view(m.stack(gate_up), {e, 2 * inter, hidden}, p + "experts.gate_up"),
          m.view(m.stack(down), {e, hidden, inter}, p + "experts.down")};
}

}  // namespace

Value* moe_block(ModelBuilder& m, const std::string& p, const MoeSpec& s, Value* x) {
  Builder& b = m.b();
  b.set_scope(p.substr(0, p.size() - 1));
  Value* router_bias = m.weight_if(s.router_bias, p + s.router + ".bias", {s.experts});
  Value* logits = b.linear(x, m.weight(p + s.router + ".weight", {s.experts, s.hidden}), router_bias);
  const auto [gate_up, down] = expert_weights(m, p, s);
  Value* gate_up_bias = m.weight_if(s.expert_bias, p + "experts.gate_up_proj_bias", {s.experts, 2 * s.intermediate});
  Value* down_bias = m.weight_if(s.expert_bias, p + "experts.down_proj_bias", {s.experts, s.hidden});
  Value* selection_bias = s.selection_bias.empty() ? nullptr : m.weight(p + s.selection_bias, {s.experts});
  b.set_scope(p + "experts");
  const MoEAttrs attrs{s.top_k, s.normalize, s.alpha, s.beta, s.limit, s.sigmoid_routing, s.normalize_epsilon, s.routed_scaling};
  return b.moe(x, logits, gate_up, down, gate_up_bias, down_bias, attrs, selection_bias);
}

namespace {

// transformers' ACT2FN entries the blocks build, by name.
using ActivationRule = Value* (*)(Builder&, Value*);
const std::map<std::string, ActivationRule, std::less<>>& activations() {
  static const std::map<std::string, ActivationRule, std::less<>> table = {
      {"silu", [](Builder& b, Value* x) { return b.silu(x); }},
      {"swish", [](Builder& b, Value* x) { return b.silu(x); }},
      {"gelu", [](Builder& b, Value* x) { return b.gelu(x, GeluApproximation::None); }},
      {"gelu_python", [](Builder& b, Value* x) { return b.gelu(x, GeluApproximation::None); }},
      {"gelu_pytorch_tanh", [](Builder& b, Value* x) { return b.gelu(x, GeluApproximation::Tanh); }},
      {"gelu_new", [](Builder& b, Value* x) { return b.gelu(x, GeluApproximation::Tanh); }},
      {"gelu_fast", [](Builder& b, Value* x) { return b.gelu(x, GeluApproximation::Tanh); }},
      {"quick_gelu", [](Builder& b, Value* x) { return b.mul(x, b.unary(OpKind::Sigmoid, b.mul(x, b.scalar(1.702, x->dtype)))); }},
      {"relu", [](Builder& b, Value* x) { return b.max(x, b.scalar(0.0, x->dtype)); }},
      {"tanh", [](Builder& b, Value* x) { return b.unary(OpKind::Tanh, x); }},
      {"sigmoid", [](Builder& b, Value* x) { return b.unary(OpKind::Sigmoid, x); }},
  };
  return table;
}

}  // namespace

void check_activation(const JsonConfig& c, const std::string& key, const std::string& act) {
  if (activations().count(act)) return;
  std::string names;
  for (const auto& [name, rule] : activations()) names += (names.empty() ? "" : ", ") + name;
  c.invalid(key, "is not a supported activation (" + names + ")");
}

Value* activation(Builder& b, const std::string& name, Value* x) {
  const auto it = activations().find(name);
  HFX_CHECK(it != activations().end(), "internal error: activation '", name, "' was not checked");
  return it->second(b, x);
}

Value* scaled(Builder& b, Value* x, double k) { return k != 1.0 ? b.mul(x, b.scalar(k, x->dtype)) : x; }

Value* gated_mlp(ModelBuilder& m, const std::string& p, const MlpSpec& s, Value* x) {
  Builder& b = m.b();
  b.set_scope(p.substr(0, p.size() - 1));
  const int64_t inter = s.intermediate;
  auto up_projection = [&](const std::string& name, int64_t begin) {
    if (s.gate_up.empty()) return own(m, p + name, s.bias, inter, s.hidden);
    return fused_rows(m, p + s.gate_up, s.bias, 2 * inter, s.hidden, begin, begin + inter);
  };
  if (!s.gated) {
    const Projection up_p = own(m, p + s.up, s.bias, inter, s.hidden, s.conv1d);
    Value* h = activation(b, s.activation, b.linear(x, up_p.weight, up_p.bias));
    const Projection down = own(m, p + s.down, s.bias, s.hidden, inter, s.conv1d);
    return b.linear(h, down.weight, down.bias);
  }
  const Projection gate_p = up_projection(s.gate, 0);
  Value* gate = scaled(b, b.linear(x, gate_p.weight, gate_p.bias), s.gate_scale);
  const Projection up_p = up_projection(s.up, inter);
  Value* up = b.linear(x, up_p.weight, up_p.bias);
  Value* act = activation(b, s.activation, gate);
  const Projection down = own(m, p + s.down, s.bias, s.hidden, inter);
  return scaled(b, b.linear(b.mul(act, up), down.weight, down.bias), s.down_scale);
}

int64_t conv_kernel_size(const JsonConfig& c, const std::string& key, int64_t fallback) {
  const int64_t kernel = c.positive(key, fallback);
  if (kernel < 2) c.invalid(key, str("must be at least 2 (a causal convolution whose state holds kernel - 1 inputs), got ", kernel));
  return kernel;
}

Value* swap_last(Builder& b, Value* x) { return b.transpose(x, {0, 1, 3, 2}); }

}  // namespace hfx
