// dinov2 (Dinov2Model: feature-extraction's last_hidden_state and pooler_output, the [CLS] row;
// Dinov2ForImageClassification: image-classification's logits over [CLS] ++ the patches' mean).
// pixel_values [batch, num_channels, height, width] at the image processor's crop size (its
// preprocessor_config.json beside the checkpoint), else the config's image_size: the patch
// convolution, [CLS] prepended, the learned positions resampled to the patch grid as transformers
// does (bicubic, align_corners false, A = -0.75: a constant matrix per axis), pre-norm layers whose
// two branches are scaled by layer_scale (a GELU MLP, or SwiGLU), a final LayerNorm.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "io/json_config.h"
#include "models/blocks.h"
#include "models/decoder.h"
#include "models/encoder.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/seq2seq.h"

namespace hfx {
namespace {

constexpr int64_t kMaxBatch = 64;

struct Dinov2Config {
  std::vector<std::string> architectures;
  int64_t hidden = 0, layers = 0, heads = 0, ffn = 0, image = 0, patch = 0, channels = 0, labels = 0;
  int64_t height = 0, width = 0;  // the exported input's size
  bool qkv_bias = true, swiglu = false;
  double eps = 1e-6;
  std::string activation;
};

// The size the image processor gives (its crop, else its resize target), if the checkpoint has one.
std::optional<std::pair<int64_t, int64_t>> processed_size(const Checkpoint& ckpt) {
  const auto path = ckpt.model_dir() / "preprocessor_config.json";
  if (!std::filesystem::is_regular_file(path)) return std::nullopt;
  const JsonConfig p(read_json_file(path), path.string());
  for (const char* key : {"crop_size", "size"}) {
    if (std::string(key) == "crop_size" && !p.boolean("do_center_crop", true)) continue;
    if (const auto size = p.object(key); size && size->has("height") && size->has("width"))
      return std::pair{size->positive("height"), size->positive("width")};
  }
  return std::nullopt;
}

Dinov2Config parse_dinov2(const Checkpoint& ckpt) {
  const JsonConfig& c = ckpt.config();
  Dinov2Config cfg;
  cfg.architectures = architectures(c);
  cfg.hidden = c.positive("hidden_size", 768);
  cfg.layers = c.positive("num_hidden_layers", 12);
  cfg.heads = c.positive("num_attention_heads", 12);
  if (cfg.hidden % cfg.heads != 0) c.invalid("num_attention_heads", "must divide hidden_size");
  cfg.ffn = c.scaled("mlp_ratio", 4.0, cfg.hidden);
  cfg.swiglu = c.boolean("use_swiglu_ffn", false);
  if (cfg.swiglu) cfg.ffn = (cfg.ffn * 2 / 3 + 7) / 8 * 8;  // SwiGLUFFN's hidden width
  cfg.image = c.positive("image_size", 224);
  cfg.patch = c.positive("patch_size", 14);
  cfg.channels = c.positive("num_channels", 3);
  cfg.qkv_bias = c.boolean("qkv_bias", true);
  cfg.eps = c.number("layer_norm_eps", 1e-6);
  cfg.activation = c.string("hidden_act", "gelu");
  check_activation(c, "hidden_act", cfg.activation);
  cfg.labels = label_count(c);
  if (cfg.image % cfg.patch != 0) c.invalid("patch_size", "must divide image_size");
  std::tie(cfg.height, cfg.width) = processed_size(ckpt).value_or(std::pair{cfg.image, cfg.image});
  if (cfg.height % cfg.patch != 0 || cfg.width % cfg.patch != 0)
    fail(ckpt.model_dir().string(), ": preprocessor_config.json: images of ", cfg.height, "x", cfg.width,
         " are not whole patches of ", cfg.patch);
  return cfg;
}

Task dinov2_task(const ExportConfig& config, const Dinov2Config& cfg) {
  const Task task = resolve_task(config.task, cfg.architectures, Task::FeatureExtraction);
  if (task != Task::ImageClassification && task != Task::FeatureExtraction)
    fail("task: dinov2 exports image-classification or feature-extraction, not ", task_name(task));
  if (config.generation.enabled) fail("task: dinov2 is an image encoder: it has no decode loop (--for-generation)");
  return task;
}

float cubic_near(float x, float a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }          // |x| <= 1
float cubic_far(float x, float a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }     // 1 < |x| < 2

// [out, in]: torch's bicubic resampling of `in` samples to `out` (align_corners false, A = -0.75,
// source indices clamped at the edges), in float32 as its CPU kernel computes the taps.
std::vector<float> bicubic_matrix(int64_t in, int64_t out) {
  constexpr float kA = -0.75f;
  std::vector<float> w(static_cast<size_t>(out * in), 0.0f);
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (int64_t i = 0; i < out; ++i) {
    const float real = scale * (static_cast<float>(i) + 0.5f) - 0.5f;
    const auto first = static_cast<int64_t>(std::floor(real));
    const float t = real - static_cast<float>(first);
    const float taps[4] = {cubic_far(t + 1, kA), cubic_near(t, kA), cubic_near(1 - t, kA), cubic_far(2 - t, kA)};
    for (int64_t k = 0; k < 4; ++k)
      w[static_cast<size_t>(i * in + std::clamp<int64_t>(first - 1 + k, 0, in - 1))] += taps[k];
  }
  return w;
}

// The positions [1, 1 + grid^2, hidden] resampled to the exported patch grid: [1, 1 + rows * cols, hidden].
Value* resampled_positions(ModelBuilder& m, const std::string& name, const Dinov2Config& cfg) {
  Builder& b = m.b();
  const int64_t grid = cfg.image / cfg.patch, rows = cfg.height / cfg.patch, cols = cfg.width / cfg.patch, h = cfg.hidden;
  Value* table = m.weight(name, {1, grid * grid + 1, h});
  if (rows == grid && cols == grid) return table;
  Value* cls = b.slice(table, 1, 0, 1);
  Value* patches = b.reshape(b.slice(table, 1, 1, grid * grid + 1), {Dim(grid), Dim(grid * h)});
  // Along the rows, then along the columns: [rows, grid * hidden] -> [rows, hidden, grid] -> [rows, cols, hidden].
  Value* tall = b.matmul(b.const_f32(bicubic_matrix(grid, rows), {rows, grid}), b.cast(patches, DType::F32));
  tall = b.transpose(b.reshape(tall, {Dim(rows), Dim(grid), Dim(h)}), {0, 2, 1});
  Value* across = b.transpose(b.const_f32(bicubic_matrix(grid, cols), {cols, grid}), {1, 0});
  Value* wide = b.reshape(b.transpose(b.matmul(tall, across), {0, 2, 1}), {Dim(int64_t{1}), Dim(rows * cols), Dim(h)});
  return b.concat({cls, b.cast(wide, table->dtype)}, 1);
}

Value* embeddings(ModelBuilder& m, const std::string& p, const Dinov2Config& cfg, Value* pixels) {
  Builder& b = m.b();
  const int64_t patches = (cfg.height / cfg.patch) * (cfg.width / cfg.patch);
  const std::string conv = p + "patch_embeddings.projection";
  b.set_scope(conv);
  Value* x = b.conv(pixels, m.weight(conv + ".weight", {cfg.hidden, cfg.channels, cfg.patch, cfg.patch}),
                    m.weight(conv + ".bias", {cfg.hidden}), {cfg.patch, cfg.patch}, {0, 0}, {1, 1});
  x = patch_sequence(b, x, cfg.hidden, patches);
  b.set_scope(p + "cls_token");
  Value* cls = per_row_token(b, m.weight(p + "cls_token", {1, 1, cfg.hidden}), pixels, cfg.hidden);
  b.set_scope(p + "position_embeddings");
  return b.add(b.concat({cls, x}, 1), resampled_positions(m, p + "position_embeddings", cfg));
}

// x * lambda1, a layer's per-channel branch scale.
Value* layer_scale(ModelBuilder& m, const std::string& module, int64_t hidden, Value* x) {
  m.b().set_scope(module);
  return m.b().mul(x, m.weight(module + ".lambda1", {hidden}));
}

Value* feed_forward(ModelBuilder& m, const std::string& p, const Dinov2Config& cfg, Value* x) {
  if (!cfg.swiglu) return gated_mlp(m, p, encoder_mlp(cfg.hidden, cfg.ffn, cfg.activation, "mlp.fc1", "mlp.fc2"), x);
  MlpSpec mlp{.hidden = cfg.hidden, .intermediate = cfg.ffn, .bias = true, .activation = "silu", .gated = true};
  mlp.gate_up = "mlp.weights_in", mlp.down = "mlp.weights_out";  // SwiGLUFFN: silu(x1) * x2, x1 rows first
  return gated_mlp(m, p, mlp, x);
}

Value* dinov2_layer(ModelBuilder& m, const std::string& p, const Dinov2Config& cfg, Value* x) {
  Builder& b = m.b();
  AttentionSpec attention = encoder_attention(cfg.hidden, cfg.heads, "output.dense");
  attention.q = "attention.query", attention.k = "attention.key", attention.v = "attention.value";
  attention.qkv_bias = cfg.qkv_bias;
  Value* attended = attention_block(m, p + "attention.", attention, encoder_layer_norm(m, p + "norm1", x, cfg.eps),
                                    encoder_attention_context(nullptr));
  x = b.add(x, layer_scale(m, p + "layer_scale1", cfg.hidden, attended));
  Value* fed = feed_forward(m, p, cfg, encoder_layer_norm(m, p + "norm2", x, cfg.eps));
  return b.add(x, layer_scale(m, p + "layer_scale2", cfg.hidden, fed));
}

ExportModel build_dinov2(const Checkpoint& ckpt, const ExportConfig& config) {
  const Dinov2Config cfg = parse_dinov2(ckpt);
  ExportModel out{"dinov2", cfg.architectures, {}, {}};
  out.task = dinov2_task(config, cfg);
  const std::string root = ckpt.find("dinov2.embeddings.cls_token") ? "dinov2." : "";
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  b.set_scope("inputs");
  if (m.taken_inputs({"pixel_values"}, {"pixel_values"}).empty()) fail("inputs: must include pixel_values");
  Value* pixels = b.input("pixel_values", config.dtype,
                          {m.dim("batch", 1, kMaxBatch), Dim(cfg.channels), Dim(cfg.height), Dim(cfg.width)});
  Value* x = embeddings(m, root + "embeddings.", cfg, pixels);
  for (int64_t i = 0; i < cfg.layers; ++i) x = dinov2_layer(m, root + "encoder.layer." + std::to_string(i) + ".", cfg, x);
  x = encoder_layer_norm(m, root + "layernorm", x, cfg.eps);
  const char* output_type = "BaseModelOutputWithPooling";
  b.set_scope("pooler");
  Value* first = b.reshape(b.slice(x, 1, 0, 1), {x->shape[0], Dim(cfg.hidden)});
  if (out.task == Task::ImageClassification) {  // [CLS] ++ the patch tokens' mean
    b.set_scope("classifier");
    const int64_t tokens = x->shape[1].value();
    Value* mean = b.reduce(OpKind::ReduceMean, b.slice(x, 1, 1, tokens), {1}, false);
    b.output(b.cast(encoder_dense(m, "classifier", cfg.labels, 2 * cfg.hidden, b.concat({first, mean}, 1)), DType::F32),
             "logits");
    output_type = "ImageClassifierOutput";
  } else {
    b.output(x, "last_hidden_state");
    b.output(first, "pooler_output");
    for (const TensorView* t : ckpt.tensors())
      if (!root.empty() && !t->name.starts_with(root)) m.tolerate(t->name);  // a head's weights
  }
  // The mask token is read only with bool_masked_pos (pre-training).
  if (m.has(root + "embeddings.mask_token")) m.tolerate(root + "embeddings.mask_token");
  out.components.push_back({Role::Forward, finish_component(m, output_type, cfg.layers, out.dims)});
  return out;
}

}  // namespace

HFX_REGISTER_ARCH("dinov2", build_dinov2)

}  // namespace hfx
