// smolvlm (SmolVLMForConditionalGeneration) and idefics3 (Idefics3ForConditionalGeneration): a
// SigLIP-style tower over each image (a tile of the processor's split, or the whole image resized)
// at the config's image_size, its post_layernorm, then the connector: pixel shuffle (each
// scale_factor x scale_factor block of patches folded into one token of scale_factor^2 widths)
// and modality_projection.proj into the language model's width; the language model is
// text_config's decoder (llama) over inputs_embeds, with the image features at the image tokens.
// vision_encoder: pixel_values [images, 3, S, S] (the processor's 5-D pixel_values flattened over
// its images, padding images left out, as get_image_features does) -> image_features
// [images, tokens, hidden].
#include "core/error.h"
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

// Folds each scale x scale block of the patch grid into one token, as SmolVLMConnector.pixel_shuffle.
Value* pixel_shuffle(Builder& b, Value* x, int64_t side, int64_t width, int64_t scale) {
  const Dim images = x->shape[0];
  x = b.reshape(x, {images, Dim(side), Dim(side / scale), Dim(width * scale)});
  x = b.transpose(x, {0, 2, 1, 3});
  x = b.reshape(x, {images, Dim(side / scale), Dim(side / scale), Dim(width * scale * scale)});
  x = b.transpose(x, {0, 2, 1, 3});
  return b.reshape(x, {images, Dim(side * side / (scale * scale)), Dim(width * scale * scale)});
}

std::unique_ptr<Graph> smolvlm_vision_encoder(const Checkpoint& ckpt, const ExportConfig& config,
                                              const VisionTowerConfig& tower, int64_t scale,
                                              const std::string& vision, const std::string& connector,
                                              int64_t text_hidden, std::set<std::string>& dims) {
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  Value* pixels = vision_pixels(m, tower, "images", kMaxImages);
  const std::vector<Value*> states = vision_hidden_states(m, vision, tower, pixels, tower.layers);
  Value* x = vision_last_hidden_state(m, vision, tower, states.back());
  b.set_scope(connector + "pixel_shuffle");
  x = pixel_shuffle(b, x, tower.image / tower.patch, tower.hidden, scale);
  const std::string proj = connector + "modality_projection.proj";
  b.set_scope(proj);
  x = b.linear(x, m.weight(proj + ".weight", {text_hidden, tower.hidden * scale * scale}));
  b.output(x, "image_features");
  m.tolerate_outside({vision, connector});
  return finish_component(m, "BaseModelOutputWithPooling", tower.layers, dims);
}

ExportModel build_smolvlm(const Checkpoint& ckpt, const ExportConfig& config, const char* model_type) {
  const JsonConfig& c = ckpt.config();
  const auto vision_config = c.object("vision_config");
  if (!vision_config) c.invalid("vision_config", str(model_type, " needs the vision tower's vision_config"));
  const VisionTowerConfig tower = parse_vision_tower(*vision_config, std::string(model_type) + "_vision");
  const int64_t scale = c.positive("scale_factor", 2);
  const int64_t side = tower.image / tower.patch;
  if (side % scale != 0)
    c.invalid("scale_factor", str("must divide the patch grid's side (", side, " patches)"));
  // The Hub's and transformers' layout (model.vision_model., model.connector., model.text_model.,
  // lm_head); the text model may sit without the prefix's "model." in older saves.
  const bool prefixed = ckpt.find("model.text_model.embed_tokens.weight") != nullptr;
  const std::string root = prefixed ? "model." : "";
  VisionLanguageSpec spec;
  spec.model_type = model_type;
  spec.language_model = root + "text_model.";
  spec.head = "lm_head";
  spec.vision_encoder = [&](int64_t text_hidden, std::set<std::string>& dims) {
    return smolvlm_vision_encoder(ckpt, config, tower, scale, root + "vision_model.", root + "connector.", text_hidden,
                                  dims);
  };
  spec.image_token_id = c.integer("image_token_id", 128257);
  spec.features_per_image = side * side / (scale * scale);
  // The output class of the model's own forward.
  spec.output_type = std::string(model_type) == "smolvlm"
                         ? "transformers.models.smolvlm.modeling_smolvlm.SmolVLMCausalLMOutputWithPast"
                         : "transformers.models.idefics3.modeling_idefics3.Idefics3CausalLMOutputWithPast";
  return build_vision_language(ckpt, config, spec);
}

}  // namespace

HFX_REGISTER_ARCH("smolvlm", [](const Checkpoint& ckpt, const ExportConfig& config) {
  return build_smolvlm(ckpt, config, "smolvlm");
})
HFX_REGISTER_ARCH("idefics3", [](const Checkpoint& ckpt, const ExportConfig& config) {
  return build_smolvlm(ckpt, config, "idefics3");
})

}  // namespace hfx
