// Llama: pre-norm decoder blocks, grouped-query attention, gated MLP (the kit's defaults).
#include "models/decoder.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kLlama{
    .max_position_embeddings = 2048,
    .attention_bias = AttentionBias::FromConfig,
    .mlp_bias = true,
};

}  // namespace

HFX_REGISTER_DECODER("llama", Decoder, kLlama)

}  // namespace hfx
