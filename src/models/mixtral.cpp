// Mixtral: Mistral attention (one sliding window on every layer when set) with a sparse MoE
// feed-forward (block_sparse_moe): softmax router over num_local_experts, top
// num_experts_per_tok experts, weights always renormalised, SwiGLU experts w1 (gate), w3 (up),
// w2 (down). Fused checkpoints (transformers' in-memory layout) name the block "mlp".
#include "models/moe.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kMixtral{
    .max_position_embeddings = 131072,
    .num_key_value_heads = 8,
    .attention_bias = AttentionBias::None,
    .window = WindowRule::AllLayers,
    .rope_theta = 1000000.0,
    .norm_eps = 1e-5,
    .names = {.mlp = "block_sparse_moe"},
    .output_type = "MoeCausalLMOutputWithPast",
};

class MixtralDecoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    MoeSpec moe = parse_moe(c, cfg, cfg.intermediate, 2);
    moe.gate = "w1";
    moe.up = "w3";
    moe.down = "w2";
    cfg.moe = moe;
    cfg.layer_moe.assign(static_cast<size_t>(cfg.layers), true);
    return cfg;
  }

  Value* mlp(DecoderGraph& g, int64_t i, const std::string& prefix, Value* x) const override {
    const std::string fused = layer_prefix(g, i) + "mlp.";
    if (!g.m.has(prefix + "gate.weight") && g.m.has(fused + "experts.gate_up_proj")) return Decoder::mlp(g, i, fused, x);
    return Decoder::mlp(g, i, prefix, x);
  }
};

}  // namespace

HFX_REGISTER_DECODER("mixtral", MixtralDecoder, kMixtral)

}  // namespace hfx
