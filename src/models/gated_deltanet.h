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

// The gated delta rule over one call, S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - exp(g_t) S_{t-1}^T k_t))^T,
// o_t = S_t^T q_t, in its one-chunk (UT transform) form: q and k [batch, L, value_heads, key_dim]
// (L2-normalised, q scaled, repeated per value head), v [batch, L, value_heads, value_dim], g (log decay, <= 0) and beta
// [batch, L, value_heads], initial [batch, value_heads, key_dim, value_dim]; all float32. The
// triangular system is solved as a product of `doublings` factors (I + N^(2^i)), exact for calls
// of up to 2^doublings tokens. Returns o [batch, L, value_heads, value_dim] and the final state.
std::pair<Value*, Value*> gated_delta_rule(Builder& b, Value* q, Value* k, Value* v, Value* g, Value* beta,
                                           Value* initial, Dim length, int64_t doublings);

// ceil(log2(n)) for n >= 1: the doublings a call of n tokens needs.
int64_t doublings_for(int64_t tokens);

}  // namespace hfx
