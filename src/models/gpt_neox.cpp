// GPT-NeoX (Pythia): LayerNorm with biases, attention and MLP in parallel off one residual
// (use_parallel_residual), partial rotary (rotary_pct, default 0.25), one fused
// query_key_value laid out per head ([heads, 3, head_dim] rows), a plain GELU MLP with biases,
// and the head saved as embed_out (lm_head in checkpoints re-saved from a loaded model).
#include "models/decoder.h"

namespace hfx {
namespace {

// transformers' GPTNeoXConfig: rope_parameters (or 4.x rope_scaling), with rope_theta from
// rotary_emb_base and partial_rotary_factor from rotary_pct when unset; top-level 5.x keys are
// not read.
JsonConfig neox_rope_params(const JsonConfig& c) {
  auto params = c.object("rope_scaling");
  if (!params) params = c.object("rope_parameters");
  nlohmann::json p = params ? params->json() : nlohmann::json::object();
  if (!p.contains("rope_theta") || p["rope_theta"].is_null()) p["rope_theta"] = c.number("rotary_emb_base", 10000.0);
  if (!p.contains("partial_rotary_factor") || p["partial_rotary_factor"].is_null())
    p["partial_rotary_factor"] = c.number("rotary_pct", 0.25);
  return JsonConfig(std::move(p), params ? params->where() : c.where());
}

constexpr DecoderDefaults kGptNeox{
    .max_position_embeddings = 2048,
    .grouped_kv = false,
    .attention_bias = AttentionBias::None,  // attention_bias, below (default true)
    .partial_rotary = true,
    .partial_rotary_factor = 0.25,
    .rope_params = neox_rope_params,
    .norm = NormKind::LayerNorm,
    .norm_eps_key = "layer_norm_eps",
    .norm_eps = 1e-5,
    .activation = "gelu",
    .names = {.model = "gpt_neox.",
              .embed = "embed_in",
              .attention = "attention",
              .final_norm = "final_layer_norm",
              .head = "embed_out"},
};

class GptNeoxDecoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    cfg.attention.qkv = "query_key_value";
    cfg.attention.qkv_layout = AttentionSpec::FusedLayout::PerHead;
    cfg.attention.o = "dense";
    cfg.attention.qkv_bias = cfg.attention.o_bias = c.boolean("attention_bias", true);
    cfg.mlp.gated = false;
    cfg.mlp.bias = true;
    cfg.mlp.up = "dense_h_to_4h";
    cfg.mlp.down = "dense_4h_to_h";
    cfg.parallel_residual = c.boolean("use_parallel_residual", true);
    return cfg;
  }

  Value* head(DecoderGraph& g, Value* x) const override {
    if (g.cfg.tied || !g.m.has("lm_head.weight")) return Decoder::head(g, x);
    g.b().set_scope("lm_head");
    return g.b().linear(x, g.m.weight("lm_head.weight", {g.cfg.vocab, g.cfg.hidden}));
  }
};

}  // namespace

HFX_REGISTER_DECODER("gpt_neox", GptNeoxDecoder, kGptNeox)

}  // namespace hfx
