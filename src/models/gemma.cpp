// Gemma: Llama blocks with embeddings times sqrt(hidden) (rounded to the model dtype), RMSNorm
// scaling by 1 + w, the tanh-approximated GELU (a config's "gelu" means it too), head_dim 256.
#include "models/gemma.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kGemma{
    .max_position_embeddings = 8192,
    .num_key_value_heads = 16,
    .head_dim = 256,
    .attention_bias = AttentionBias::FromConfig,
    .tie_word_embeddings = true,
    .norm = NormKind::RMSOnePlus,
    .activation = "gelu_pytorch_tanh",
};

class GemmaDecoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    parse_gemma_common(c, cfg);
    if (cfg.mlp.activation == "gelu") cfg.mlp.activation = "gelu_pytorch_tanh";  // as GemmaConfig rewrites it
    return cfg;
  }
};

}  // namespace

HFX_REGISTER_DECODER("gemma", GemmaDecoder, kGemma)

}  // namespace hfx
