// llava (LlavaForConditionalGeneration): a CLIP or SigLIP vision tower, the hidden states of its
// vision_feature_layer (one index, or several concatenated on the feature axis), without the first
// token under the "default" vision_feature_select_strategy, through the multi_modal_projector
// (linear_1, projector_hidden_act, linear_2) into the language model's width; the language model is
// any decoder of the kit (text_config's model_type), over inputs_embeds in which the caller has put
// the image features at the image tokens (image_token_index).
// Components, as ExecuTorch's MultimodalRunner and OpenVINO GenAI's VLMPipeline split the model:
// vision_encoder (pixel_values -> image_features [images, image_seq_length, hidden]),
// token_embedding (input_ids -> inputs_embeds) and text_decoder (inputs_embeds -> logits, with the
// cache the generation config asks for: one graph serves the prompt and each step).
// Checkpoints as transformers 4.x and 5 save them (VisionLanguageLayout).
#include <algorithm>

#include "core/error.h"
#include "models/blocks.h"
#include "models/clip.h"
#include "models/decoder.h"
#include "models/encoder.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/seq2seq.h"
#include "models/vision_language.h"

namespace hfx {
namespace {

constexpr int64_t kMaxImages = 64;

struct LlavaConfig {
  std::vector<std::string> architectures;
  VisionTowerConfig vision;
  std::vector<int64_t> feature_layers;  // indices into hidden_states[0..layers], made non-negative
  bool drop_first_token = true;         // vision_feature_select_strategy "default"
  std::string projector_activation;
  bool projector_bias = true;
};

std::vector<int64_t> feature_layers(const JsonConfig& c, int64_t layers) {
  std::vector<int64_t> raw;
  if (!c.has("vision_feature_layer")) raw = {-2};
  else if (c.at("vision_feature_layer").is_array()) raw = c.at("vision_feature_layer").get<std::vector<int64_t>>();
  else raw = {c.integer("vision_feature_layer", -2)};
  if (raw.empty()) c.invalid("vision_feature_layer", "must name at least one layer");
  for (int64_t& index : raw) {
    if (index < -(layers + 1) || index > layers)
      c.invalid("vision_feature_layer", str(index, " is not one of the vision tower's ", layers + 1, " hidden states"));
    if (index < 0) index += layers + 1;
  }
  return raw;
}

LlavaConfig parse_llava(const JsonConfig& c, const JsonConfig& vision_config) {
  LlavaConfig cfg;
  cfg.architectures = architectures(c);
  cfg.vision = parse_vision_tower(vision_config, "clip_vision_model");
  cfg.feature_layers = feature_layers(c, cfg.vision.layers);
  const std::string strategy = c.string("vision_feature_select_strategy", "default");
  if (strategy != "default" && strategy != "full")
    c.invalid("vision_feature_select_strategy", "must be \"default\" or \"full\"");
  cfg.drop_first_token = strategy == "default";
  cfg.projector_activation = c.string("projector_hidden_act", "gelu");
  check_activation(c, "projector_hidden_act", cfg.projector_activation);
  cfg.projector_bias = c.boolean("multimodal_projector_bias", true);
  return cfg;
}

// pixel_values -> image_features [images, tokens, text hidden].
std::unique_ptr<Graph> vision_encoder(const Checkpoint& ckpt, const ExportConfig& config, const LlavaConfig& cfg,
                                      const VisionLanguageLayout& at, int64_t text_hidden, std::set<std::string>& dims) {
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  Value* pixels = vision_pixels(m, cfg.vision, "images", kMaxImages);
  const int64_t deepest = *std::max_element(cfg.feature_layers.begin(), cfg.feature_layers.end());
  const std::vector<Value*> states = vision_hidden_states(m, at.vision_tower, cfg.vision, pixels, deepest);
  b.set_scope(at.projector + "select");
  std::vector<Value*> selected;
  for (int64_t index : cfg.feature_layers) {
    Value* s = states[static_cast<size_t>(index)];
    selected.push_back(cfg.drop_first_token ? b.slice(s, 1, 1, INT64_MAX) : s);
  }
  Value* x = selected.size() == 1 ? selected.front() : b.concat(selected, 2);
  const int64_t width = cfg.vision.hidden * static_cast<int64_t>(cfg.feature_layers.size());
  const std::string p = at.projector;
  b.set_scope(p + "linear_1");
  x = b.linear(x, m.weight(p + "linear_1.weight", {text_hidden, width}),
               m.weight_if(cfg.projector_bias, p + "linear_1.bias", {text_hidden}));
  x = activation(b, cfg.projector_activation, x);
  b.set_scope(p + "linear_2");
  x = b.linear(x, m.weight(p + "linear_2.weight", {text_hidden, text_hidden}),
               m.weight_if(cfg.projector_bias, p + "linear_2.bias", {text_hidden}));
  b.output(x, "image_features");
  // The layers past the deepest feature layer, the post-norm and the language model are others'.
  tolerate_outside_vision(m, ckpt, at, deepest, {"post_layernorm.", "head."});
  return finish_component(m, "BaseModelOutputWithPooling", deepest, dims);
}

ExportModel build_llava(const Checkpoint& ckpt, const ExportConfig& config) {
  const JsonConfig& c = ckpt.config();
  const auto vision_config = c.object("vision_config");
  if (!vision_config) c.invalid("vision_config", "llava needs the vision tower's vision_config");
  const LlavaConfig cfg = parse_llava(c, *vision_config);
  const VisionLanguageLayout at = vision_language_layout(ckpt, "linear_1.weight");
  VisionLanguageSpec spec;
  spec.model_type = "llava";
  spec.vision_encoder = [&](int64_t text_hidden, std::set<std::string>& dims) {
    return vision_encoder(ckpt, config, cfg, at, text_hidden, dims);
  };
  spec.image_token_id = c.integer("image_token_index", c.integer("image_token_id", 32000));
  spec.features_per_image = cfg.vision.patches() + (cfg.vision.family == VisionFamily::Clip ? 1 : 0) -
                            (cfg.drop_first_token ? 1 : 0);
  spec.output_type = "transformers.models.llava.modeling_llava.LlavaCausalLMOutputWithPast";
  spec.language_model = at.language_model;
  spec.head = at.head;
  return build_vision_language(ckpt, config, spec);
}

}  // namespace

HFX_REGISTER_ARCH("llava", build_llava)

}  // namespace hfx
