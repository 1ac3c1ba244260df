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

}  // namespace hfx
