// Qwen3.5 (qwen3_5_text, Qwen3_5ForCausalLM) and Qwen3-Next (qwen3_next): by layer_types (else every
// full_attention_interval-th layer attends), gated DeltaNet mixers ("linear_attention", under
// linear_attn) or gated full attention (q_proj holds per head [query | gate], the output times
// sigmoid(gate); q/k RMSNorm; partial RoPE, default factor 0.25); RMSNorms scale by 1 + w.
// Qwen3.5's feed-forward is a SwiGLU; Qwen3-Next's is a sparse MoE (softmax top-k, renormalised
// with norm_topk_prob) plus a shared expert gated by sigmoid(shared_expert_gate), on the layers
// decoder_sparse_step picks outside mlp_only_layers (the others a SwiGLU of intermediate_size).
// Text positions only: Qwen3.5's M-RoPE sections see one position per token, which is plain RoPE.
#include "core/error.h"
#include "models/gated_deltanet.h"
#include "models/moe.h"

namespace hfx {
namespace {

constexpr const char* kLinear = "linear_attention";
constexpr const char* kFull = "full_attention";

constexpr DecoderDefaults kQwen3_5Text{
    .max_position_embeddings = 32768,
    .head_dim = 256,
    .attention_bias = AttentionBias::FromConfig,
    .qk_norm = true,
    .partial_rotary = true,
    .partial_rotary_factor = 0.25,
    .norm = NormKind::RMSOnePlus,
};

constexpr DecoderDefaults kQwen3Next{
    .max_position_embeddings = 32768,
    .head_dim = 256,
    .attention_bias = AttentionBias::FromConfig,
    .qk_norm = true,
    .partial_rotary = true,
    .partial_rotary_factor = 0.25,
    .norm = NormKind::RMSOnePlus,
    .output_type = "MoeCausalLMOutputWithPast",
};

// layer_types, else linear attention but on every full_attention_interval-th layer.
std::vector<std::string> mixer_types(const JsonConfig& c, int64_t layers) {
  std::vector<std::string> types;
  if (c.has("layer_types")) {
    const auto& listed = c.at("layer_types");
    if (!listed.is_array() || static_cast<int64_t>(listed.size()) != layers)
      c.invalid("layer_types", str("must list one type for each of the ", layers, " layers"));
    for (const auto& t : listed) {
      const std::string type = t.is_string() ? t.get<std::string>() : "";
      if (type != kLinear && type != kFull) c.invalid("layer_types", "entries must be \"linear_attention\" or \"full_attention\"");
      types.push_back(type);
    }
    return types;
  }
  const int64_t interval = c.positive("full_attention_interval", 4);
  for (int64_t i = 0; i < layers; ++i) types.emplace_back((i + 1) % interval ? kLinear : kFull);
  return types;
}

GatedDeltaSpec read_delta_keys(const JsonConfig& c, const DecoderConfig& cfg, GatedDeltaSpec::Layout layout) {
  GatedDeltaSpec s;
  s.hidden = cfg.hidden;
  s.key_heads = c.positive("linear_num_key_heads", 16);
  s.value_heads = c.positive("linear_num_value_heads", 32);
  s.key_dim = c.positive("linear_key_head_dim", 128);
  s.value_dim = c.positive("linear_value_head_dim", 128);
  s.kernel = c.positive("linear_conv_kernel_dim", 4);
  s.norm_eps = cfg.norm_eps;
  s.layout = layout;
  if (s.value_heads % s.key_heads != 0)
    c.invalid("linear_num_value_heads", str("must be a multiple of linear_num_key_heads (", s.key_heads, ")"));
  return s;
}

// The text model's RoPE: M-RoPE's sections dropped (every section reads the same text position).
JsonConfig text_rope(const JsonConfig& c) {
  nlohmann::json json = c.json();
  for (const char* key : {"rope_scaling", "rope_parameters"})
    if (json.contains(key) && json[key].is_object()) {
      json[key].erase("mrope_section");
      json[key].erase("mrope_interleaved");
    }
  return JsonConfig(std::move(json), c.where());
}

class Qwen3_5Decoder : public Decoder {
 public:
  using Decoder::Decoder;

  DecoderConfig parse(const JsonConfig& config) const override {
    const JsonConfig c = text_rope(config);
    DecoderConfig cfg = Decoder::parse(c);
    if (cfg.mlp.activation != "silu") c.invalid("hidden_act", "must be \"silu\"");
    cfg.attention.output_gate = true;
    cfg.attention.qk_norm_offset = true;
    cfg.layer_types = mixer_types(c, cfg.layers);
    cfg.delta = read_delta_keys(c, cfg, layout());
    cfg.conv.kernel = cfg.delta.kernel;
    read_feed_forward(c, cfg);
    return cfg;
  }

  Value* layer(DecoderGraph& g, int64_t i, Value* x) const override {
    if (g.cfg.layer_types[static_cast<size_t>(i)] != kLinear) return Decoder::layer(g, i, x);
    Builder& b = g.b();
    const std::string p = layer_prefix(g, i);
    x = b.add(x, gated_deltanet(g, i, p + "linear_attn.", g.cfg.delta, norm(g, p + "input_layernorm", x), g.cfg.max_positions));
    return b.add(x, mlp(g, i, p + "mlp.", norm(g, p + "post_attention_layernorm", x)));
  }

 protected:
  virtual GatedDeltaSpec::Layout layout() const { return GatedDeltaSpec::Layout::Separate; }
  virtual void read_feed_forward(const JsonConfig&, DecoderConfig&) const {}
};

class Qwen3NextDecoder final : public Qwen3_5Decoder {
 public:
  using Qwen3_5Decoder::Qwen3_5Decoder;

  // The routed experts plus the shared expert, gated per token.
  Value* mlp(DecoderGraph& g, int64_t i, const std::string& prefix, Value* x) const override {
    Value* routed = Decoder::mlp(g, i, prefix, x);
    if (!g.cfg.moe || !g.cfg.layer_moe[static_cast<size_t>(i)]) return routed;
    Builder& b = g.b();
    MlpSpec shared = g.cfg.mlp;
    shared.intermediate = g.cfg.moe->shared_expert;
    Value* expert = gated_mlp(g.m, prefix + "shared_expert.", shared, x);
    b.set_scope(prefix + "shared_expert_gate");
    Value* gate = b.unary(OpKind::Sigmoid, b.linear(x, g.m.weight(prefix + "shared_expert_gate.weight", {1, g.cfg.hidden})));
    return b.add(routed, b.mul(gate, expert));
  }

 private:
  GatedDeltaSpec::Layout layout() const override { return GatedDeltaSpec::Layout::PerKeyHead; }

  void read_feed_forward(const JsonConfig& c, DecoderConfig& cfg) const override {
    if (c.integer("num_experts", 512) <= 0) return;  // every layer dense
    MoeSpec moe = parse_moe(c, cfg, c.positive("moe_intermediate_size", 512), 10);
    moe.normalize = c.boolean("norm_topk_prob", true);
    moe.shared_expert = c.positive("shared_expert_intermediate_size", 512);
    cfg.moe = moe;
    const int64_t step = c.positive("decoder_sparse_step", 1);
    std::vector<bool> dense(static_cast<size_t>(cfg.layers));
    if (c.has("mlp_only_layers")) {
      const auto& only = c.at("mlp_only_layers");
      if (!only.is_array()) c.invalid("mlp_only_layers", "must be a list of layer indices");
      for (const auto& l : only) {
        if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= cfg.layers)
          c.invalid("mlp_only_layers", str("entries must be layer indices below ", cfg.layers));
        dense[static_cast<size_t>(l.get<int64_t>())] = true;
      }
    }
    for (int64_t i = 0; i < cfg.layers; ++i) cfg.layer_moe.push_back(!dense[static_cast<size_t>(i)] && (i + 1) % step == 0);
  }
};

}  // namespace

HFX_REGISTER_DECODER("qwen3_5_text", Qwen3_5Decoder, kQwen3_5Text)
HFX_REGISTER_DECODER("qwen3_next", Qwen3NextDecoder, kQwen3Next)

}  // namespace hfx
