// The CLIP / SigLIP vision tower as other models embed it (LLaVA's vision_tower): its config and
// the hidden states transformers returns with output_hidden_states.
#pragma once
#include <string>
#include <vector>

#include "io/json_config.h"
#include "models/model_builder.h"

namespace hfx {

enum class VisionFamily { Clip, Siglip };

struct VisionTowerConfig {
  VisionFamily family = VisionFamily::Clip;
  int64_t hidden = 0, layers = 0, heads = 0, ffn = 0;
  double eps = 1e-5;
  std::string activation;
  int64_t image = 0, patch = 0, channels = 0;
  // Each patch's row of the position table (SmolVLM's NaViT-style positions); empty: the patch's index.
  std::vector<int64_t> position_ids;
  int64_t patches() const { return (image / patch) * (image / patch); }
};

// A vision_config whose model_type is clip_vision_model, siglip_vision_model or SmolVLM's
// (smolvlm_vision, idefics3_vision: SigLIP layers, positions bucketed for the patch grid) (the
// family's defaults for omitted keys; `default_type` when it names none); other types are refused
// naming the key.
VisionTowerConfig parse_vision_tower(const JsonConfig& vision_config, const std::string& default_type);
// pixel_values [batch_dim, channels, image, image] of the graph dtype.
Value* vision_pixels(ModelBuilder& m, const VisionTowerConfig& v, const char* batch_dim, int64_t max_batch);
// hidden_states[0..layers] as transformers numbers them with output_hidden_states (0: the states
// the first layer takes, after CLIP's pre_layrnorm), for the tower's modules under `prefix`; only
// the first `layers` layers are built.
std::vector<Value*> vision_hidden_states(ModelBuilder& m, const std::string& prefix, const VisionTowerConfig& v,
                                         Value* pixels, int64_t layers);

// The tower's last_hidden_state from its last hidden state: SigLIP's post_layernorm over every
// position (CLIP normalises only the pooled [CLS]: its last_hidden_state is the last state).
Value* vision_last_hidden_state(ModelBuilder& m, const std::string& prefix, const VisionTowerConfig& v, Value* last);

}  // namespace hfx
