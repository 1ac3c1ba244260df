// Gemma-3 (text): Gemma-2's sandwich layers without attention softcapping (transformers ignores
// attn_logit_softcapping here), per-head q/k RMSNorm (1 + w), and two RoPE tables: sliding
// layers use rope_local_base_freq with the default type, full layers rope_theta with its scaling.
// Sliding layers come from layer_types, else every layer but each sliding_window_pattern-th.
// use_bidirectional_attention (EmbeddingGemma) makes every mask bidirectional: a forward only.
// Gemma 3 (gemma3, Gemma3ForConditionalGeneration): a SigLIP tower's last_hidden_state, average-
// pooled on the patch grid to mm_tokens_per_image tokens, RMSNorm (1 + w), times
// mm_input_projection_weight; the gemma3_text language model over inputs_embeds, where each image's
// tokens also attend to each other both ways (token_type_ids), as a vision-language model's three
// components (vision_language.h).
#include <cmath>

#include "core/error.h"
#include "models/clip.h"
#include "models/encoder.h"
#include "models/gemma.h"
#include "models/seq2seq.h"
#include "models/vision_language.h"

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

constexpr int64_t kMaxImages = 64;

// [images, grid * grid, hidden] -> [images, (grid / k)^2, hidden]: the mean of each k x k block of
// patches (AvgPool2d with kernel and stride k), blocks in row-major order.
Value* average_pooled(Builder& b, Value* x, int64_t grid, int64_t k, int64_t hidden) {
  const Dim images = x->shape[0], side(grid / k), kd(k), h(hidden);
  x = b.reshape(x, {images, side, kd, side, kd, h});
  x = b.reduce(OpKind::ReduceMean, x, {2, 4}, false);
  return b.reshape(x, {images, Dim((grid / k) * (grid / k)), h});
}

std::unique_ptr<Graph> gemma3_vision_encoder(const Checkpoint& ckpt, const ExportConfig& config,
                                             const VisionTowerConfig& v, const VisionLanguageLayout& at,
                                             int64_t tokens, int64_t text_hidden, std::set<std::string>& dims) {
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  Value* pixels = vision_pixels(m, v, "images", kMaxImages);
  Value* x = vision_hidden_states(m, at.vision_tower, v, pixels, v.layers).back();
  x = vision_last_hidden_state(m, at.vision_tower, v, x);
  const std::string p = at.projector;
  b.set_scope(p + "avg_pool");
  const int64_t grid = v.image / v.patch, side = static_cast<int64_t>(std::sqrt(static_cast<double>(tokens)));
  x = average_pooled(b, x, grid, grid / side, v.hidden);
  b.set_scope(p + "mm_soft_emb_norm");
  x = b.rms_norm(x, m.plus(m.weight(p + "mm_soft_emb_norm.weight", {v.hidden}), 1.0), v.eps);
  b.set_scope(p + "mm_input_projection");
  b.output(b.matmul(x, m.weight(p + "mm_input_projection_weight", {v.hidden, text_hidden})), "image_features");
  tolerate_outside_vision(m, ckpt, at, v.layers, {"head."});
  return finish_component(m, "BaseModelOutputWithPooling", v.layers, dims);
}

ExportModel build_gemma3(const Checkpoint& ckpt, const ExportConfig& config) {
  const JsonConfig& c = ckpt.config();
  const auto vision_config = c.object("vision_config");
  if (!vision_config) c.invalid("vision_config", "gemma3 needs the vision tower's vision_config");
  const VisionTowerConfig v = parse_vision_tower(*vision_config, "siglip_vision_model");
  const int64_t tokens = c.positive("mm_tokens_per_image", 256), grid = v.image / v.patch;
  const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(tokens))));
  if (side * side != tokens || grid % side != 0)
    c.invalid("mm_tokens_per_image", str("must be a square whose side divides the ", grid, "-patch grid"));
  const VisionLanguageLayout at = vision_language_layout(ckpt, "mm_input_projection_weight");
  VisionLanguageSpec spec;
  spec.model_type = "gemma3";
  spec.vision_encoder = [&](int64_t text_hidden, std::set<std::string>& dims) {
    return gemma3_vision_encoder(ckpt, config, v, at, tokens, text_hidden, dims);
  };
  spec.image_token_id = c.integer("image_token_index", c.integer("image_token_id", 262144));
  spec.features_per_image = tokens;
  spec.image_blocks = true;
  spec.output_type = "transformers.models.gemma3.modeling_gemma3.Gemma3CausalLMOutputWithPast";
  spec.language_model = at.language_model;
  spec.head = at.head;
  return build_vision_language(ckpt, config, spec);
}

}  // namespace

HFX_REGISTER_DECODER("gemma3_text", Gemma3TextDecoder, kGemma3Text)
HFX_REGISTER_ARCH("gemma3", build_gemma3)

}  // namespace hfx
