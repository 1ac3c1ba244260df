// Rotary position embedding parameters, read from either config style: transformers 4.x
// (`rope_theta` + `rope_scaling`) or 5.x (`rope_parameters`), and the cos/sin tables HF computes.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/json_config.h"
#include "ir/builder.h"

namespace hfx {

struct RopeConfig {
  std::string type = "default";  // default, linear, dynamic, llama3, yarn, longrope
  double theta = 10000.0;
  int64_t rotary_dim = 0;        // head_dim * partial_rotary_factor
  std::vector<float> inv_freq;   // rotary_dim / 2 entries (static types)
  double attention_scaling = 1.0;
  double factor = 1.0;           // dynamic: recomputed in-graph from the sequence length
  int64_t max_position_embeddings = 0;
  // longrope: inv_freq holds the short factors' frequencies, long_inv_freq the long ones', used
  // when a call's positions reach past original_max_position_embeddings.
  std::vector<float> long_inv_freq;
  int64_t original_max_position_embeddings = 0;
  // Multimodal RoPE (Qwen2-VL): positions come as [3, batch, sequence] (temporal, height, width)
  // and frequency i of the rotary half takes its position from the row whose section holds i.
  std::vector<int64_t> mrope_section;
  // Qwen3-VL's layout: the height and width rows take every third frequency from 1 and from 2
  // (mrope_section[d] of them each), the temporal row the rest.
  bool mrope_interleaved = false;
};

// What a family's configuration class fixes about its RoPE.
struct RopeDefaults {
  int64_t head_dim = 0, max_position_embeddings = 0;
  // Whether the family honours partial_rotary_factor (transformers' Llama family reads the key
  // but rotates the whole head, so it must be ignored there).
  bool partial_rotary = false;
  double partial_rotary_factor = 1.0;
  double theta = 10000.0;  // default_theta
};

// The RoPE of `config`: its 4.x rope_scaling / rope_theta or 5.x rope_parameters, unless
// `params` names another object holding them (Gemma-3's per-layer-type entries).
RopeConfig parse_rope(const JsonConfig& config, const RopeDefaults& defaults,
                      std::optional<JsonConfig> params = std::nullopt);

// cos and sin of shape [batch, sequence, rotary_dim] in float32, as HF's rotary embedding module
// (position_ids [batch, sequence], or [3, batch, sequence] for a multimodal RoPE).
std::pair<Value*, Value*> rope_cos_sin(Builder& b, const RopeConfig& rope, Value* position_ids);

}  // namespace hfx
