// What the vision-language models share: where a checkpoint keeps each part, and the three
// components (vision_encoder, token_embedding, text_decoder) with the language model built by the
// decoder kit for text_config's model_type.
#pragma once
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "models/decoder.h"

namespace hfx {

// transformers 5 saves the 4.x names (language_model.model., language_model.lm_head,
// multi_modal_projector.) with the vision tower's own 5.x names (vision_tower.embeddings.); the
// Hub's 4.x checkpoints add vision_model.; save_pretrained(save_original_format=False) writes the
// 5.x modules (model.language_model., lm_head).
struct VisionLanguageLayout {
  std::string language_model, head, vision_tower, projector;
};
VisionLanguageLayout vision_language_layout(const Checkpoint& ckpt, const std::string& projector_weight);

// In a vision encoder graph: tolerates the tensors outside the tower and projector, the tower's
// layers from `first_unused_layer` on, and `unused` modules of the tower (e.g. "post_layernorm.").
void tolerate_outside_vision(ModelBuilder& m, const Checkpoint& ckpt, const VisionLanguageLayout& at,
                             int64_t first_unused_layer, const std::vector<std::string>& unused);

struct VisionLanguageSpec {
  std::string model_type;
  std::string language_model, head;  // the language model's prefix and head module
  // The decoder type of a config that keeps the text keys at its top level (Qwen2-VL's 4.x
  // configs) instead of in text_config; empty: text_config is required.
  std::string text_model_type;
  // pixel_values -> image_features, given the language model's width.
  std::function<std::unique_ptr<Graph>(int64_t text_hidden, std::set<std::string>& dims)> vision_encoder;
  // The vision encoder as OpenVINO GenAI's VLMPipeline splits it (Qwen-VL), where it differs; unset: none.
  std::function<std::vector<Component>(int64_t text_hidden, std::set<std::string>& dims)> openvino_genai_tower;
  int64_t image_token_id = 0, features_per_image = 0;
  bool image_blocks = false;  // the text decoder takes token_type_ids (Gemma 3's image attention)
  // token_embedding takes image_features and merges them at the image tokens (Qwen2-VL: as
  // onnxruntime-genai's embedding model does).
  bool features_in_embedding = false;
  const char* output_type = "";
  // The vision encoder's deepstack_features feed this many of the text decoder's first layers (Qwen3-VL).
  int64_t deepstack_layers = 0;
  nlohmann::json image_tokens_extra = nlohmann::json::object();  // more of export.json's image_tokens
};

// The export: the spec's vision encoder, and text_config's decoder as token_embedding and text_decoder.
ExportModel build_vision_language(const Checkpoint& ckpt, const ExportConfig& config, const VisionLanguageSpec& spec);

}  // namespace hfx
