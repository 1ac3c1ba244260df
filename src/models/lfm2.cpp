// LFM2: by layer_types, gated short-convolution blocks (in_proj -> B, C, x; out_proj(C * conv(B * x)),
// a causal depthwise conv of conv_L_cache taps whose last inputs are convolution state) or GQA
// blocks with per-head q/k RMSNorm (q_layernorm, k_layernorm) and out_proj; a SwiGLU feed_forward
// (w1, w3, w2) of the width Lfm2MLP derives; the final norm is `embedding_norm`.
// LFM2-MoE: the same layers, the first num_dense_layers with a SwiGLU of intermediate_size, the
// rest a sparse MoE: sigmoid router scores, top-k chosen by scores + expert_bias, renormalised
// (norm_topk_prob, + 1e-6), times routed_scaling_factor.
#include "core/error.h"
#include "models/decoder.h"
#include "models/moe.h"

namespace hfx {
namespace {

constexpr DecoderDefaults kLfm2{
    .max_position_embeddings = 128000,
    .attention_bias = AttentionBias::None,
    .qk_norm = true,
    .rope_theta = 1000000.0,
    .tie_word_embeddings = true,
    .norm_eps_key = "norm_eps",
    .norm_eps = 1e-5,
    .names = {.mlp = "feed_forward", .attention_norm = "operator_norm", .mlp_norm = "ffn_norm",
              .final_norm = "embedding_norm"},
};

constexpr const char* kConv = "conv";

// Lfm2MLP's width: 2/3 of intermediate_size, times block_ffn_dim_multiplier rounded up to a
// multiple of block_multiple_of (only when block_auto_adjust_ff_dim).
int64_t feed_forward_width(const JsonConfig& c, int64_t intermediate) {
  if (!c.boolean("block_auto_adjust_ff_dim", true)) return intermediate;
  auto width = static_cast<int64_t>(2.0 * static_cast<double>(intermediate) / 3.0);
  const bool multiplied = !c.json().contains("block_ffn_dim_multiplier") || c.has("block_ffn_dim_multiplier");
  if (!multiplied) return width;
  width = c.scaled("block_ffn_dim_multiplier", 1.0, width);
  const int64_t multiple = c.positive("block_multiple_of", 256);
  return multiple * ((width + multiple - 1) / multiple);
}

// layer_types, else full_attn_idxs (every layer attends when neither is given), as Lfm2Config does.
std::vector<std::string> mixer_types(const JsonConfig& c, int64_t layers) {
  if (auto listed = listed_layer_types(c, layers, {kConv, "full_attention"})) return std::move(*listed);
  std::vector<std::string> types(static_cast<size_t>(layers), c.has("full_attn_idxs") ? kConv : "full_attention");
  if (c.has("full_attn_idxs")) {
    if (!c.at("full_attn_idxs").is_array()) c.invalid("full_attn_idxs", "must be a list of layer indices");
    for (const auto& i : c.at("full_attn_idxs")) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= layers)
        c.invalid("full_attn_idxs", str("entries must be layer indices below ", layers));
      types[static_cast<size_t>(i.get<int64_t>())] = "full_attention";
    }
  }
  return types;
}

// The keys both configs read; `intermediate` is intermediate_size's default. The legacy keys
// Lfm2Config still takes: block_ff_dim, tie_embedding.
DecoderConfig parse_lfm2(const JsonConfig& config, const DecoderDefaults& defaults, int64_t intermediate) {
  nlohmann::json json = config.json();
  if (config.has("block_ff_dim")) json["intermediate_size"] = json["block_ff_dim"];
  if (!json.contains("intermediate_size")) json["intermediate_size"] = intermediate;
  if (config.json().contains("tie_embedding")) json["tie_word_embeddings"] = json["tie_embedding"];
  const JsonConfig c(std::move(json), config.where());
  DecoderConfig cfg = parse_decoder_config(c, defaults);
  cfg.attention.o = "out_proj";
  cfg.attention.q_norm = "q_layernorm";
  cfg.attention.k_norm = "k_layernorm";
  cfg.mlp.gate = "w1";
  cfg.mlp.up = "w3";
  cfg.mlp.down = "w2";
  cfg.layer_types = mixer_types(c, cfg.layers);
  cfg.conv.kernel = conv_kernel_size(c, "conv_L_cache", 3);
  cfg.conv.bias = c.boolean("conv_bias", false);
  return cfg;
}

class Lfm2Decoder : public Decoder {
 public:
  using Decoder::Decoder;

  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = parse_lfm2(c, defaults_, 12288);
    cfg.mlp.intermediate = feed_forward_width(c, cfg.intermediate);
    return cfg;
  }

  Value* layer(DecoderGraph& g, int64_t i, Value* x) const override {
    if (g.cfg.layer_types[static_cast<size_t>(i)] != kConv) return Decoder::layer(g, i, x);
    Builder& b = g.b();
    const std::string p = layer_prefix(g, i);
    x = b.add(x, short_conv(g, i, p + "conv.", norm(g, p + defaults_.names.attention_norm, x)));
    return b.add(x, mlp(g, i, p + defaults_.names.mlp + ".", norm(g, p + defaults_.names.mlp_norm, x)));
  }

 private:
  // Lfm2ShortConv: padding zeroed before in_proj (as the 2-D mask does there), then
  // out_proj(C * conv(B * x)) with the conv's earlier inputs from the layer's state.
  Value* short_conv(DecoderGraph& g, int64_t i, const std::string& p, Value* x) const {
    Builder& b = g.b();
    b.set_scope(p.substr(0, p.size() - 1));
    const int64_t hidden = g.cfg.hidden, k = g.cfg.conv.kernel;
    auto bias = [&](const std::string& module, int64_t size) {
      return g.cfg.conv.bias ? g.m.weight(p + module + ".bias", {size}) : nullptr;
    };
    if (Value* real = g.io->real_tokens(x->dtype)) x = b.mul(x, b.unsqueeze(real, {2}));
    Value* bcx = b.linear(x, g.m.weight(p + "in_proj.weight", {3 * hidden, hidden}), bias("in_proj", 3 * hidden));
    Value* gate_in = b.slice(bcx, 2, 0, hidden);
    Value* gate_out = b.slice(bcx, 2, hidden, 2 * hidden);
    Value* u = b.mul(gate_in, b.slice(bcx, 2, 2 * hidden, 3 * hidden));
    Value* y = g.io->causal_conv(i, u, g.m.weight(p + "conv.weight", {hidden, 1, k}), bias("conv", hidden));
    return b.linear(b.mul(gate_out, y), g.m.weight(p + "out_proj.weight", {hidden, hidden}), bias("out_proj", hidden));
  }
};

class Lfm2MoeDecoder final : public Lfm2Decoder {
 public:
  using Lfm2Decoder::Lfm2Decoder;

  DecoderConfig parse(const JsonConfig& config) const override {
    nlohmann::json json = config.json();
    if (!config.has("num_local_experts") && !config.has("num_experts")) json["num_experts"] = 32;
    const JsonConfig c(std::move(json), config.where());
    DecoderConfig cfg = parse_lfm2(c, defaults_, 7168);  // Lfm2MoeMLP: intermediate_size as given
    MoeSpec moe = parse_moe(c, cfg, c.positive("moe_intermediate_size", 1792), 4);
    moe.gate = "w1";
    moe.up = "w3";
    moe.down = "w2";
    moe.sigmoid_routing = true;
    if (c.boolean("use_expert_bias", true)) moe.selection_bias = "expert_bias";
    moe.normalize = c.boolean("norm_topk_prob", true);
    moe.normalize_epsilon = 1e-6;
    moe.routed_scaling = c.number("routed_scaling_factor", 1.0);
    cfg.moe = moe;
    const int64_t dense = c.integer("num_dense_layers", 2);
    if (dense < 0) c.invalid("num_dense_layers", "must not be negative");
    for (int64_t i = 0; i < cfg.layers; ++i) cfg.layer_moe.push_back(i >= dense);
    return cfg;
  }
};

}  // namespace

HFX_REGISTER_DECODER("lfm2", Lfm2Decoder, kLfm2)
HFX_REGISTER_DECODER("lfm2_moe", Lfm2MoeDecoder, kLfm2)

}  // namespace hfx
