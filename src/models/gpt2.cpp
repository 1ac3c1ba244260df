// GPT-2: learned absolute positions (wpe) added to the token embeddings, LayerNorm with biases,
// Conv1D weights stored [in, out], one fused c_attn ([q | k | v] columns), a plain gelu_new MLP
// (c_fc, c_proj) and no RoPE. Config keys are GPT-2's own (n_embd, n_layer, n_head, n_inner,
// n_positions, activation_function, layer_norm_epsilon). Hub checkpoints carry no "transformer."
// prefix and old ones the attention's causal-mask buffers (attn.bias, attn.masked_bias).
#include <cmath>

#include "core/error.h"
#include "models/decoder.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kGpt2{
    .max_position_embeddings = 1024,
    .attention_bias = AttentionBias::None,
    .tie_word_embeddings = true,
    .norm = NormKind::LayerNorm,
    .norm_eps_key = "layer_norm_epsilon",
    .norm_eps = 1e-5,
    .activation_key = "activation_function",
    .activation = "gelu_new",
    .names = {.model = "transformer.",
              .embed = "wte",
              .layers = "h",
              .attention = "attn",
              .attention_norm = "ln_1",
              .mlp_norm = "ln_2",
              .final_norm = "ln_f"},
    .output_type = "CausalLMOutputWithCrossAttentions",
};

// A GPT-2 key, or its transformers alias (hidden_size for n_embd, ...) when only that is given.
int64_t gpt2_positive(const JsonConfig& c, const char* key, const char* alias, int64_t fallback) {
  return c.has(key) || !c.has(alias) ? c.positive(key, fallback) : c.positive(alias);
}

class Gpt2Decoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg;
    cfg.model_type = c.string("model_type", "");
    if (c.has("architectures") && c.at("architectures").is_array())
      for (const auto& a : c.at("architectures"))
        if (a.is_string()) cfg.architectures.push_back(a.get<std::string>());
    cfg.vocab = c.positive("vocab_size", 50257);
    cfg.hidden = gpt2_positive(c, "n_embd", "hidden_size", 768);
    cfg.layers = gpt2_positive(c, "n_layer", "num_hidden_layers", 12);
    const int64_t heads = gpt2_positive(c, "n_head", "num_attention_heads", 12);
    cfg.max_positions = gpt2_positive(c, "n_positions", "max_position_embeddings", 1024);
    cfg.intermediate = c.has("n_inner") ? c.positive("n_inner") : 4 * cfg.hidden;
    if (cfg.hidden % heads != 0) c.invalid("n_embd", str("must be a multiple of n_head (", heads, ")"));
    if (c.boolean("add_cross_attention", false))
      c.invalid("add_cross_attention", "true is not supported (decoder-only models)");
    cfg.norm = NormKind::LayerNorm;
    cfg.norm_eps = c.number("layer_norm_epsilon", 1e-5);
    if (cfg.norm_eps < 0) c.invalid("layer_norm_epsilon", "must not be negative");
    cfg.tied = c.boolean("tie_word_embeddings", true);
    AttentionSpec& a = cfg.attention;
    a.hidden = cfg.hidden;
    a.heads = a.kv_heads = heads;
    a.head_dim = cfg.hidden / heads;
    a.qkv = "c_attn";
    a.o = "c_proj";
    a.conv1d = true;
    a.qkv_bias = a.o_bias = true;
    // Scores times head_dim^-1/2 (scale_attn_weights), and / (layer + 1) (scale_attn_by_inverse_layer_idx).
    const double scale = c.boolean("scale_attn_weights", true) ? 1.0 / std::sqrt(static_cast<double>(a.head_dim)) : 1.0;
    const bool by_layer = c.boolean("scale_attn_by_inverse_layer_idx", false);
    for (int64_t i = 0; i < cfg.layers; ++i)
      cfg.layer_attention_scale.push_back(by_layer ? scale / static_cast<double>(i + 1) : scale);
    cfg.mlp = {cfg.hidden, cfg.intermediate, true, c.string("activation_function", "gelu_new")};
    check_activation(c, "activation_function", cfg.mlp.activation);
    cfg.mlp.gated = false;
    cfg.mlp.up = "c_fc";
    cfg.mlp.down = "c_proj";
    cfg.mlp.conv1d = true;
    cfg.layer_rope.assign(static_cast<size_t>(cfg.layers), -1);
    cfg.layer_window.assign(static_cast<size_t>(cfg.layers), std::nullopt);
    return cfg;
  }

  Value* embed(DecoderGraph& g, Value* tokens) const override {
    Builder& b = g.b();
    tokens = Decoder::embed(g, tokens);
    const std::string wpe = g.cfg.prefix + "wpe";
    b.set_scope(wpe);
    Value* positions = b.embedding(g.m.weight(wpe + ".weight", {g.cfg.max_positions, g.cfg.hidden}), g.io->position_ids());
    return b.add(tokens, positions);
  }

  Value* attention(DecoderGraph& g, int64_t i, const std::string& prefix, Value* x) const override {
    g.m.tolerate(prefix + "bias");  // old checkpoints' causal-mask buffers
    g.m.tolerate(prefix + "masked_bias");
    return Decoder::attention(g, i, prefix, x);
  }
};

}  // namespace

HFX_REGISTER_DECODER("gpt2", Gpt2Decoder, kGpt2)

}  // namespace hfx
