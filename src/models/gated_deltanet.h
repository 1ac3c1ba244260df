// The gated DeltaNet token mixer (transformers' Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet):
// projections to q, k, v, the output gate z, beta's logits b and the decay's a; a causal depthwise
// conv with SiLU over q | k | v whose last inputs are convolution state; the gated delta rule over
// L2-normalised q and k, whose [value_heads, key_dim, value_dim] matrix is recurrent state; an
// RMSNorm per value head gated by silu(z); out_proj.
#pragma once
#include <string>

#include "ir/builder.h"
#include "models/decoder.h"

namespace hfx {

// The mixer with HF names under `prefix` ("model.layers.0.linear_attn."), state past_conv.{layer}
// and past_ssm.{layer}; x [batch, query, hidden] -> [batch, query, hidden]. `longest`: the most
// tokens one call may take (max_position_embeddings).
Value* gated_deltanet(DecoderGraph& g, int64_t layer, const std::string& prefix, const GatedDeltaSpec& spec, Value* x,
                      int64_t longest);

// ceil(log2(n)) for n >= 1: the doublings a call of n tokens needs.
int64_t doublings_for(int64_t tokens);

}  // namespace hfx
