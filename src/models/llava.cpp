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
// Checkpoints as transformers 4.x and 5 save them (LlavaLayout).
#include <algorithm>

#include "core/error.h"
#include "models/blocks.h"
#include "models/clip.h"
#include "models/decoder.h"
#include "models/encoder.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/seq2seq.h"

namespace hfx {
namespace {

constexpr int64_t kMaxImages = 64;

// Where a checkpoint keeps each part: transformers 5 saves the 4.x names (language_model.model.,
// language_model.lm_head, multi_modal_projector.) with the vision tower's own 5.x names
// (vision_tower.embeddings.), the Hub's 4.x checkpoints add vision_model., and
// save_pretrained(save_original_format=False) writes the 5.x modules (model.language_model., lm_head).
struct LlavaLayout {
  std::string language_model, head, vision_tower, projector;
};

// The first of `prefixes` under which the checkpoint holds `name` (else the last one, whose missing
// tensors the builder then reports).
std::string prefix_holding(const Checkpoint& ckpt, const std::vector<std::string>& prefixes, const std::string& name) {
  for (const std::string& p : prefixes)
    if (ckpt.find(p + name)) return p;
  return prefixes.back();
}

LlavaLayout layout_of(const Checkpoint& ckpt) {
  LlavaLayout at;
  at.language_model = prefix_holding(ckpt, {"language_model.model.", "model.language_model."}, "embed_tokens.weight");
  at.head = ckpt.find("language_model.lm_head.weight") ? "language_model.lm_head" : "lm_head";
  at.vision_tower = prefix_holding(ckpt, {"vision_tower.vision_model.", "vision_tower.", "model.vision_tower.vision_model.",
                                          "model.vision_tower."}, "embeddings.patch_embedding.weight");
  at.projector = prefix_holding(ckpt, {"multi_modal_projector.", "model.multi_modal_projector."}, "linear_1.weight");
  return at;
}

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
  cfg.vision = parse_vision_tower(vision_config);
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
                                      const LlavaLayout& at, int64_t text_hidden, std::set<std::string>& dims) {
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
  const std::string unused_layers = at.vision_tower + "encoder.layers.";
  for (const TensorView* t : ckpt.tensors()) {
    const std::string& name = t->name;
    if (!name.starts_with(at.vision_tower) && !name.starts_with(p)) m.tolerate(name);
    if (name.starts_with(at.vision_tower + "post_layernorm.") || name.starts_with(at.vision_tower + "head.") ||
        name.ends_with("embeddings.position_ids"))
      m.tolerate(name);
    if (name.starts_with(unused_layers) && std::stoll(name.substr(unused_layers.size())) >= deepest) m.tolerate(name);
  }
  return finish_component(m, "BaseModelOutputWithPooling", deepest, dims);
}

ExportModel build_llava(const Checkpoint& ckpt, const ExportConfig& config) {
  const JsonConfig& c = ckpt.config();
  const auto text_config = c.object("text_config");
  const auto vision_config = c.object("vision_config");
  if (!text_config) c.invalid("text_config", "llava needs the language model's text_config");
  if (!vision_config) c.invalid("vision_config", "llava needs the vision tower's vision_config");
  const LlavaConfig cfg = parse_llava(c, *vision_config);
  const LlavaLayout at = layout_of(ckpt);
  const std::unique_ptr<Decoder> decoder = make_decoder(text_config->string("model_type", "llama"), text_config->where());
  DecoderConfig text = decoder->parse_part(*text_config, at.language_model, at.head);
  text.tied = text.tied || c.boolean("tie_word_embeddings", false);

  ExportModel out{"llava", cfg.architectures, {}, {}};
  const Task task = config.task.empty() ? Task::ImageTextToText : *task_named(config.task);
  if (task != Task::ImageTextToText) fail("task: llava exports image-text-to-text, not ", task_name(task));
  out.task = task;
  const int64_t features = cfg.vision.patches() + (cfg.vision.family == VisionFamily::Clip ? 1 : 0) -
                           (cfg.drop_first_token ? 1 : 0);
  out.image_tokens = {{"image_token_id", c.integer("image_token_index", c.integer("image_token_id", 32000))},
                      {"features_per_image", features}};
  out.components.push_back({Role::VisionEncoder, vision_encoder(ckpt, config, cfg, at, text.hidden, out.dims)});
  out.components.push_back({Role::TokenEmbedding, decoder->token_embedding_graph(ckpt, config, text, out.dims)});
  out.components.push_back({Role::TextDecoder, decoder->text_decoder_graph(ckpt, config, text, out.dims)});
  for (Component& component : out.components) component.graph->num_layers = text.layers;
  out.components.back().graph->output_type = "transformers.models.llava.modeling_llava.LlavaCausalLMOutputWithPast";
  return out;
}

}  // namespace

HFX_REGISTER_ARCH("llava", build_llava)

}  // namespace hfx
