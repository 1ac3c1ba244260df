// Gemma-2: Gemma plus a post-norm after attention and a pre/post-norm pair around the MLP,
// attention logits softcapped (attn_logit_softcapping), the final logits too
// (final_logit_softcapping), scores scaled by query_pre_attn_scalar^-1/2, and a sliding window
// on the layers layer_types marks (by default the even ones).
#include "core/error.h"
#include "models/gemma.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kGemma2{
    .max_position_embeddings = 8192,
    .num_key_value_heads = 4,
    .head_dim = 256,
    .attention_bias = AttentionBias::FromConfig,
    .tie_word_embeddings = true,
    .norm = NormKind::RMSOnePlus,
    .activation_key = "hidden_activation",
    .activation = "gelu_pytorch_tanh",
    .names = kGemmaSandwichNames,
};

class Gemma2Decoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    parse_gemma2_common(c, cfg, 30.0);
    cfg.attention.softcap = gemma_softcap(c, "attn_logit_softcapping", 50.0);
    patterned_windows(c, cfg, 4096, 2);
    return cfg;
  }
};

}  // namespace

HFX_REGISTER_DECODER("gemma2", Gemma2Decoder, kGemma2)

}  // namespace hfx
