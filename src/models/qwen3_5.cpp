// Qwen3.5 (qwen3_5_text, Qwen3_5ForCausalLM; qwen3_5: the text model of the vision-language
// checkpoint, as AutoModelForCausalLM loads it), Qwen3.5-MoE (qwen3_5_moe_text, qwen3_5_moe) and
// Qwen3-Next (qwen3_next): by layer_types (else every full_attention_interval-th layer attends),
// gated DeltaNet mixers ("linear_attention", under linear_attn) or gated full attention (q_proj
// holds per head [query | gate], the output times sigmoid(gate); q/k RMSNorm; partial RoPE,
// default factor 0.25); RMSNorms scale by 1 + w. Qwen3.5's feed-forward is a SwiGLU; Qwen3.5-MoE's
// a sparse MoE (softmax top-k, renormalised) plus a shared expert gated by
// sigmoid(shared_expert_gate) in every layer; Qwen3-Next's the same (renormalised with
// norm_topk_prob) on the layers decoder_sparse_step picks outside mlp_only_layers (the others a
// SwiGLU of intermediate_size).
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

// Qwen3-Next's and Qwen3.5-MoE's: the same keys, MoE outputs.
constexpr DecoderDefaults with_moe_outputs(DecoderDefaults d) {
  d.output_type = "MoeCausalLMOutputWithPast";
  return d;
}
constexpr DecoderDefaults kQwen3Next = with_moe_outputs(kQwen3_5Text);

// layer_types, else linear attention but on every full_attention_interval-th layer.
std::vector<std::string> mixer_types(const JsonConfig& c, int64_t layers) {
  if (auto listed = listed_layer_types(c, layers, {kLinear, kFull})) return std::move(*listed);
  const int64_t interval = c.positive("full_attention_interval", 4);
  std::vector<std::string> types;
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
  s.kernel = conv_kernel_size(c, "linear_conv_kernel_dim", 4);
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

  DecoderConfig parse(const JsonConfig& config) const override { return parse_text(config, text_part(config)); }

  Value* layer(DecoderGraph& g, int64_t i, Value* x) const override {
    if (g.cfg.layer_types[static_cast<size_t>(i)] != kLinear) return Decoder::layer(g, i, x);
    Builder& b = g.b();
    const std::string p = layer_prefix(g, i);
    x = b.add(x, gated_deltanet(g, i, p + "linear_attn.", g.cfg.delta, norm(g, p + "input_layernorm", x), g.cfg.max_positions));
    return b.add(x, mlp(g, i, p + "mlp.", norm(g, p + "post_attention_layernorm", x)));
  }

  // The routed experts plus the shared expert, gated per token, where the layer has them.
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

 protected:
  // The text model's config `text` (config.json's own, or its text_config); the manifest names
  // config.json's model_type and architectures.
  DecoderConfig parse_text(const JsonConfig& config, const JsonConfig& text) const {
    const JsonConfig c = text_rope(text);
    DecoderConfig cfg = Decoder::parse(c);
    cfg.model_type = config.string("model_type", cfg.model_type);
    cfg.architectures = architectures(config);
    // A vision-language checkpoint ties its head as its own config says (the composite model's
    // rule), whatever text_config's flag.
    if (config.has("text_config") && config.has("tie_word_embeddings")) cfg.tied = config.boolean("tie_word_embeddings", cfg.tied);
    if (cfg.mlp.activation != "silu") c.invalid("hidden_act", "must be \"silu\"");
    cfg.attention.output_gate = true;
    cfg.attention.qk_norm_offset = true;
    cfg.layer_types = mixer_types(c, cfg.layers);
    cfg.delta = read_delta_keys(c, cfg, layout());
    cfg.conv.kernel = cfg.delta.kernel;
    read_feed_forward(c, cfg);
    return cfg;
  }

  // The vision-language checkpoint's config (qwen3_5, qwen3_5_moe) holds the text model's in
  // text_config, which transformers' causal LM class reads ("VLM compatibility").
  static JsonConfig text_part(const JsonConfig& config) {
    if (auto text = config.object("text_config")) return *text;
    return config;
  }
  virtual GatedDeltaSpec::Layout layout() const { return GatedDeltaSpec::Layout::Separate; }
  virtual void read_feed_forward(const JsonConfig&, DecoderConfig&) const {}

  // Sparse experts (softmax top-k) with a shared expert of shared_expert_intermediate_size on the
  // layers `moe_layers` marks.
  static void read_moe(const JsonConfig& c, DecoderConfig& cfg, int64_t top_k, bool normalize,
                       std::vector<bool> moe_layers) {
    MoeSpec moe = parse_moe(c, cfg, c.positive("moe_intermediate_size", 512), top_k);
    moe.normalize = normalize;
    moe.shared_expert = c.positive("shared_expert_intermediate_size", 512);
    cfg.moe = moe;
    cfg.layer_moe = std::move(moe_layers);
  }
};

// Qwen3.5-MoE: every layer's feed-forward is the sparse block (renormalised top-k) and the shared
// expert.
class Qwen3_5MoeDecoder final : public Qwen3_5Decoder {
 public:
  using Qwen3_5Decoder::Qwen3_5Decoder;

  DecoderConfig parse(const JsonConfig& config) const override {
    // No dense MLP: intermediate_size is not a key of the family.
    const JsonConfig text = text_part(config);
    nlohmann::json json = text.json();
    if (!json.contains("intermediate_size")) json["intermediate_size"] = json.value("moe_intermediate_size", 512);
    return parse_text(config, JsonConfig(std::move(json), text.where()));
  }

 private:
  void read_feed_forward(const JsonConfig& c, DecoderConfig& cfg) const override {
    read_moe(c, cfg, 8, true, std::vector<bool>(static_cast<size_t>(cfg.layers), true));
  }
};

class Qwen3NextDecoder final : public Qwen3_5Decoder {
 public:
  using Qwen3_5Decoder::Qwen3_5Decoder;

 private:
  GatedDeltaSpec::Layout layout() const override { return GatedDeltaSpec::Layout::PerKeyHead; }

  void read_feed_forward(const JsonConfig& c, DecoderConfig& cfg) const override {
    if (c.integer("num_experts", 512) <= 0) return;  // every layer dense
    std::vector<bool> moe_layers = sparse_layers(c, cfg.layers);
    read_moe(c, cfg, 10, c.boolean("norm_topk_prob", true), std::move(moe_layers));
  }
};

}  // namespace

HFX_REGISTER_DECODER("qwen3_5_text", Qwen3_5Decoder, kQwen3_5Text)
HFX_REGISTER_DECODER("qwen3_5", Qwen3_5Decoder, kQwen3_5Text)
HFX_REGISTER_DECODER("qwen3_5_moe_text", Qwen3_5MoeDecoder, kQwen3Next)
HFX_REGISTER_DECODER("qwen3_5_moe", Qwen3_5MoeDecoder, kQwen3Next)
HFX_REGISTER_DECODER("qwen3_next", Qwen3NextDecoder, kQwen3Next)

}  // namespace hfx
