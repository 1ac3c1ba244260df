#include "models/vision_language.h"

#include <optional>

#include "core/error.h"

namespace hfx {
namespace {

// The first of `prefixes` under which the checkpoint holds `name` (else the last one, whose missing
// tensors the builder then reports).
std::string prefix_holding(const Checkpoint& ckpt, const std::vector<std::string>& prefixes, const std::string& name) {
  for (const std::string& p : prefixes)
    if (ckpt.find(p + name)) return p;
  return prefixes.back();
}

}  // namespace

VisionLanguageLayout vision_language_layout(const Checkpoint& ckpt, const std::string& projector_weight) {
  VisionLanguageLayout at;
  at.language_model = prefix_holding(ckpt, {"language_model.model.", "model.language_model."}, "embed_tokens.weight");
  at.head = ckpt.find("language_model.lm_head.weight") ? "language_model.lm_head" : "lm_head";
  at.vision_tower = prefix_holding(ckpt, {"vision_tower.vision_model.", "vision_tower.", "model.vision_tower.vision_model.",
                                          "model.vision_tower."}, "embeddings.patch_embedding.weight");
  at.projector = prefix_holding(ckpt, {"multi_modal_projector.", "model.multi_modal_projector."}, projector_weight);
  return at;
}

void tolerate_outside_vision(ModelBuilder& m, const Checkpoint& ckpt, const VisionLanguageLayout& at,
                             int64_t first_unused_layer, const std::vector<std::string>& unused) {
  m.tolerate_outside({at.vision_tower, at.projector});
  const std::string layers = at.vision_tower + "encoder.layers.";
  for (const TensorView* t : ckpt.tensors()) {
    const std::string& name = t->name;
    bool tolerated = name.ends_with("embeddings.position_ids");
    for (const std::string& module : unused) tolerated = tolerated || name.starts_with(at.vision_tower + module);
    if (name.starts_with(layers)) tolerated = tolerated || std::stoll(name.substr(layers.size())) >= first_unused_layer;
    if (tolerated) m.tolerate(name);
  }
}

ExportModel build_vision_language(const Checkpoint& ckpt, const ExportConfig& config, const VisionLanguageSpec& spec) {
  const JsonConfig& c = ckpt.config();
  std::optional<JsonConfig> text_config = c.object("text_config");
  std::string text_type = text_config ? text_config->string("model_type", spec.text_model_type.empty() ? "llama" : spec.text_model_type)
                                      : spec.text_model_type;
  if (!text_config && spec.text_model_type.empty())
    c.invalid("text_config", spec.model_type + " needs the language model's text_config");
  if (!text_config) text_config = c;  // the text keys at the top level
  const std::unique_ptr<Decoder> decoder = make_decoder(text_type, text_config->where());
  DecoderConfig text = decoder->parse_part(*text_config, spec.language_model, spec.head);
  // The head is the composite model's module: transformers ties it by the top-level key, whatever
  // text_config's says (Qwen3-VL-MoE's text config defaults to true, the model to false).
  text.tied = c.boolean("tie_word_embeddings", text.tied);
  if (spec.deepstack_layers > text.layers)
    c.invalid("vision_config", str(spec.deepstack_layers, " deepstack mergers feed more layers than the language model's ", text.layers));
  text.deepstack_layers = spec.deepstack_layers;

  ExportModel out{spec.model_type, architectures(c), {}, {}};
  const Task task = config.task.empty() ? Task::ImageTextToText : *task_named(config.task);
  if (task != Task::ImageTextToText) fail("task: ", spec.model_type, " exports image-text-to-text, not ", task_name(task));
  out.task = task;
  out.image_tokens = {{"image_token_id", spec.image_token_id}, {"features_per_image", spec.features_per_image}};
  out.image_tokens.update(spec.image_tokens_extra);
  out.components.push_back({Role::VisionEncoder, spec.vision_encoder(text.hidden, out.dims)});
  if (spec.openvino_genai_tower) {  // its text embeddings model takes the ids alone: the host merges the features
    PipelineLayout layout{"openvino_genai", {Role::VisionEncoder, Role::TokenEmbedding}, spec.openvino_genai_tower(text.hidden, out.dims)};
    layout.components.push_back({Role::TokenEmbedding, decoder->token_embedding_graph(ckpt, config, text, out.dims)});
    out.pipeline_layouts.push_back(std::move(layout));
  }
  std::optional<int64_t> merged;
  if (spec.features_in_embedding) merged = spec.image_token_id;
  out.components.push_back({Role::TokenEmbedding, decoder->token_embedding_graph(ckpt, config, text, out.dims, merged)});
  out.components.push_back({Role::TextDecoder, decoder->text_decoder_graph(ckpt, config, text, out.dims, spec.image_blocks)});
  for (Component& component : out.components) component.graph->num_layers = text.layers;
  for (PipelineLayout& layout : out.pipeline_layouts)
    for (Component& component : layout.components) component.graph->num_layers = text.layers;
  out.components.back().graph->output_type = spec.output_type;
  return out;
}

}  // namespace hfx
