// Blocks shared by decoder families: inputs, masks, attention and MLP sub-graphs.
#pragma once
#include <optional>
#include <string>

#include "ir/builder.h"
#include "models/model_builder.h"

namespace hfx {

struct DecoderInputs {
  Value* input_ids;       // [batch, sequence] int64
  Value* attention_mask;  // [batch, sequence] int64, 1 = real token
  Value* position_ids;    // [batch, sequence] int64
};

DecoderInputs decoder_inputs(Builder& b, int64_t max_positions);

// [batch, 1, sequence, sequence] bool: causal, padding from attention_mask, and the sliding window
// (key kept when query - key < window) when one is given.
Value* causal_mask(Builder& b, const DecoderInputs& in, std::optional<int64_t> sliding_window);

struct AttentionSpec {
  int64_t hidden, heads, kv_heads, head_dim;
  bool qkv_bias = false, o_bias = false;
  bool qk_norm = false;  // per-head RMSNorm on q and k before RoPE (qwen3)
  double norm_epsilon = 1e-6;
  double scale = 0;
};

// Self-attention over `x` [B, S, hidden] with HF weight names under `prefix` (e.g.
// "model.layers.0.self_attn."). Declares its tensors when `declare` is set.
void declare_attention(ModelBuilder& m, const std::string& prefix, const AttentionSpec& spec);
Value* attention_block(ModelBuilder& m, const std::string& prefix, const AttentionSpec& spec, Value* x,
                       Value* cos, Value* sin, Value* mask);

struct MlpSpec {
  int64_t hidden, intermediate;
  bool bias = false;
  std::string activation = "silu";
};

void declare_gated_mlp(ModelBuilder& m, const std::string& prefix, const MlpSpec& spec);
Value* gated_mlp(ModelBuilder& m, const std::string& prefix, const MlpSpec& spec, Value* x);

}  // namespace hfx
