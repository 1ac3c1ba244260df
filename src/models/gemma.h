// What the Gemma families share: embeddings scaled by sqrt(hidden) in the model dtype, RMSNorm
// scaling by 1 + w, the tanh-GELU MLP, and (Gemma-2 on) query_pre_attn_scalar, softcaps and the
// "sandwich" layer with four norms.
#pragma once
#include <cmath>

#include "models/decoder.h"

namespace hfx {

inline constexpr DecoderNames kGemmaSandwichNames{
    .attention_post_norm = "post_attention_layernorm",
    .mlp_norm = "pre_feedforward_layernorm",
    .mlp_post_norm = "post_feedforward_layernorm",
};

// A softcap key: null or absent means none.
inline double gemma_softcap(const JsonConfig& c, const std::string& key, double fallback) {
  if (c.json().contains(key) && c.json().at(key).is_null()) return 0.0;
  const double cap = c.number(key, fallback);
  if (cap < 0) c.invalid(key, "must be positive or null");
  return cap;
}

// The keys every Gemma reads: sqrt(hidden) embeddings, and bidirectional attention (Gemma-3's
// masks are bidirectional with it; Gemma and Gemma-2 keep a causal mask in transformers' eager
// attention and change only other implementations, so it is refused there).
inline void parse_gemma_common(const JsonConfig& c, DecoderConfig& cfg, bool bidirectional_masks = false) {
  cfg.embedding_scale = std::sqrt(static_cast<double>(cfg.hidden));
  cfg.bidirectional = c.boolean("use_bidirectional_attention", false);
  if (cfg.bidirectional && !bidirectional_masks)
    c.invalid("use_bidirectional_attention", "true is supported for gemma3_text only (" + cfg.model_type +
                                                 " keeps a causal mask in transformers' eager attention)");
}

// Gemma-2 and Gemma-3: scores scaled by query_pre_attn_scalar^-1/2, the final logits softcapped.
inline void parse_gemma2_common(const JsonConfig& c, DecoderConfig& cfg, double final_softcap,
                                bool bidirectional_masks = false) {
  parse_gemma_common(c, cfg, bidirectional_masks);
  const double scalar = c.number("query_pre_attn_scalar", 256);
  if (scalar <= 0) c.invalid("query_pre_attn_scalar", "must be positive");
  cfg.attention.scale = 1.0 / std::sqrt(scalar);
  cfg.final_softcap = gemma_softcap(c, "final_logit_softcapping", final_softcap);
}

}  // namespace hfx
