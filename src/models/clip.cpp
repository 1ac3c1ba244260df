// The CLIP family, text and vision towers of contrastive image-text models.
// CLIP: clip (CLIPModel: zero-shot-image-classification's logits_per_image / logits_per_text over
// the projected, L2-normalised text_embeds and image_embeds, scaled by exp(logit_scale)),
// clip_vision_model (CLIPVisionModel: last_hidden_state, pooler_output; ...WithProjection:
// image_embeds) and clip_text_model (CLIPTextModel: last_hidden_state, pooler_output;
// ...WithProjection: text_embeds). The vision tower: a bias-free patch convolution, the class
// embedding prepended, learned positions, pre_layrnorm, pre-norm layers, post_layernorm over
// [CLS]. The text tower: token + learned position embeddings, causal pre-norm layers over the
// padding mask, final_layer_norm, pooled at the eos token (the largest id with the original
// eos_token_id 2, else the first eos_token_id).
// SigLIP: siglip (SiglipModel: the same logits plus logit_bias, sigmoid's inputs),
// siglip_vision_model and siglip_text_model (last_hidden_state, pooler_output). Its vision tower:
// a patch convolution with bias, no class token, post_layernorm over every patch, pooled by the
// multi-head attention pooling head (a learned probe attending to the patches, LayerNorm, MLP);
// its text tower: bidirectional over the padding mask, pooled at the last position through `head`.
// SigLIP 2: siglip2 (Siglip2Model), siglip2_vision_model and siglip2_text_model: SigLIP's towers,
// the vision tower at any resolution (NaFlex): pixel_values [batch, patches, channels * patch *
// patch] (each image resized to its own patch grid, padded to the processor's max_num_patches),
// pixel_attention_mask [batch, patches] and spatial_shapes [batch, 2] (each image's rows and
// columns of patches); the patch embedding is a Linear, the learned position grid is resized to
// each image's grid in the graph (bilinear with antialiasing, as transformers computes its weights),
// and the padding patches are masked out of every attention, the pooling head's too.
#include <algorithm>
#include <cmath>

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

constexpr int64_t kMaxBatch = 64;

struct TowerConfig {
  int64_t hidden = 0, layers = 0, heads = 0, ffn = 0;
  double eps = 1e-5;
  std::string activation;
};

struct VisionConfig : TowerConfig {
  int64_t image = 0, patch = 0, channels = 0;
  std::vector<int64_t> position_ids;  // empty: each patch's own index
  int64_t position_grid = 0;          // SigLIP 2: the side of the learned position grid (else 0)
  int64_t patches_side() const { return image / patch; }
};

// What the vision tower reads: pixel_values, and SigLIP 2's patch mask and grid shapes.
struct PixelInputs {
  Value* pixels = nullptr;
  Value* patch_mask = nullptr;      // [batch, patches] int64, 0 on padding patches
  Value* spatial_shapes = nullptr;  // [batch, 2] int64: rows and columns of patches
};

struct TextConfig : TowerConfig {
  int64_t vocab = 0, positions = 0, eos = 2, projection = 0;  // projection: SigLIP's head width
};

using Family = VisionFamily;

// The family's defaults where the configs leave keys out, and its model types.
struct FamilyInfo {
  Family family;
  std::string model_type;
  int64_t vocab, positions, patch;
  double eps;
  const char* activation;
  bool flexible_resolution = false;  // SigLIP 2's NaFlex patches
};

FamilyInfo info(Family family) {
  if (family == Family::Clip) return {family, "clip", 49408, 77, 32, 1e-5, "quick_gelu"};
  return {family, "siglip", 32000, 64, 16, 1e-6, "gelu_pytorch_tanh"};
}

FamilyInfo siglip2_info() {
  FamilyInfo f = info(Family::Siglip);
  f.model_type = "siglip2";
  f.flexible_resolution = true;
  return f;
}

void parse_tower(const JsonConfig& c, TowerConfig& t, int64_t hidden, int64_t ffn, int64_t heads, const FamilyInfo& f) {
  t.hidden = c.positive("hidden_size", hidden);
  t.layers = c.positive("num_hidden_layers", 12);
  t.heads = c.positive("num_attention_heads", heads);
  if (t.hidden % t.heads != 0) c.invalid("num_attention_heads", "must divide hidden_size");
  t.ffn = c.positive("intermediate_size", ffn);
  t.eps = c.number("layer_norm_eps", f.eps);
  t.activation = c.string("hidden_act", f.activation);
  check_activation(c, "hidden_act", t.activation);
}

VisionConfig parse_vision(const JsonConfig& c, const FamilyInfo& f) {
  VisionConfig v;
  parse_tower(c, v, 768, 3072, 12, f);
  v.patch = c.positive("patch_size", f.patch);
  v.channels = c.positive("num_channels", 3);
  if (f.flexible_resolution) {
    const int64_t patches = c.positive("num_patches", 256);
    v.position_grid = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(patches))));
    if (v.position_grid * v.position_grid != patches) c.invalid("num_patches", "must be a square (the position grid)");
    return v;
  }
  v.image = c.positive("image_size", 224);
  if (v.image % v.patch != 0) c.invalid("patch_size", "must divide image_size");
  return v;
}

TextConfig parse_text(const JsonConfig& c, const FamilyInfo& f) {
  TextConfig t;
  parse_tower(c, t, f.family == Family::Clip ? 512 : 768, f.family == Family::Clip ? 2048 : 3072,
              f.family == Family::Clip ? 8 : 12, f);
  t.vocab = c.positive("vocab_size", f.vocab);
  t.positions = c.positive("max_position_embeddings", f.positions);
  t.eos = c.integer("eos_token_id", f.family == Family::Clip ? 2 : 49407);
  t.projection = c.positive("projection_size", t.hidden);
  return t;
}

// A pre-norm layer of either tower: x + attention(layer_norm1(x)), then + mlp(layer_norm2(x)).
Value* clip_layer(ModelBuilder& m, const std::string& p, const TowerConfig& t, Value* x, Value* mask) {
  Builder& b = m.b();
  const AttentionSpec attention = encoder_attention(t.hidden, t.heads, "out_proj");
  const MlpSpec mlp = encoder_mlp(t.hidden, t.ffn, t.activation, "mlp.fc1", "mlp.fc2");
  x = b.add(x, attention_block(m, p + "self_attn.", attention, encoder_layer_norm(m, p + "layer_norm1", x, t.eps),
                               encoder_attention_context(mask)));
  return b.add(x, gated_mlp(m, p, mlp, encoder_layer_norm(m, p + "layer_norm2", x, t.eps)));
}

Value* tower_layers(ModelBuilder& m, const std::string& p, const TowerConfig& t, Value* x, Value* mask) {
  for (int64_t i = 0; i < t.layers; ++i) x = clip_layer(m, p + "encoder.layers." + std::to_string(i) + ".", t, x, mask);
  return x;
}

struct Tower {
  Value* last_hidden_state;
  Value* pooled;
};

// SigLIP's pooling head: its probe attends to the patches (nn.MultiheadAttention: one fused
// in_proj; `mask` [batch, 1, 1, patches] or null), then x + mlp(layernorm(x)); [batch, hidden].
Value* attention_pooling(ModelBuilder& m, const std::string& p, const VisionConfig& v, Value* x, Value* mask) {
  Builder& b = m.b();
  b.set_scope(p + "attention");
  const int64_t h = v.hidden, head_dim = v.hidden / v.heads;
  const Dim batch = x->shape[0], one(int64_t{1});
  Value* probe = per_row_token(b, m.weight(p + "probe", {1, 1, h}), x, h);
  Value* w = m.weight(p + "attention.in_proj_weight", {3 * h, h});
  Value* bias = m.weight(p + "attention.in_proj_bias", {3 * h});
  auto heads = [&](Value* in, int64_t j) {
    Value* y = b.linear(in, m.rows(w, j * h, (j + 1) * h), m.rows(bias, j * h, (j + 1) * h));
    return b.transpose(b.reshape(y, {batch, in->shape[1], Dim(v.heads), Dim(head_dim)}), {0, 2, 1, 3});
  };
  Value* o = b.attention(heads(probe, 0), heads(x, 1), heads(x, 2), mask,
                         {.scale = 1.0 / std::sqrt(static_cast<double>(head_dim)), .softcap = 0, .causal = false});
  o = b.reshape(b.transpose(o, {0, 2, 1, 3}), {batch, one, Dim(h)});
  o = encoder_dense(m, p + "attention.out_proj", h, h, o);
  const MlpSpec mlp = encoder_mlp(h, v.ffn, v.activation, "mlp.fc1", "mlp.fc2");
  o = b.add(o, gated_mlp(m, p, mlp, encoder_layer_norm(m, p + "layernorm", o, v.eps)));
  return b.reshape(o, {batch, Dim(h)});
}

// One axis of F.interpolate(mode="bilinear", align_corners=False, antialias=True) from `grid` to
// `size` [batch, 1] cells, at each output cell `index` [batch, patches] (float32): the normalised
// triangle weights [batch, patches, grid], in transformers' order of operations.
Value* resize_weights(Builder& b, Value* index, Value* size, int64_t grid) {
  Value* scale = b.div(b.scalar(static_cast<double>(grid), DType::F32), size);
  Value* support = b.unsqueeze(b.max(scale, b.scalar(1.0, DType::F32)), {2});
  Value* center = b.sub(b.mul(b.add(index, b.scalar(0.5, DType::F32)), scale), b.scalar(0.5, DType::F32));
  std::vector<float> cells(static_cast<size_t>(grid));
  for (int64_t i = 0; i < grid; ++i) cells[static_cast<size_t>(i)] = static_cast<float>(i);
  Value* offset = b.sub(b.const_f32(cells, {grid}), b.unsqueeze(center, {2}));
  Value* distance = b.max(offset, b.unary(OpKind::Neg, offset));
  Value* weights = b.max(b.sub(b.scalar(1.0, DType::F32), b.div(distance, support)), b.scalar(0.0, DType::F32));
  return b.div(weights, b.reduce(OpKind::ReduceSum, weights, {-1}, true));
}

// SigLIP 2's learned position grid resized to each image's patch grid and laid out as its patches
// ([batch, patches, hidden]); a padding patch takes the first cell's embedding, as transformers'.
Value* resized_positions(ModelBuilder& m, const std::string& e, const VisionConfig& v, const PixelInputs& in) {
  Builder& b = m.b();
  b.set_scope(e + "position_embedding");
  const int64_t grid = v.position_grid;
  Value* table = b.cast(m.weight(e + "position_embedding.weight", {grid * grid, v.hidden}), DType::F32);
  Value* rows = b.gather(in.spatial_shapes, b.const_i64({0}, {1}), 1);  // [batch, 1]
  Value* cols = b.gather(in.spatial_shapes, b.const_i64({1}, {1}), 1);
  Value* slot = b.unsqueeze(arange_tokens(b, in.pixels), {0});     // [1, patches]
  Value* inside = b.compare(OpKind::Less, slot, b.mul(rows, cols));
  Value* col = b.mod(slot, cols);
  Value* row = b.div(b.sub(slot, col), cols);
  Value* zero = b.const_i64({0});
  auto weights = [&](Value* index, Value* size) {
    return resize_weights(b, b.cast(b.where(inside, index, zero), DType::F32), b.cast(size, DType::F32), grid);
  };
  Value* per_cell = b.mul(b.unsqueeze(weights(row, rows), {3}), b.unsqueeze(weights(col, cols), {2}));
  const Shape& s = in.pixels->shape;
  Value* resized = b.matmul(b.reshape(per_cell, {s[0], s[1], Dim(grid * grid)}), table);
  return b.cast(resized, m.config().dtype);
}

// The patch and position embeddings (CLIP: with the class token, through pre_layrnorm): the
// states the first layer takes.
Value* vision_embeddings(ModelBuilder& m, const std::string& p, const VisionConfig& v, const PixelInputs& in,
                         Family family) {
  Builder& b = m.b();
  Value* pixels = in.pixels;
  if (v.position_grid > 0) {  // SigLIP 2: flattened patches through a Linear
    const std::string e = p + "embeddings.";
    Value* x = encoder_dense(m, e + "patch_embedding", v.hidden, v.channels * v.patch * v.patch, pixels);
    return b.add(x, resized_positions(m, e, v, in));
  }
  const bool clip = family == Family::Clip;
  const int64_t grid = v.image / v.patch, patches = grid * grid;
  const std::string e = p + "embeddings.";
  b.set_scope(e + "patch_embedding");
  Value* x = b.conv(pixels, m.weight(e + "patch_embedding.weight", {v.hidden, v.channels, v.patch, v.patch}),
                    m.weight_if(!clip, e + "patch_embedding.bias", {v.hidden}), {v.patch, v.patch}, {0, 0}, {1, 1});
  x = patch_sequence(b, x, v.hidden, patches);
  if (clip) {
    b.set_scope(e + "class_embedding");
    Value* token = b.reshape(m.weight(e + "class_embedding", {v.hidden}), {Dim(int64_t{1}), Dim(int64_t{1}), Dim(v.hidden)});
    x = b.concat({per_row_token(b, token, pixels, v.hidden), x}, 1);
  }
  b.set_scope(e + "position_embedding");
  Value* table = m.weight(e + "position_embedding.weight", {patches + (clip ? 1 : 0), v.hidden});
  if (!v.position_ids.empty()) table = b.embedding(table, b.const_i64(v.position_ids, {patches}));
  x = b.add(x, table);
  return clip ? encoder_layer_norm(m, p + "pre_layrnorm", x, v.eps) : x;
}

// pixel_values [batch, channels, image, image] (SigLIP 2: its patches, mask and shapes) -> the
// vision tower's states and its pooled output.
Tower vision_tower(ModelBuilder& m, const std::string& p, const VisionConfig& v, const PixelInputs& in, Family family) {
  Builder& b = m.b();
  Value* mask = nullptr;  // SigLIP 2's padding patches, hidden from every query
  if (in.patch_mask) {
    b.set_scope(p + "mask");
    mask = padding_mask(b, in.patch_mask, in.patch_mask);
  }
  Value* x = tower_layers(m, p, v, vision_embeddings(m, p, v, in, family), mask);
  if (family == Family::Siglip) {
    x = encoder_layer_norm(m, p + "post_layernorm", x, v.eps);
    if (!m.has(p + "head.probe")) return {x, nullptr};
    return {x, attention_pooling(m, p + "head.", v, x, in.patch_mask ? encoder_padding(b, in.patch_mask) : nullptr)};
  }
  b.set_scope(p + "post_layernorm");
  Value* first = b.gather(x, b.const_i64({0}), 1);
  return {x, encoder_layer_norm(m, p + "post_layernorm", first, v.eps)};
}

// The eos token's row of each sequence ([batch, sequence] ids, [batch, sequence, hidden] states ->
// [batch, hidden]): the first position holding the largest key (argmax's pick), as a one-hot row
// read by a matmul.
Value* eos_rows(Builder& b, const TextConfig& t, Value* ids, Value* hidden) {
  // The original checkpoints' eos_token_id 2 is not their eos: the eos is the largest id.
  Value* key = t.eos == 2 ? b.cast(ids, DType::F32) : b.cast(b.compare(OpKind::Equal, ids, b.const_i64({t.eos})), DType::F32);
  Value* top = b.reduce(OpKind::ReduceMax, key, {-1}, true);
  Value* positions = b.unsqueeze(b.cast(arange_tokens(b, ids), DType::F32), {0});
  Value* negated = b.where(b.compare(OpKind::Equal, key, top), b.unary(OpKind::Neg, positions), b.scalar(-1e9, DType::F32));
  Value* first = b.unary(OpKind::Neg, b.reduce(OpKind::ReduceMax, negated, {-1}, true));
  Value* one_hot = b.cast(b.compare(OpKind::Equal, positions, first), hidden->dtype);
  return b.reshape(b.matmul(b.unsqueeze(one_hot, {1}), hidden), {hidden->shape[0], hidden->shape[2]});
}

// input_ids / attention_mask [batch, sequence] -> the text tower's states and its pooled output:
// CLIP's eos row; SigLIP's last position through its head.
Tower text_tower(ModelBuilder& m, const std::string& p, const TextConfig& t, Value* ids, Value* attention_mask,
                 Family family) {
  Builder& b = m.b();
  const std::string e = p + "embeddings.";
  b.set_scope(e + "token_embedding");
  Value* x = b.embedding(m.weight(e + "token_embedding.weight", {t.vocab, t.hidden}), ids);
  b.set_scope(e + "position_embedding");
  Value* slots = arange_tokens(b, ids);
  x = b.add(x, b.embedding(m.weight(e + "position_embedding.weight", {t.positions, t.hidden}), slots));
  b.set_scope(p + "mask");
  Value* mask = padding_mask(b, ids, attention_mask);
  if (family == Family::Clip) {
    Value* causal = b.compare(OpKind::LessOrEqual, b.unsqueeze(slots, {0}), b.unsqueeze(slots, {1}));  // key <= query
    mask = b.logical_and(b.unsqueeze(causal, {0, 1}), mask);
  }
  x = encoder_layer_norm(m, p + "final_layer_norm", tower_layers(m, p, t, x, mask), t.eps);
  b.set_scope(p + "pooler");
  if (family == Family::Clip) return {x, eos_rows(b, t, ids, x)};
  Value* last = b.gather(x, b.sub(token_count(b, ids), b.const_i64({1})), 1);  // [batch, 1, hidden]
  last = b.reshape(last, {x->shape[0], Dim(t.hidden)});
  return {x, encoder_dense(m, p + "head", t.projection, t.hidden, last)};
}

// Older checkpoints store each tower's position_ids buffer (0..n-1, what the graph computes).
void tolerate_position_ids(ModelBuilder& m, const Checkpoint& ckpt) {
  for (const TensorView* t : ckpt.tensors())
    if (t->name.ends_with("embeddings.position_ids")) m.tolerate(t->name);
}

// x / |x| over the last axis.
Value* l2_normalised(Builder& b, Value* x) {
  return b.div(x, b.unary(OpKind::Sqrt, b.reduce(OpKind::ReduceSum, b.mul(x, x), {-1}, true)));
}

Value* projection(ModelBuilder& m, const std::string& module, int64_t out, int64_t in, Value* x) {
  m.b().set_scope(module);
  return m.b().linear(x, m.weight(module + ".weight", {out, in}));
}

struct TextInputs {
  Value* ids;
  Value* mask;
};

TextInputs text_inputs(ModelBuilder& m, const TextConfig& t, const char* batch_dim) {
  Builder& b = m.b();
  b.set_scope("inputs");
  const Dim batch = m.dim(batch_dim, 1, kMaxBatch), sequence = m.dim("sequence", 1, t.positions);
  return {b.input("input_ids", DType::I64, {batch, sequence}), b.input("attention_mask", DType::I64, {batch, sequence})};
}

PixelInputs pixel_input(ModelBuilder& m, const VisionConfig& v, const char* batch_dim) {
  Builder& b = m.b();
  b.set_scope("inputs");
  const Dim batch = m.dim(batch_dim, 1, kMaxBatch);
  if (v.position_grid == 0)
    return {b.input("pixel_values", m.config().dtype, {batch, Dim(v.channels), Dim(v.image), Dim(v.image)})};
  // The processor's max_num_patches is the caller's: up to 4x the position grid's cells (1,024 for
  // the usual 256: the Hub's NaFlex budgets go to 1,024), more with --dim patches=1:N. ExecuTorch
  // plans its memory for the bound.
  const Dim patches = m.dim("patches", 1, 4 * v.position_grid * v.position_grid);
  return {b.input("pixel_values", m.config().dtype, {batch, patches, Dim(v.channels * v.patch * v.patch)}),
          b.input("pixel_attention_mask", DType::I64, {batch, patches}),
          b.input("spatial_shapes", DType::I64, {batch, Dim(int64_t{2})})};
}

Task tower_task(const std::string& model_type, const ExportConfig& config, Task only) {
  const Task task = config.task.empty() ? only : *task_named(config.task);
  if (task != only) fail("task: ", model_type, " exports ", task_name(only), ", not ", task_name(task));
  if (config.generation.enabled) fail("task: ", model_type, " is an encoder: it has no decode loop (--for-generation)");
  return task;
}

// The image classifier (...ForImageClassification): the vision tower's last_hidden_state averaged
// over the patches (CLIP: after [CLS]; SigLIP 2: the real ones), then `classifier`.
ExportModel build_image_classifier(const Checkpoint& ckpt, const ExportConfig& config, const FamilyInfo& f,
                                   const VisionConfig& v, ExportModel out) {
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  const PixelInputs in = pixel_input(m, v, "batch");
  Value* x = vision_tower(m, "vision_model.", v, in, f.family).last_hidden_state;
  b.set_scope("classifier");
  Value* pooled = nullptr;
  if (f.family == Family::Clip) {
    pooled = b.reduce(OpKind::ReduceMean, b.slice(x, 1, 1, v.patches_side() * v.patches_side() + 1), {1}, false);
  } else if (in.patch_mask) {
    Value* kept = b.unsqueeze(b.cast(in.patch_mask, x->dtype), {2});
    pooled = b.div(b.reduce(OpKind::ReduceSum, b.mul(x, kept), {1}, false), b.reduce(OpKind::ReduceSum, kept, {1}, false));
  } else {
    pooled = b.reduce(OpKind::ReduceMean, x, {1}, false);
  }
  b.output(b.cast(encoder_dense(m, "classifier", label_count(ckpt.config()), v.hidden, pooled), DType::F32), "logits");
  out.components.push_back({Role::Forward, finish_component(m, "ImageClassifierOutput", v.layers, out.dims)});
  return out;
}

ExportModel build_pair(const Checkpoint& ckpt, const ExportConfig& config, const FamilyInfo& f) {
  const JsonConfig& c = ckpt.config();
  const auto vision_config = c.object("vision_config");
  if (!vision_config) c.invalid("vision_config", f.model_type + " needs vision_config");
  const VisionConfig v = parse_vision(*vision_config, f);
  ExportModel out{f.model_type, architectures(c), {}, {}};
  // ...ForImageClassification exports image-classification; the pair (...Model) zero-shot scores.
  const bool classifier = resolve_task("", out.architectures, Task::ZeroShotImageClassification) == Task::ImageClassification;
  out.task = tower_task(f.model_type, config, classifier ? Task::ImageClassification : Task::ZeroShotImageClassification);
  if (classifier) return build_image_classifier(ckpt, config, f, v, std::move(out));
  const auto text_config = c.object("text_config");
  if (!text_config) c.invalid("text_config", f.model_type + " needs text_config and vision_config");
  const TextConfig t = parse_text(*text_config, f);
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  const TextInputs text = text_inputs(m, t, "text_batch");
  const PixelInputs pixels = pixel_input(m, v, "image_batch");
  Value* text_pooled = text_tower(m, "text_model.", t, text.ids, text.mask, f.family).pooled;
  Value* image_pooled = vision_tower(m, "vision_model.", v, pixels, f.family).pooled;
  if (!image_pooled) fail(ckpt.where(), ": vision_model.head.probe: ", f.model_type, " scores images by its pooling head");
  if (f.family == Family::Siglip && t.projection != v.hidden)
    text_config->invalid("projection_size", "must equal vision_config's hidden_size (the image embeddings' width)");
  if (f.family == Family::Clip) {  // CLIP's projections (SigLIP's text head is its own)
    const int64_t projected = c.positive("projection_dim", 512);
    text_pooled = projection(m, "text_projection", projected, t.hidden, text_pooled);
    image_pooled = projection(m, "visual_projection", projected, v.hidden, image_pooled);
  }
  Value* text_embeds = l2_normalised(b, text_pooled);
  Value* image_embeds = l2_normalised(b, image_pooled);
  b.set_scope("logit_scale");
  const std::vector<int64_t> scalar = f.family == Family::Clip ? std::vector<int64_t>{} : std::vector<int64_t>{1};
  Value* per_text = b.mul(b.matmul(text_embeds, b.transpose(image_embeds, {1, 0})),
                          b.unary(OpKind::Exp, m.weight("logit_scale", scalar)));
  if (f.family == Family::Siglip) per_text = b.add(per_text, m.weight("logit_bias", scalar));
  b.output(b.cast(b.transpose(per_text, {1, 0}), DType::F32), "logits_per_image");
  b.output(b.cast(per_text, DType::F32), "logits_per_text");
  b.output(text_embeds, "text_embeds");
  b.output(image_embeds, "image_embeds");
  tolerate_position_ids(m, ckpt);
  const char* output_type = f.family == Family::Clip           ? "CLIPOutput"
                            : f.flexible_resolution ? "Siglip2Output"
                                                    : "SiglipOutput";
  out.components.push_back({Role::Forward, finish_component(m, output_type, t.layers + v.layers, out.dims)});
  return out;
}

// The vision tower alone: last_hidden_state and pooler_output, or CLIPVisionModelWithProjection's image_embeds.
ExportModel build_vision(const Checkpoint& ckpt, const ExportConfig& config, const FamilyInfo& f) {
  const JsonConfig& c = ckpt.config();
  const VisionConfig v = parse_vision(c, f);
  const std::string model_type = f.model_type + "_vision_model";
  ExportModel out{model_type, architectures(c), {}, {}};
  out.task = tower_task(model_type, config, Task::FeatureExtraction);
  ModelBuilder m(ckpt, config);
  // transformers 5 saves the tower models without the vision_model. prefix their 4.x checkpoints have.
  const std::string p = ckpt.find("vision_model.embeddings.patch_embedding.weight") ? "vision_model." : "";
  const Tower tower = vision_tower(m, p, v, pixel_input(m, v, "batch"), f.family);
  m.b().output(tower.last_hidden_state, "last_hidden_state");
  if (f.family == Family::Clip && m.has("visual_projection.weight")) {
    m.b().output(projection(m, "visual_projection", c.positive("projection_dim", 512), v.hidden, tower.pooled), "image_embeds");
  } else if (tower.pooled) {
    m.b().output(tower.pooled, "pooler_output");
  }
  tolerate_position_ids(m, ckpt);
  out.components.push_back({Role::Forward, finish_component(m, "BaseModelOutputWithPooling", v.layers, out.dims)});
  return out;
}

// The text tower alone: last_hidden_state and pooler_output, or CLIPTextModelWithProjection's text_embeds.
ExportModel build_text(const Checkpoint& ckpt, const ExportConfig& config, const FamilyInfo& f) {
  const JsonConfig& c = ckpt.config();
  const TextConfig t = parse_text(c, f);
  const std::string model_type = f.model_type + "_text_model";
  ExportModel out{model_type, architectures(c), {}, {}};
  out.task = tower_task(model_type, config, Task::FeatureExtraction);
  ModelBuilder m(ckpt, config);
  const TextInputs text = text_inputs(m, t, "batch");
  const std::string p = ckpt.find("text_model.embeddings.token_embedding.weight") ? "text_model." : "";
  const Tower tower = text_tower(m, p, t, text.ids, text.mask, f.family);
  m.b().output(tower.last_hidden_state, "last_hidden_state");
  if (f.family == Family::Clip && m.has("text_projection.weight")) {
    m.b().output(projection(m, "text_projection", c.positive("projection_dim", 512), t.hidden, tower.pooled), "text_embeds");
  } else {
    m.b().output(tower.pooled, "pooler_output");
  }
  tolerate_position_ids(m, ckpt);
  out.components.push_back({Role::Forward, finish_component(m, "BaseModelOutputWithPooling", t.layers, out.dims)});
  return out;
}

ExportModel build_clip(const Checkpoint& ckpt, const ExportConfig& config) { return build_pair(ckpt, config, info(Family::Clip)); }
ExportModel build_clip_vision(const Checkpoint& ckpt, const ExportConfig& config) {
  return build_vision(ckpt, config, info(Family::Clip));
}
ExportModel build_clip_text(const Checkpoint& ckpt, const ExportConfig& config) {
  return build_text(ckpt, config, info(Family::Clip));
}
ExportModel build_siglip(const Checkpoint& ckpt, const ExportConfig& config) {
  return build_pair(ckpt, config, info(Family::Siglip));
}
ExportModel build_siglip_vision(const Checkpoint& ckpt, const ExportConfig& config) {
  return build_vision(ckpt, config, info(Family::Siglip));
}
ExportModel build_siglip_text(const Checkpoint& ckpt, const ExportConfig& config) {
  return build_text(ckpt, config, info(Family::Siglip));
}
ExportModel build_siglip2(const Checkpoint& ckpt, const ExportConfig& config) {
  return build_pair(ckpt, config, siglip2_info());
}
ExportModel build_siglip2_vision(const Checkpoint& ckpt, const ExportConfig& config) {
  return build_vision(ckpt, config, siglip2_info());
}
ExportModel build_siglip2_text(const Checkpoint& ckpt, const ExportConfig& config) {
  return build_text(ckpt, config, siglip2_info());
}

}  // namespace

// SmolVLM's position ids for a full patch grid of side n, as its embeddings compute them in
// float32: coordinate i * (1 / n) bucketized by torch.arange(1 / n, 1, 1 / n) (whose rounding
// makes some rows differ from i: e.g. n = 27).
std::vector<int64_t> navit_position_ids(int64_t n) {
  const double step = 1.0 / static_cast<double>(n);
  const auto count = static_cast<int64_t>(std::ceil((1.0 - step) / step));  // torch.arange's length
  std::vector<float> boundaries;
  for (int64_t k = 0; k < count; ++k) boundaries.push_back(static_cast<float>(step + static_cast<double>(k) * step));
  const float inverse = 1.0f / static_cast<float>(n);
  std::vector<int64_t> bucket;
  for (int64_t i = 0; i < n; ++i) {
    const float coordinate = std::min(static_cast<float>(i) * inverse, static_cast<float>(1.0 - 1e-6));
    bucket.push_back(std::count_if(boundaries.begin(), boundaries.end(), [&](float b) { return b <= coordinate; }));
  }
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < n; ++c) ids.push_back(bucket[static_cast<size_t>(r)] * n + bucket[static_cast<size_t>(c)]);
  return ids;
}

VisionTowerConfig parse_vision_tower(const JsonConfig& c, const std::string& default_type) {
  const std::string type = c.string("model_type", default_type);
  const bool navit = type == "smolvlm_vision" || type == "idefics3_vision";
  if (type != "clip_vision_model" && type != "siglip_vision_model" && !navit)
    c.invalid("model_type", "'" + type + "' is not a supported vision tower (clip_vision_model, siglip_vision_model, "
                                         "smolvlm_vision, idefics3_vision)");
  FamilyInfo f = info(type == "clip_vision_model" ? Family::Clip : Family::Siglip);
  if (navit) f.patch = 32, f.eps = 1e-6;  // SmolVLMVisionConfig's defaults
  VisionConfig v = parse_vision(c, f);
  if (navit) {
    v.hidden = c.positive("hidden_size", 1152);
    v.heads = c.positive("num_attention_heads", 16);
    v.position_ids = navit_position_ids(v.image / v.patch);
  }
  return {f.family, v.hidden, v.layers, v.heads, v.ffn, v.eps, v.activation, v.image, v.patch, v.channels, v.position_ids};
}

Value* vision_pixels(ModelBuilder& m, const VisionTowerConfig& t, const char* batch_dim, int64_t max_batch) {
  m.b().set_scope("inputs");
  return m.b().input("pixel_values", m.config().dtype,
                     {m.dim(batch_dim, 1, max_batch), Dim(t.channels), Dim(t.image), Dim(t.image)});
}

std::vector<Value*> vision_hidden_states(ModelBuilder& m, const std::string& p, const VisionTowerConfig& t,
                                         Value* pixels, int64_t layers) {
  VisionConfig v;
  static_cast<TowerConfig&>(v) = {t.hidden, t.layers, t.heads, t.ffn, t.eps, t.activation};
  v.image = t.image, v.patch = t.patch, v.channels = t.channels, v.position_ids = t.position_ids;
  std::vector<Value*> states{vision_embeddings(m, p, v, PixelInputs{pixels}, t.family)};
  for (int64_t i = 0; i < layers; ++i)
    states.push_back(clip_layer(m, p + "encoder.layers." + std::to_string(i) + ".", v, states.back(), nullptr));
  return states;
}

Value* vision_last_hidden_state(ModelBuilder& m, const std::string& p, const VisionTowerConfig& v, Value* last) {
  return v.family == VisionFamily::Siglip ? encoder_layer_norm(m, p + "post_layernorm", last, v.eps) : last;
}

HFX_REGISTER_ARCH("clip", build_clip)
HFX_REGISTER_ARCH("clip_vision_model", build_clip_vision)
HFX_REGISTER_ARCH("clip_text_model", build_clip_text)
HFX_REGISTER_ARCH("siglip", build_siglip)
HFX_REGISTER_ARCH("siglip_vision_model", build_siglip_vision)
HFX_REGISTER_ARCH("siglip_text_model", build_siglip_text)
HFX_REGISTER_ARCH("siglip2", build_siglip2)
HFX_REGISTER_ARCH("siglip2_vision_model", build_siglip2_vision)
HFX_REGISTER_ARCH("siglip2_text_model", build_siglip2_text)

}  // namespace hfx
