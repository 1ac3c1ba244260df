// SmolLM3: Llama blocks where every no_rope_layer_interval-th layer has no RoPE (NoPE);
// `no_rope_layers` (1 = RoPE) says so per layer when given. Sliding windows follow layer_types,
// which by default marks the NoPE layers when use_sliding_window is set.
#include "core/error.h"
#include "models/decoder.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kSmolLM3{
    .max_position_embeddings = 32768,
    .num_key_value_heads = 4,
    .attention_bias = AttentionBias::FromConfig,
    .mlp_bias = true,
    .rope_theta = 2000000.0,
    .tie_word_embeddings = true,
};

std::vector<bool> rope_layers(const JsonConfig& c, int64_t layers) {
  std::vector<bool> out;
  if (c.has("no_rope_layers")) {
    const auto& flags = c.at("no_rope_layers");
    if (!flags.is_array() || static_cast<int64_t>(flags.size()) != layers)
      c.invalid("no_rope_layers", str("must list one 0/1 flag for each of the ", layers, " layers"));
    for (const auto& f : flags) {
      if (!f.is_number_integer() || (f.get<int64_t>() != 0 && f.get<int64_t>() != 1))
        c.invalid("no_rope_layers", "entries must be 0 (no RoPE) or 1 (RoPE)");
      out.push_back(f.get<int64_t>() == 1);
    }
    return out;
  }
  const int64_t interval = c.positive("no_rope_layer_interval", 4);
  for (int64_t i = 0; i < layers; ++i) out.push_back((i + 1) % interval != 0);
  return out;
}

class SmolLM3Decoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    const std::vector<bool> rope = rope_layers(c, cfg.layers);
    std::optional<int64_t> window;
    if (c.has("sliding_window")) window = c.positive("sliding_window");
    const bool use_window = c.boolean("use_sliding_window", false) && window;
    std::vector<bool> sliding(rope.size());
    for (size_t i = 0; i < rope.size(); ++i) sliding[i] = use_window && !rope[i];
    // The masks follow layer_types (transformers builds a sliding mask for its sliding layers).
    if (const auto marked = sliding_layers(c, cfg.layers)) sliding = *marked;
    for (size_t i = 0; i < rope.size(); ++i) {
      cfg.layer_rope[i] = rope[i] ? 0 : -1;
      if (sliding[i] && !window) c.invalid("sliding_window", "must be set: layer_types marks sliding layers");
      cfg.layer_window[i] = sliding[i] ? window : std::nullopt;
    }
    return cfg;
  }
};

}  // namespace

HFX_REGISTER_DECODER("smollm3", SmolLM3Decoder, kSmolLM3)

}  // namespace hfx
