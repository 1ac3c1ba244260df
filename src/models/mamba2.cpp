// Mamba2 (Mamba2ForCausalLM): a pure state-space decoder. backbone.embeddings, then per layer
// `norm` and a Mamba2 mixer (models/mamba2_mixer.h) added to the residual (kept in float32 with
// residual_in_fp32), backbone.norm_f, lm_head. No attention: the state is each layer's
// convolution and SSM state, and a position only says where a sequence starts.
#include "core/error.h"
#include "models/mamba2_mixer.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kMamba2{
    .max_position_embeddings = 8192,  // no such key: the bound of the exported sequence dims
    .norm_eps_key = "layer_norm_epsilon",
    .norm_eps = 1e-5,
    .names = {.model = "backbone.", .embed = "embeddings", .attention_norm = "norm", .final_norm = "norm_f",
              .legacy = {"backbone.embeddings.", "backbone.embedding."}},
    .output_type = "CausalLMOutputWithPast",
};

class Mamba2Decoder final : public Decoder {
 public:
  using Decoder::Decoder;

  DecoderConfig parse(const JsonConfig& config) const override {
    // The kit's attention keys do not exist here: one placeholder head, never built.
    nlohmann::json json = config.json();
    const int64_t hidden = config.positive("hidden_size", 4096);
    json["hidden_size"] = hidden;
    json["num_attention_heads"] = 1;
    json["num_key_value_heads"] = 1;
    json["head_dim"] = hidden;
    json["intermediate_size"] = config.positive("expand", 2) * hidden;
    json.erase("rope_scaling");
    json.erase("rope_parameters");
    const JsonConfig c(std::move(json), config.where());
    DecoderConfig cfg = parse_decoder_config(c, defaults_);
    if (const std::string act = config.string("hidden_act", "silu"); act != "silu" && act != "swish")
      config.invalid("hidden_act", "must be \"silu\" (the convolution's activation)");
    cfg.layer_types.assign(static_cast<size_t>(cfg.layers), "linear_attention");
    Mamba2Spec& s = cfg.mamba;
    s.hidden = hidden;
    s.heads = config.positive("num_heads", 128);
    s.head_dim = config.positive("head_dim", 64);
    s.groups = config.positive("n_groups", 8);
    s.state_size = config.positive("state_size", 128);
    s.kernel = conv_kernel_size(config, "conv_kernel", 4);
    s.proj_bias = s.out_bias = config.boolean("use_bias", false);
    s.conv_bias = config.boolean("use_conv_bias", true);
    s.norm_eps = cfg.norm_eps;
    if (s.heads * s.head_dim != config.positive("expand", 2) * hidden)
      config.invalid("num_heads", str("times head_dim must equal expand * hidden_size (", config.positive("expand", 2) * hidden, ")"));
    finish_mamba2_spec(config, s, "num_heads", "n_groups");
    cfg.conv.kernel = s.kernel;
    s.residual_in_fp32 = config.boolean("residual_in_fp32", true);
    return cfg;
  }

  // Mamba2Block: residual (float32 with residual_in_fp32) + mixer(norm(x in the model dtype)).
  Value* layer(DecoderGraph& g, int64_t i, Value* x) const override {
    Builder& b = g.b();
    const std::string p = layer_prefix(g, i);
    const DType dtype = g.m.config().dtype;
    Value* h = mamba2_mixer(g, i, p + "mixer.", g.cfg.mamba, norm(g, p + "norm", b.cast(x, dtype)));
    Value* residual = g.cfg.mamba.residual_in_fp32 ? b.cast(x, DType::F32) : x;
    return b.add(residual, b.cast(h, residual->dtype));
  }

  // norm_f over the (float32) residual stream, rounded to the model dtype for the head.
  Value* final_norm(DecoderGraph& g, Value* x) const override {
    Builder& b = g.b();
    const std::string module = g.cfg.prefix + "norm_f";
    b.set_scope(module);
    Value* weight = b.cast(g.m.weight(module + ".weight", {g.cfg.hidden}), x->dtype);
    return b.cast(b.rms_norm(x, weight, g.cfg.norm_eps), g.m.config().dtype);
  }
};

}  // namespace

HFX_REGISTER_DECODER("mamba2", Mamba2Decoder, kMamba2)

}  // namespace hfx
