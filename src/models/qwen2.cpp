// Qwen2: Llama blocks with q/k/v biases; sliding windows only with use_sliding_window, on the
// layers layer_types (or max_window_layers) marks.
#include "models/decoder.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kQwen2{
    .max_position_embeddings = 32768,
    .attention_bias = AttentionBias::QkvAlways,
    .window = WindowRule::LayerTypes,
};

}  // namespace

HFX_REGISTER_DECODER("qwen2", Decoder, kQwen2)

}  // namespace hfx
