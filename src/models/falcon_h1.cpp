// FalconH1: every layer runs a Mamba2 mixer (`mamba`) and attention (`self_attn`) side by side on
// one input_layernorm, their outputs summed into the residual, then a SwiGLU feed_forward after
// pre_ff_layernorm; muP multipliers throughout: embeddings (embedding_multiplier), keys
// (key_multiplier), attention in/out, the mixer's input (ssm_in_multiplier), its in_proj columns
// by section (ssm_multipliers), its output (ssm_out_multiplier), the MLP's gate and down
// (mlp_multipliers, applied by gated_mlp) and the logits (lm_head_multiplier). The mixer's width
// is mamba_d_ssm (else mamba_expand * hidden), its out_proj bias projectors_bias, its gated
// RMSNorm optional (mamba_rms_norm) and normalising before the gate by default
// (mamba_norm_before_gate).
#include "core/error.h"
#include "models/mamba2_mixer.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kFalconH1{
    .max_position_embeddings = 8192,
    .num_key_value_heads = 8,
    .attention_bias = AttentionBias::FromConfig,
    .mlp_bias = true,
    .norm_eps = 1e-5,
    .names = {.mlp = "feed_forward", .mlp_norm = "pre_ff_layernorm", .final_norm = "final_layernorm"},
};

// A list of `count` numbers under `key` (default all ones when absent).
std::vector<double> multipliers(const JsonConfig& c, const char* key, size_t count) {
  if (!c.has(key)) return std::vector<double>(count, 1.0);
  const auto& list = c.at(key);
  if (!list.is_array() || list.size() != count) c.invalid(key, str("must list ", count, " numbers"));
  std::vector<double> out;
  for (const auto& v : list) {
    if (!v.is_number()) c.invalid(key, str("must list ", count, " numbers"));
    out.push_back(v.get<double>());
  }
  return out;
}

class FalconH1Decoder final : public Decoder {
 public:
  using Decoder::Decoder;

  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    cfg.embedding_scale = c.number("embedding_multiplier", 1.0);
    cfg.logits_multiplier = c.number("lm_head_multiplier", 1.0);
    cfg.attention.k_scale = c.number("key_multiplier", 1.0);
    cfg.layer_types.assign(static_cast<size_t>(cfg.layers), "hybrid");
    Mamba2Spec& s = cfg.mamba = read_mamba_keys(c, cfg.hidden, cfg.norm_eps, 1024);
    s.out_bias = c.boolean("projectors_bias", false);
    s.gate = !c.boolean("mamba_rms_norm", false) ? Mamba2Spec::Gate::GateOnly
             : c.boolean("mamba_norm_before_gate", true) ? Mamba2Spec::Gate::NormThenGate
                                                          : Mamba2Spec::Gate::GateThenNorm;
    s.in_scale = c.number("ssm_in_multiplier", 1.0);
    if (c.has("ssm_multipliers")) s.projection_scales = multipliers(c, "ssm_multipliers", 5);
    cfg.conv.kernel = s.kernel;
    const std::vector<double> mlp = multipliers(c, "mlp_multipliers", 2);
    cfg.mlp.gate_scale = mlp[0];
    cfg.mlp.down_scale = mlp[1];
    cfg.branch_scales = {c.number("attention_in_multiplier", 1.0), c.number("attention_out_multiplier", 1.0),
                         c.number("ssm_out_multiplier", 1.0)};
    return cfg;
  }

  // x + mamba(h) * ssm_out + attention(h * attention_in) * attention_out, h = input_layernorm(x);
  // then x + feed_forward(pre_ff_layernorm(x)).
  Value* layer(DecoderGraph& g, int64_t i, Value* x) const override {
    Builder& b = g.b();
    const std::string p = layer_prefix(g, i);
    const auto& k = g.cfg.branch_scales;
    Value* h = norm(g, p + "input_layernorm", x);
    Value* mixed = scaled(b, mamba2_mixer(g, i, p + "mamba.", g.cfg.mamba, h), k.mixer_out);
    Value* attended = scaled(b, attention(g, i, p + "self_attn.", scaled(b, h, k.attention_in)), k.attention_out);
    x = b.add(x, b.add(mixed, attended));
    return b.add(x, mlp(g, i, p + "feed_forward.", norm(g, p + "pre_ff_layernorm", x)));
  }
};

}  // namespace

HFX_REGISTER_DECODER("falcon_h1", FalconH1Decoder, kFalconH1)

}  // namespace hfx
