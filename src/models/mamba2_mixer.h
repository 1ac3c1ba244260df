// Mamba2's token mixer (transformers' Mamba2Mixer, GraniteMoeHybridMambaLayer, FalconH1Mixer's
// SSM): in_proj -> z | xBC | dt, a causal depthwise conv over xBC with SiLU whose last inputs are
// convolution state, the selective state-space recurrence (SSD) over heads and groups whose
// [heads, head_dim, state_size] matrix is recurrent state, a gated RMSNorm per group, out_proj.
#pragma once
#include <optional>
#include <string>

#include "io/json_config.h"
#include "models/decoder.h"

namespace hfx {

// A Mamba2 mixer from the hybrids' mamba_* keys (granitemoehybrid, falcon_h1): mamba_n_heads,
// mamba_n_groups, mamba_d_state, mamba_d_conv, mamba_d_head ("auto"), mamba_d_ssm or mamba_expand,
// mamba_conv_bias, mamba_proj_bias, time_step_limit; `d_ssm`: mamba_d_ssm's default (FalconH1's 1024).
Mamba2Spec read_mamba_keys(const JsonConfig& c, int64_t hidden, double norm_eps, std::optional<int64_t> d_ssm = std::nullopt);

// Reads time_step_limit ([min, max]; null: no clamp) into `spec` and checks the head layout:
// heads * head_dim must equal `expand` * hidden_size, groups divide heads.
void finish_mamba2_spec(const JsonConfig& c, Mamba2Spec& spec, const char* heads_key, const char* groups_key);

// The mixer with HF names under `prefix` ("model.layers.0.mamba."), state past_conv.{layer} and
// past_ssm.{layer}; x [batch, query, hidden] -> [batch, query, hidden].
Value* mamba2_mixer(DecoderGraph& g, int64_t layer, const std::string& prefix, const Mamba2Spec& spec, Value* x);

}  // namespace hfx
