// Granite: Llama blocks with four scalars: embeddings times embedding_multiplier, each residual
// branch times residual_multiplier, attention scores times attention_multiplier (in place of
// 1/sqrt(head_dim)), logits divided by logits_scaling.
#include "models/granite.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kGranite{
    .max_position_embeddings = 2048,
    .attention_bias = AttentionBias::FromConfig,
    .mlp_bias = true,
};

class GraniteDecoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    read_granite_multipliers(c, cfg);
    return cfg;
  }
};

}  // namespace

void read_granite_multipliers(const JsonConfig& c, DecoderConfig& cfg) {
  cfg.embeds_multiplier = c.number("embedding_multiplier", 1.0);
  cfg.residual_scale = c.number("residual_multiplier", 1.0);
  cfg.logits_divisor = c.number("logits_scaling", 1.0);
  if (cfg.logits_divisor == 0) c.invalid("logits_scaling", "must not be zero");
  cfg.attention.scale = c.number("attention_multiplier", 1.0);
  if (cfg.attention.scale <= 0) c.invalid("attention_multiplier", "must be positive");
}

HFX_REGISTER_DECODER("granite", GraniteDecoder, kGranite)

}  // namespace hfx
