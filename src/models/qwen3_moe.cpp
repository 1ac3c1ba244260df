// Qwen3-MoE: Qwen3 attention (per-head q/k RMSNorm; head_dim hidden / heads unless the config
// says) with MoE feed-forwards on the layers decoder_sparse_step picks outside mlp_only_layers
// (the others keep a dense MLP of intermediate_size); experts of moe_intermediate_size, router
// weights renormalised only with norm_topk_prob. With use_sliding_window every layer gets the
// window (transformers ignores max_window_layers here).
#include "models/moe.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kQwen3Moe{
    .max_position_embeddings = 32768,
    .attention_bias = AttentionBias::FromConfig,
    .qk_norm = true,
    .output_type = "MoeCausalLMOutputWithPast",
};

class Qwen3MoeDecoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    MoeSpec moe = parse_moe(c, cfg, c.positive("moe_intermediate_size", 768), 8);
    moe.normalize = c.boolean("norm_topk_prob", false);
    cfg.moe = moe;
    cfg.layer_moe = sparse_layers(c, cfg.layers);
    std::optional<int64_t> window;
    if (c.boolean("use_sliding_window", false) && c.has("sliding_window")) window = c.positive("sliding_window");
    cfg.layer_window.assign(static_cast<size_t>(cfg.layers), window);
    return cfg;
  }
};

}  // namespace

HFX_REGISTER_DECODER("qwen3_moe", Qwen3MoeDecoder, kQwen3Moe)

}  // namespace hfx
