// Blocks shared by decoder families: attention and MLP sub-graphs.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "ir/builder.h"
#include "models/model_builder.h"

namespace hfx {

struct AttentionSpec {
  int64_t hidden, heads, kv_heads, head_dim;
  bool qkv_bias = false, o_bias = false;
  bool qk_norm = false;  // per-head RMSNorm on q and k before RoPE (qwen3)
  double norm_epsilon = 1e-6;
  double scale = 0;
};

// Stores a layer's fresh keys/values in the cache; returns what attention reads.
using KvCacheHook = std::function<std::pair<Value*, Value*>(Value* k, Value* v)>;

// Self-attention over `x` [B, S, hidden] with HF weight names under `prefix` (e.g.
// "model.layers.0.self_attn.").
void declare_attention(ModelBuilder& m, const std::string& prefix, const AttentionSpec& spec);
Value* attention_block(ModelBuilder& m, const std::string& prefix, const AttentionSpec& spec, Value* x,
                       Value* cos, Value* sin, Value* mask, const KvCacheHook& cache);

struct MlpSpec {
  int64_t hidden, intermediate;
  bool bias = false;
  std::string activation = "silu";
};

void declare_gated_mlp(ModelBuilder& m, const std::string& prefix, const MlpSpec& spec);
Value* gated_mlp(ModelBuilder& m, const std::string& prefix, const MlpSpec& spec, Value* x);

}  // namespace hfx
