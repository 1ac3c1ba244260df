// Gemma-3 (text): Gemma-2's sandwich layers without attention softcapping (transformers ignores
// attn_logit_softcapping here), per-head q/k RMSNorm (1 + w), and two RoPE tables: sliding
// layers use rope_local_base_freq with the default type, full layers rope_theta with its scaling.
// Sliding layers come from layer_types, else every layer but each sliding_window_pattern-th.
// use_bidirectional_attention (EmbeddingGemma) makes every mask bidirectional: a forward only.
#include "core/error.h"
#include "models/gemma.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kGemma3Text{
    .max_position_embeddings = 131072,
    .num_key_value_heads = 4,
    .head_dim = 256,
    .attention_bias = AttentionBias::FromConfig,
    .qk_norm = true,
    .rope_theta = 1000000.0,
    .tie_word_embeddings = true,
    .norm = NormKind::RMSOnePlus,
    .activation_key = "hidden_activation",
    .activation = "gelu_pytorch_tanh",
    .names = kGemmaSandwichNames,
};

constexpr int kGlobalRope = 0, kLocalRope = 1;

// The full and sliding layers' RoPE: 5.x nests rope_parameters by layer type; 4.x has rope_theta
// (+ rope_scaling) for full layers and rope_local_base_freq for sliding ones.
std::vector<RopeConfig> gemma3_ropes(const JsonConfig& c, const RopeDefaults& d) {
  const auto nested = c.object("rope_parameters");
  if (nested && !c.has("rope_scaling")) {
    if (!nested->has("full_attention") && !nested->has("sliding_attention"))
      c.invalid("rope_parameters", "must hold \"full_attention\" and \"sliding_attention\" entries for gemma3_text");
    auto entry = [&](const char* type, double theta) {
      if (auto e = nested->object(type)) return parse_rope(c, d, e);
      return parse_rope(c, d, JsonConfig({{"rope_type", "default"}, {"rope_theta", theta}}, nested->where()));
    };
    return {entry("full_attention", 1000000.0), entry("sliding_attention", 10000.0)};
  }
  const double local = c.number("rope_local_base_freq", 10000.0);
  if (local <= 0) c.invalid("rope_local_base_freq", "must be positive");
  return {parse_rope(c, d), parse_rope(c, d, JsonConfig({{"rope_type", "default"}, {"rope_theta", local}}, c.where()))};
}

class Gemma3TextDecoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    parse_gemma2_common(c, cfg, 0.0, /*bidirectional_masks=*/true);
    cfg.attention.qk_norm_offset = true;
    cfg.ropes = gemma3_ropes(c, {cfg.attention.head_dim, cfg.max_positions, false, 1.0, defaults_.rope_theta});
    const std::vector<bool> sliding = patterned_windows(c, cfg, 4096, c.positive("sliding_window_pattern", 6));
    for (size_t i = 0; i < sliding.size(); ++i) cfg.layer_rope[i] = sliding[i] ? kLocalRope : kGlobalRope;
    // Bidirectional sliding layers see keys less than sliding_window // 2 + 1 away on either side
    // (Gemma3TextConfig converts the window config.json holds).
    if (cfg.bidirectional)
      for (auto& window : cfg.layer_window)
        if (window) window = *window / 2 + 1;
    return cfg;
  }
};

}  // namespace

HFX_REGISTER_DECODER("gemma3_text", Gemma3TextDecoder, kGemma3Text)

}  // namespace hfx
