// Blocks shared by decoder families: attention and MLP sub-graphs over HF-named weights. Each
// block declares the weights it reads (through ModelBuilder::weight) as it builds.
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
  double scale = 0;      // 0: 1 / sqrt(head_dim)
  double softcap = 0;    // attention logit softcapping (0: none)
};

// Stores a layer's fresh keys/values in the cache; returns what attention reads.
using KvCacheHook = std::function<std::pair<Value*, Value*>(Value* k, Value* v)>;

// What a layer's attention reads besides its input: the RoPE tables (null: no RoPE on this
// layer), the mask of its window, and the cache it appends to.
struct AttentionContext {
  Value* cos = nullptr;
  Value* sin = nullptr;
  Value* mask = nullptr;
  KvCacheHook cache;
};

// Self-attention over `x` [B, S, hidden] with HF weight names under `prefix` (e.g.
// "model.layers.0.self_attn.": q_proj, k_proj, v_proj, o_proj, q_norm, k_norm).
Value* attention_block(ModelBuilder& m, const std::string& prefix, const AttentionSpec& spec, Value* x,
                       const AttentionContext& ctx);

struct MlpSpec {
  int64_t hidden, intermediate;
  bool bias = false;
  std::string activation = "silu";  // HF hidden_act, validated by check_activation
};

// Rejects an HF activation name the blocks cannot build, naming the config key.
void check_activation(const JsonConfig& config, const std::string& key, const std::string& activation);
// The activation by its HF name.
Value* activation(Builder& b, const std::string& name, Value* x);

// down_proj(act(gate_proj(x)) * up_proj(x)) with HF names under `prefix` (e.g. "model.layers.0.mlp.").
Value* gated_mlp(ModelBuilder& m, const std::string& prefix, const MlpSpec& spec, Value* x);

}  // namespace hfx
