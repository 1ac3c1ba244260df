// Mistral: Llama blocks without biases, 8 kv heads by default, one sliding window on every layer.
#include "models/decoder.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kMistral{
    .max_position_embeddings = 131072,
    .num_key_value_heads = 8,
    .attention_bias = AttentionBias::None,
    .window = WindowRule::AllLayers,
};

}  // namespace

HFX_REGISTER_DECODER("mistral", Decoder, kMistral)

}  // namespace hfx
