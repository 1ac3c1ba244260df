// Llama family: llama, mistral, qwen2, qwen3. Pre-norm decoder blocks with grouped-query
// attention and a gated MLP; the members differ only in biases, q/k norm and sliding windows.
#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "core/error.h"
#include "models/blocks.h"
#include "models/decoder_io.h"
#include "models/registry.h"
#include "models/rope.h"

namespace hfx {
namespace {

struct LlamaFamilyConfig {
  std::string model_type;
  std::vector<std::string> architectures;
  int64_t vocab, hidden, intermediate, layers, max_positions;
  double rms_eps;
  bool tied;
  AttentionSpec attention;
  MlpSpec mlp;
  RopeConfig rope;
  std::vector<std::optional<int64_t>> layer_window;  // sliding window per layer, if any
};

std::vector<std::optional<int64_t>> sliding_windows(const JsonConfig& c, const std::string& type, int64_t layers) {
  std::optional<int64_t> window;
  if (type == "mistral") {
    if (c.has("sliding_window")) window = c.positive("sliding_window");
    return std::vector<std::optional<int64_t>>(static_cast<size_t>(layers), window);
  }
  if (type == "llama") return std::vector<std::optional<int64_t>>(static_cast<size_t>(layers));
  // qwen2 / qwen3: the window applies only with use_sliding_window, on the layers layer_types marks.
  if (c.boolean("use_sliding_window", false) && c.has("sliding_window")) window = c.positive("sliding_window");
  std::vector<std::optional<int64_t>> out(static_cast<size_t>(layers));
  if (c.has("layer_types")) {
    const auto& types = c.at("layer_types");
    if (!types.is_array() || static_cast<int64_t>(types.size()) != layers)
      c.invalid("layer_types", str("must list one type for each of the ", layers, " layers"));
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string t = types[i].is_string() ? types[i].get<std::string>() : "";
      if (t != "full_attention" && t != "sliding_attention")
        c.invalid("layer_types", "entries must be \"full_attention\" or \"sliding_attention\"");
      if (t == "sliding_attention") out[i] = window;
    }
    return out;
  }
  const int64_t first_sliding = c.integer("max_window_layers", 28);
  for (int64_t i = first_sliding; i < layers; ++i) out[static_cast<size_t>(i)] = window;
  return out;
}

LlamaFamilyConfig parse_config(const JsonConfig& c) {
  LlamaFamilyConfig cfg;
  cfg.model_type = c.string("model_type", "");
  if (c.has("architectures") && c.at("architectures").is_array())
    for (const auto& a : c.at("architectures"))
      if (a.is_string()) cfg.architectures.push_back(a.get<std::string>());
  cfg.vocab = c.positive("vocab_size");
  cfg.hidden = c.positive("hidden_size");
  cfg.intermediate = c.positive("intermediate_size");
  cfg.layers = c.positive("num_hidden_layers");
  const int64_t default_positions = cfg.model_type == "llama" ? 2048 : cfg.model_type == "mistral" ? 131072 : 32768;
  cfg.max_positions = c.positive("max_position_embeddings", default_positions);
  cfg.rms_eps = c.number("rms_norm_eps", 1e-6);
  if (cfg.rms_eps < 0) c.invalid("rms_norm_eps", "must not be negative");
  cfg.tied = c.boolean("tie_word_embeddings", false);

  AttentionSpec& a = cfg.attention;
  a.hidden = cfg.hidden;
  a.heads = c.positive("num_attention_heads");
  a.kv_heads = c.positive("num_key_value_heads", cfg.model_type == "mistral" ? 8 : a.heads);
  if (a.heads % a.kv_heads != 0)
    c.invalid("num_key_value_heads", str("must divide num_attention_heads (", a.heads, ")"));
  const int64_t default_head_dim = cfg.model_type == "qwen3" ? 128 : cfg.hidden / a.heads;
  a.head_dim = c.positive("head_dim", default_head_dim);
  if (!c.has("head_dim") && cfg.model_type != "qwen3" && cfg.hidden % a.heads != 0)
    c.invalid("hidden_size", str("must be a multiple of num_attention_heads (", a.heads, ") when head_dim is unset"));
  a.norm_epsilon = cfg.rms_eps;
  const bool attention_bias = c.boolean("attention_bias", false);
  if (cfg.model_type == "qwen2") {
    a.qkv_bias = true;
  } else if (cfg.model_type != "mistral") {
    a.qkv_bias = a.o_bias = attention_bias;
  }
  a.qk_norm = cfg.model_type == "qwen3";

  cfg.mlp = {cfg.hidden, cfg.intermediate, cfg.model_type == "llama" && c.boolean("mlp_bias", false),
             c.string("hidden_act", "silu")};
  const std::string& act = cfg.mlp.activation;
  if (act != "silu" && act != "swish" && act != "gelu" && act != "gelu_pytorch_tanh" && act != "gelu_new" &&
      act != "gelu_fast")
    c.invalid("hidden_act", "is not a supported activation (silu, gelu, gelu_pytorch_tanh, gelu_new)");
  cfg.rope = parse_rope(c, a.head_dim, cfg.max_positions, /*partial_rotary=*/false);
  cfg.layer_window = sliding_windows(c, cfg.model_type, cfg.layers);
  return cfg;
}

std::string layer_prefix(int64_t i) { return "model.layers." + std::to_string(i) + "."; }

void declare_tensors(ModelBuilder& m, const LlamaFamilyConfig& cfg) {
  m.expect("model.embed_tokens.weight", {cfg.vocab, cfg.hidden});
  for (int64_t i = 0; i < cfg.layers; ++i) {
    const std::string p = layer_prefix(i);
    m.expect(p + "input_layernorm.weight", {cfg.hidden});
    m.expect(p + "post_attention_layernorm.weight", {cfg.hidden});
    declare_attention(m, p + "self_attn.", cfg.attention);
    declare_gated_mlp(m, p + "mlp.", cfg.mlp);
  }
  m.expect("model.norm.weight", {cfg.hidden});
  if (cfg.tied) m.tolerate("lm_head.weight");
  else m.expect("lm_head.weight", {cfg.vocab, cfg.hidden});
}

// The graph variants to export: the plain forward, or the components a decode loop needs.
std::vector<std::pair<std::string, DecoderVariant>> components_for(const GenerationOptions& gen) {
  if (!gen.enabled) return {{"model", {}}};
  if (gen.static_cache)
    return {{"decode", {CacheKind::Static, true, false, gen.batch_size, gen.max_cache_len}}};
  if (gen.multi_token) return {{"decode", {CacheKind::Dynamic, true, false}}};
  DecoderVariant prefill{CacheKind::Dynamic, false, false};
  prefill.last_logits = true;
  return {{"prefill", prefill}, {"decode", {CacheKind::Dynamic, true, true}}};
}

std::unique_ptr<Graph> build_graph(const Checkpoint& ckpt, const BuildOptions& opt, const LlamaFamilyConfig& cfg,
                                   const DecoderVariant& variant) {
  ModelBuilder m(ckpt, opt);
  declare_tensors(m, cfg);
  m.check_checkpoint();

  Builder& b = m.b();
  // Dynamic NTK exists to run past max_position_embeddings; the bound says how far it stretches.
  const int64_t max_sequence = cfg.rope.type == "dynamic"
                                   ? static_cast<int64_t>(static_cast<double>(cfg.max_positions) * std::max(1.0, cfg.rope.factor))
                                   : cfg.max_positions;
  b.set_scope("inputs");
  DecoderIO io(b, variant, max_sequence, {cfg.layers, cfg.attention.kv_heads, cfg.attention.head_dim, opt.dtype});
  b.set_scope("model.rotary_emb");
  const auto [cos, sin] = rope_cos_sin(b, cfg.rope, io.position_ids());

  b.set_scope("model.embed_tokens");
  Value* x = b.embedding(m.weight("model.embed_tokens.weight"), io.input_ids());
  for (int64_t i = 0; i < cfg.layers; ++i) {
    const std::string p = layer_prefix(i);
    Value* mask = io.mask(cfg.layer_window[static_cast<size_t>(i)]);
    b.set_scope(p + "input_layernorm");
    Value* h = b.rms_norm(x, m.weight(p + "input_layernorm.weight"), cfg.rms_eps);
    auto cache = [&io, i](Value* k, Value* v) { return io.update_cache(i, k, v); };
    x = b.add(x, attention_block(m, p + "self_attn.", cfg.attention, h, cos, sin, mask, cache));
    b.set_scope(p + "post_attention_layernorm");
    h = b.rms_norm(x, m.weight(p + "post_attention_layernorm.weight"), cfg.rms_eps);
    x = b.add(x, gated_mlp(m, p + "mlp.", cfg.mlp, h));
  }
  b.set_scope("model.norm");
  // With left padding the last column is every row's last real token.
  if (variant.last_logits) x = b.slice(x, 1, -1, INT64_MAX);
  x = b.rms_norm(x, m.weight("model.norm.weight"), cfg.rms_eps);
  b.set_scope("lm_head");
  Value* logits = b.linear(x, m.weight(cfg.tied ? "model.embed_tokens.weight" : "lm_head.weight"));
  io.finish(b.cast(logits, DType::F32));
  return m.finish();
}

}  // namespace

ExportModel build_llama_family(const Checkpoint& ckpt, const BuildOptions& opt) {
  const LlamaFamilyConfig cfg = parse_config(ckpt.config());
  ExportModel out{cfg.model_type, cfg.architectures, {}};
  for (const auto& [name, variant] : components_for(opt.generation))
    out.components.push_back({name, build_graph(ckpt, opt, cfg, variant)});
  return out;
}

}  // namespace hfx
