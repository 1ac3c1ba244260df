// OLMo-2: no pre-norms; the attention and MLP outputs are RMSNorm-ed inside the residual
// (post_attention_layernorm, post_feedforward_layernorm); q and k are RMSNorm-ed over the whole
// projection, before the head split.
#include "models/decoder.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kOlmo2{
    .max_position_embeddings = 2048,
    .attention_bias = AttentionBias::FromConfig,
    .norm_eps = 1e-5,
    .names = {.attention_norm = "",
              .attention_post_norm = "post_attention_layernorm",
              .mlp_norm = "",
              .mlp_post_norm = "post_feedforward_layernorm"},
};

class Olmo2Decoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    cfg.attention.qk_norm_whole = true;
    return cfg;
  }
};

}  // namespace

HFX_REGISTER_DECODER("olmo2", Olmo2Decoder, kOlmo2)

}  // namespace hfx
