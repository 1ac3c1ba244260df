// What the mixture-of-experts families share: the expert count under either key, top-k, and the
// refusal of expert activations the MoE op cannot build.
#pragma once
#include "core/error.h"
#include "models/decoder.h"

namespace hfx {

// The routed experts' spec from num_local_experts (or the Hub's num_experts, which transformers
// maps to it) and num_experts_per_tok; `intermediate` is each expert's width.
inline MoeSpec parse_moe(const JsonConfig& c, const DecoderConfig& cfg, int64_t intermediate, int64_t top_k_default) {
  if (cfg.mlp.activation != "silu" && cfg.mlp.activation != "swish")
    c.invalid("hidden_act", "must be \"silu\" for mixture-of-experts layers");
  const int64_t experts =
      c.has("num_local_experts") || !c.has("num_experts") ? c.positive("num_local_experts") : c.positive("num_experts");
  const int64_t top_k = c.positive("num_experts_per_tok", top_k_default);
  if (top_k > experts) c.invalid("num_experts_per_tok", str("must not exceed the number of experts (", experts, ")"));
  return MoeSpec{cfg.hidden, intermediate, experts, top_k};
}

// Which layers are sparse (Qwen3-MoE, Qwen3-Next): each decoder_sparse_step-th one outside
// mlp_only_layers.
inline std::vector<bool> sparse_layers(const JsonConfig& c, int64_t layers) {
  const int64_t step = c.positive("decoder_sparse_step", 1);
  std::vector<bool> dense(static_cast<size_t>(layers));
  if (c.has("mlp_only_layers")) {
    const auto& only = c.at("mlp_only_layers");
    if (!only.is_array()) c.invalid("mlp_only_layers", "must be a list of layer indices");
    for (const auto& l : only) {
      if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= layers)
        c.invalid("mlp_only_layers", str("entries must be layer indices below ", layers));
      dense[static_cast<size_t>(l.get<int64_t>())] = true;
    }
  }
  std::vector<bool> sparse;
  for (int64_t i = 0; i < layers; ++i) sparse.push_back(!dense[static_cast<size_t>(i)] && (i + 1) % step == 0);
  return sparse;
}

}  // namespace hfx
