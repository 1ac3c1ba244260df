// gpt-oss: attention with biases and sinks (a learned logit per head in the softmax), a sliding
// window on the layers layer_types marks (by default the even ones), YaRN by default; MoE
// feed-forwards with a biased router (top-k of the logits, softmax over those: the renormalised
// softmax), experts fused as gate_up_proj [E, H, 2I] (gate / up columns interleaved) and
// down_proj [E, I, H] with biases, and the clamped SwiGLU (u + 1) * g sigmoid(alpha g). The Hub's
// checkpoints store the experts as MXFP4 (*_blocks + *_scales), read as such.
#include "core/error.h"
#include "models/moe.h"

namespace hfx {
namespace {

// GptOssConfig's RoPE when the config names none: YaRN, factor 32 over 4096 positions, untruncated.
JsonConfig gpt_oss_rope_params(const JsonConfig& c) {
  if (auto p = c.object("rope_scaling")) return *p;
  if (auto p = c.object("rope_parameters")) return *p;
  return JsonConfig({{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                     {"truncate", false}, {"original_max_position_embeddings", 4096}},
                    c.where());
}

constexpr DecoderDefaults kGptOss{
    .max_position_embeddings = 131072,
    .num_key_value_heads = 8,
    .head_dim = 64,
    .attention_bias = AttentionBias::None,  // attention_bias, below (default true)
    .rope_theta = 150000.0,
    .rope_params = gpt_oss_rope_params,
    .norm_eps = 1e-5,
    .quant_method = "mxfp4",
    .output_type = "MoeCausalLMOutputWithPast",
};

class GptOssDecoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    cfg.attention.qkv_bias = cfg.attention.o_bias = c.boolean("attention_bias", true);
    cfg.attention.sinks = true;
    cfg.mlp.activation = "silu";  // hidden_act is not read: the experts' activation is their own
    MoeSpec moe = parse_moe(c, cfg, cfg.intermediate, 4);
    moe.router = "router";
    moe.router_bias = moe.expert_bias = true;
    moe.alpha = c.number("swiglu_alpha", 1.702);
    moe.beta = 1.0;
    moe.limit = c.number("swiglu_limit", 7.0);
    if (moe.limit <= 0) c.invalid("swiglu_limit", "must be positive");
    moe.layout = MoeSpec::Layout::FusedInterleavedIn;  // or MXFP4, when the checkpoint has *_blocks
    if (c.has("quantization_config")) {  // mxfp4, checked by the kit
      if (cfg.hidden % 32 || cfg.intermediate % 32)
        c.invalid("intermediate_size", "and hidden_size must be multiples of 32 for mxfp4 experts");
    }
    cfg.moe = moe;
    cfg.layer_moe.assign(static_cast<size_t>(cfg.layers), true);
    patterned_windows(c, cfg, 128, 2);
    return cfg;
  }
};

}  // namespace

HFX_REGISTER_DECODER("gpt_oss", GptOssDecoder, kGptOss)

}  // namespace hfx
