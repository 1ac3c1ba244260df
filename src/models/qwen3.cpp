// Qwen3: Llama blocks + per-head RMSNorm on q and k, head_dim 128 unless the config says;
// attention_bias and sliding windows as Qwen2 configures them.
#include "models/decoder.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kQwen3{
    .max_position_embeddings = 32768,
    .head_dim = 128,
    .attention_bias = AttentionBias::FromConfig,
    .qk_norm = true,
    .window = WindowRule::LayerTypes,
};

}  // namespace

HFX_REGISTER_DECODER("qwen3", Decoder, kQwen3)

}  // namespace hfx
