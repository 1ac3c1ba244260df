// vit (ViTModel: feature-extraction's last_hidden_state and, with its pooler, pooler_output;
// ViTForImageClassification: image-classification's logits over the [CLS] token). pixel_values
// [batch, num_channels, image_size, image_size] (the image processor's output) through the patch
// embedding (a convolution of kernel and stride patch_size), the [CLS] token prepended, learned
// positions added (at the configured image size: transformers interpolates them only when asked),
// pre-norm transformer layers (layernorm_before, attention, layernorm_after, GELU MLP) and a final
// LayerNorm.
#include "core/error.h"
#include "models/blocks.h"
#include "models/decoder.h"
#include "models/encoder.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/seq2seq.h"

namespace hfx {
namespace {

constexpr int64_t kMaxBatch = 64;

struct VitConfig {
  std::vector<std::string> architectures;
  int64_t hidden = 0, layers = 0, heads = 0, ffn = 0, image = 0, patch = 0, channels = 0, labels = 0;
  bool qkv_bias = true;
  double eps = 1e-12;
  std::string activation;
};

VitConfig parse_vit(const JsonConfig& c) {
  VitConfig cfg;
  cfg.architectures = architectures(c);
  cfg.hidden = c.positive("hidden_size", 768);
  cfg.layers = c.positive("num_hidden_layers", 12);
  cfg.heads = c.positive("num_attention_heads", 12);
  if (cfg.hidden % cfg.heads != 0) c.invalid("num_attention_heads", "must divide hidden_size");
  cfg.ffn = c.positive("intermediate_size", 3072);
  cfg.image = c.positive("image_size", 224);
  cfg.patch = c.positive("patch_size", 16);
  if (cfg.image % cfg.patch != 0) c.invalid("patch_size", "must divide image_size");
  cfg.channels = c.positive("num_channels", 3);
  cfg.qkv_bias = c.boolean("qkv_bias", true);
  cfg.eps = c.number("layer_norm_eps", 1e-12);
  cfg.activation = c.string("hidden_act", "gelu");
  check_activation(c, "hidden_act", cfg.activation);
  cfg.labels = label_count(c);
  return cfg;
}

Task vit_task(const ExportConfig& config, const VitConfig& cfg) {
  const Task task = resolve_task(config.task, cfg.architectures, Task::FeatureExtraction);
  if (task != Task::ImageClassification && task != Task::FeatureExtraction)
    fail("task: vit exports image-classification or feature-extraction, not ", task_name(task));
  if (config.generation.enabled) fail("task: vit is an image encoder: it has no decode loop (--for-generation)");
  return task;
}

// [batch, channels, image, image] -> [batch, 1 + patches, hidden]: the patches, [CLS] first, plus
// the learned positions.
Value* embeddings(ModelBuilder& m, const std::string& p, const VitConfig& cfg, Value* pixels) {
  Builder& b = m.b();
  const int64_t grid = cfg.image / cfg.patch, patches = grid * grid;
  const std::string conv = p + "patch_embeddings.projection";
  b.set_scope(conv);
  Value* x = b.conv(pixels, m.weight(conv + ".weight", {cfg.hidden, cfg.channels, cfg.patch, cfg.patch}),
                    m.weight(conv + ".bias", {cfg.hidden}), {cfg.patch, cfg.patch}, {0, 0}, {1, 1});
  x = patch_sequence(b, x, cfg.hidden, patches);
  b.set_scope(p + "cls_token");
  x = b.concat({per_row_token(b, m.weight(p + "cls_token", {1, 1, cfg.hidden}), pixels, cfg.hidden), x}, 1);
  b.set_scope(p + "position_embeddings");
  return b.add(x, m.weight(p + "position_embeddings", {1, patches + 1, cfg.hidden}));
}

Value* vit_layer(ModelBuilder& m, const std::string& p, const VitConfig& cfg, Value* x) {
  Builder& b = m.b();
  AttentionSpec attention = encoder_attention(cfg.hidden, cfg.heads, "output.dense");
  attention.q = "attention.query", attention.k = "attention.key", attention.v = "attention.value";
  attention.qkv_bias = cfg.qkv_bias;
  const MlpSpec mlp = encoder_mlp(cfg.hidden, cfg.ffn, cfg.activation, "intermediate.dense", "output.dense");
  x = b.add(x, attention_block(m, p + "attention.", attention, encoder_layer_norm(m, p + "layernorm_before", x, cfg.eps),
                               encoder_attention_context(nullptr)));
  return b.add(x, gated_mlp(m, p, mlp, encoder_layer_norm(m, p + "layernorm_after", x, cfg.eps)));
}

ExportModel build_vit(const Checkpoint& ckpt, const ExportConfig& config) {
  const VitConfig cfg = parse_vit(ckpt.config());
  ExportModel out{"vit", cfg.architectures, {}, {}};
  out.task = vit_task(config, cfg);
  const std::string root = ckpt.find("vit.embeddings.cls_token") ? "vit." : "";
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  b.set_scope("inputs");
  if (m.taken_inputs({"pixel_values"}, {"pixel_values"}).empty()) fail("inputs: must include pixel_values");
  const Dim batch = m.dim("batch", 1, kMaxBatch);
  Value* pixels = b.input("pixel_values", config.dtype, {batch, Dim(cfg.channels), Dim(cfg.image), Dim(cfg.image)});
  Value* x = embeddings(m, root + "embeddings.", cfg, pixels);
  for (int64_t i = 0; i < cfg.layers; ++i) x = vit_layer(m, root + "encoder.layer." + std::to_string(i) + ".", cfg, x);
  x = encoder_layer_norm(m, root + "layernorm", x, cfg.eps);
  const char* output_type = "BaseModelOutputWithPooling";
  if (out.task == Task::ImageClassification) {
    b.set_scope("classifier");
    Value* first = b.gather(x, b.const_i64({0}), 1);
    b.output(b.cast(encoder_dense(m, "classifier", cfg.labels, cfg.hidden, first), DType::F32), "logits");
    output_type = "ImageClassifierOutput";
  } else {
    b.output(x, "last_hidden_state");
    if (m.has(root + "pooler.dense.weight")) {  // ViTModel's pooler: dense + tanh over [CLS]
      Value* first = b.gather(x, b.const_i64({0}), 1);
      b.output(b.unary(OpKind::Tanh, encoder_dense(m, root + "pooler.dense", cfg.hidden, cfg.hidden, first)),
               "pooler_output");
    }
    for (const TensorView* t : ckpt.tensors())
      if (!root.empty() && !t->name.starts_with(root)) m.tolerate(t->name);  // a head's weights
  }
  // Masked-image-modeling's mask token is read only with bool_masked_pos.
  if (m.has(root + "embeddings.mask_token")) m.tolerate(root + "embeddings.mask_token");
  out.components.push_back({Role::Forward, finish_component(m, output_type, cfg.layers, out.dims)});
  return out;
}

}  // namespace

HFX_REGISTER_ARCH("vit", build_vit)

}  // namespace hfx
