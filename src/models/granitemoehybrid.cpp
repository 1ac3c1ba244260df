// GraniteMoeHybrid (Granite 4.0 H): by layer_types, Mamba2 mixers ("linear_attention", 4.x:
// "mamba") or attention ("full_attention" / "attention"), RoPE only when position_embedding_type
// is "rope" (else NoPE); each layer's feed-forward is shared_mlp (input_linear holds gate then up
// rows, output_linear), plus a GraniteMoe block (router.layer, input_linear [E, 2I, H],
// output_linear [E, H, I]) when num_local_experts > 0; Granite's four multipliers.
#include "core/error.h"
#include "models/granite.h"
#include "models/mamba2_mixer.h"
#include "models/moe.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kGraniteMoeHybrid{
    .max_position_embeddings = 2048,
    .attention_bias = AttentionBias::FromConfig,
    .names = {.mlp = "shared_mlp"},
    .output_type = "MoeCausalLMOutputWithPast",
};

constexpr const char* kMamba = "linear_attention";
constexpr const char* kAttention = "full_attention";

// layer_types (or its alias layers_block_type), with 4.x's "mamba" / "attention" read as 5.x
// names; every layer is a Mamba2 layer when neither is given.
std::vector<std::string> mixer_types(const JsonConfig& c, int64_t layers) {
  const char* key = c.has("layer_types") ? "layer_types" : "layers_block_type";
  if (!c.has(key)) return std::vector<std::string>(static_cast<size_t>(layers), kMamba);
  const auto& listed = c.at(key);
  if (!listed.is_array() || static_cast<int64_t>(listed.size()) != layers)
    c.invalid(key, str("must list one type for each of the ", layers, " layers"));
  std::vector<std::string> types;
  for (const auto& t : listed) {
    const std::string type = t.is_string() ? t.get<std::string>() : "";
    if (type == kMamba || type == "mamba") types.emplace_back(kMamba);
    else if (type == kAttention || type == "attention") types.emplace_back(kAttention);
    else c.invalid(key, "entries must be \"linear_attention\" (\"mamba\") or \"full_attention\" (\"attention\")");
  }
  return types;
}

class GraniteMoeHybridDecoder final : public Decoder {
 public:
  using Decoder::Decoder;

  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    read_granite_multipliers(c, cfg);
    cfg.layer_types = mixer_types(c, cfg.layers);
    cfg.mamba = read_mamba_keys(c, cfg.hidden, cfg.norm_eps);
    cfg.conv.kernel = cfg.mamba.kernel;
    const std::string position = c.has("position_embedding_type") ? c.at("position_embedding_type").get<std::string>() : "";
    if (!position.empty() && position != "rope" && position != "nope")
      c.invalid("position_embedding_type", "must be \"rope\" or \"nope\" (or null)");
    if (position != "rope") cfg.layer_rope.assign(static_cast<size_t>(cfg.layers), -1);
    cfg.mlp.intermediate = c.positive("shared_intermediate_size", 1024);
    cfg.mlp.gate_up = "input_linear";
    cfg.mlp.down = "output_linear";
    if (c.integer("num_local_experts", 8) > 0) {
      MoeSpec moe = parse_moe(c, cfg, cfg.intermediate, 2);
      moe.layout = MoeSpec::Layout::FusedConcat;
      cfg.moe = moe;
      cfg.layer_moe.assign(static_cast<size_t>(cfg.layers), true);
    }
    return cfg;
  }

  Value* layer(DecoderGraph& g, int64_t i, Value* x) const override {
    if (g.cfg.layer_types[static_cast<size_t>(i)] != kMamba) return Decoder::layer(g, i, x);
    Builder& b = g.b();
    const std::string p = layer_prefix(g, i);
    const double k = g.cfg.residual_scale;
    x = b.add(x, scaled(b, mamba2_mixer(g, i, p + "mamba.", g.cfg.mamba, norm(g, p + "input_layernorm", x)), k));
    return b.add(x, scaled(b, mlp(g, i, p + "shared_mlp.", norm(g, p + "post_attention_layernorm", x)), k));
  }

  // shared_mlp, plus the routed experts where the layer has them.
  Value* mlp(DecoderGraph& g, int64_t i, const std::string& prefix, Value* x) const override {
    Value* shared = gated_mlp(g.m, prefix, g.cfg.mlp, x);
    if (!g.cfg.moe) return shared;
    MoeSpec spec = *g.cfg.moe;
    const std::string p = layer_prefix(g, i) + "block_sparse_moe.";
    // The Hub's names, or transformers' in-memory ones (save_original_format=False).
    const bool hub = g.m.has(p + "input_linear.weight") || !g.m.has(p + "experts.gate_up_proj");
    spec.router = hub ? "router.layer" : "router";
    if (hub) {
      spec.fused_gate_up = "input_linear.weight";
      spec.fused_down = "output_linear.weight";
    }
    return g.b().add(moe_block(g.m, p, spec, x), shared);
  }
};

}  // namespace

HFX_REGISTER_DECODER("granitemoehybrid", GraniteMoeHybridDecoder, kGraniteMoeHybrid)

}  // namespace hfx
