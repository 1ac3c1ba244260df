// StarCoder2: LayerNorm with biases (norm_epsilon), biases on every linear when use_bias, a
// plain c_fc -> act -> c_proj MLP, and one sliding window on every layer when set.
#include "models/decoder.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kStarcoder2{
    .max_position_embeddings = 4096,
    .num_key_value_heads = 2,
    .attention_bias = AttentionBias::None,  // use_bias, below
    .window = WindowRule::AllLayers,
    .tie_word_embeddings = true,
    .norm = NormKind::LayerNorm,
    .norm_eps_key = "norm_epsilon",
    .norm_eps = 1e-5,
    .activation = "gelu_pytorch_tanh",
};

class Starcoder2Decoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    const bool bias = c.boolean("use_bias", true);
    cfg.attention.qkv_bias = cfg.attention.o_bias = bias;
    cfg.mlp.bias = bias;
    cfg.mlp.gated = false;
    cfg.mlp.up = "c_fc";
    cfg.mlp.down = "c_proj";
    return cfg;
  }
};

}  // namespace

HFX_REGISTER_DECODER("starcoder2", Starcoder2Decoder, kStarcoder2)

}  // namespace hfx
