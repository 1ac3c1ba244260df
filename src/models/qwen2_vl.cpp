// qwen2_vl (Qwen2VLForConditionalGeneration), qwen2_5_vl (Qwen2_5_VLForConditionalGeneration) and
// qwen3_vl (Qwen3VLForConditionalGeneration) and qwen3_vl_moe (its mixture-of-experts language model).
// vision_encoder: pixel_values [patches, channels * temporal_patch * patch * patch] (the image
// processor's flattened patches, each spatial_merge_size^2 block of an image consecutive) and
// image_grid_thw [images, 3] -> image_features [patches / merge^2, text hidden]: the 3-D patch
// convolution as a linear, blocks with 2-D (axial) RoPE whose attention stays inside one frame of
// one image (2.5: inside one window of merged patches, except on fullatt_block_indexes), the patch
// merger. transformers reorders 2.5's patches so that windows are contiguous and restores the order
// after the merger; a mask per window gives the same attention without moving rows.
// text_decoder: Qwen2 over inputs_embeds with multimodal RoPE: position_ids [3, batch, sequence]
// (temporal, height, width), as get_rope_index computes them; token_embedding as the others.
// Qwen3-VL: the patch convolution with a bias, a learned square position grid resampled to each
// image's grid (bilinear, align_corners), LayerNorm blocks, and deepstack mergers on listed blocks
// whose features the text decoder adds to the image tokens' states after its first layers; a Qwen3
// language model with interleaved multimodal RoPE.
// Checkpoints as the Hub's 4.x (flat text keys, model. / visual.) and transformers 5 save them.
#include <array>
#include <cmath>

#include "core/error.h"
#include "models/blocks.h"
#include "models/decoder.h"
#include "models/model_builder.h"
#include "models/moe.h"
#include "models/registry.h"
#include "models/seq2seq.h"
#include "models/vision_language.h"

namespace hfx {
namespace {

constexpr int64_t kMaxImages = 64;
// 16 images of 448 x 448 pixels (1024 patches each); --dim patches=MIN:MAX for more.
constexpr int64_t kMaxPatches = 16384;

// What differs between the two towers.
struct QwenVisionFamily {
  bool rms_norm;   // RMSNorm (2.5) or LayerNorm with bias (2, 3) in the blocks and merger
  bool gated_mlp;  // gate/up/down with biases (2.5) or fc1/fc2 (2; 3's linear_fc1/linear_fc2)
  bool windows;    // window attention outside fullatt_block_indexes (2.5)
  // Qwen3-VL: 2.5's size keys, a patch bias, learned positions, linear_fc* names, deepstack mergers.
  bool learned_positions = false;
};

struct QwenVisionConfig {
  QwenVisionFamily family{};
  int64_t width = 0, depth = 0, heads = 0, ffn = 0, out_hidden = 0;
  int64_t channels = 3, patch = 14, temporal = 2, merge = 2;
  std::string activation;
  double theta = 10000.0;
  int64_t window = 0;              // in merged patches (window_size / merge / patch)
  std::vector<bool> full_attention;  // per block (2.5); all true in 2 and 3
  int64_t position_side = 0;         // 3: the learned grid's side (sqrt(num_position_embeddings))
  std::vector<int64_t> deepstack;    // 3: the blocks whose output a deepstack merger takes, in order
  int64_t head_dim() const { return width / heads; }
  int64_t patch_dim() const { return channels * temporal * patch * patch; }
};

QwenVisionConfig parse_qwen_vision(const JsonConfig& v, const QwenVisionFamily& family) {
  QwenVisionConfig cfg;
  cfg.family = family;
  cfg.depth = v.positive("depth", 32);
  cfg.heads = v.positive("num_heads", 16);
  cfg.channels = v.positive(v.has("in_chans") && !v.has("in_channels") ? "in_chans" : "in_channels", 3);
  cfg.patch = v.positive("patch_size", 14);
  cfg.temporal = v.positive("temporal_patch_size", 2);
  cfg.merge = v.positive("spatial_merge_size", 2);
  if (const auto rope = v.object("rope_parameters")) cfg.theta = rope->number("rope_theta", 10000.0);
  if (family.learned_positions) {  // 3: hidden_size is the tower's width, out_hidden_size the merger's
    cfg.width = v.positive("hidden_size", 1152);
    cfg.ffn = v.positive("intermediate_size", 4304);
    cfg.out_hidden = v.positive("out_hidden_size", 3584);
    cfg.activation = v.string("hidden_act", "gelu_pytorch_tanh");
    cfg.full_attention.assign(static_cast<size_t>(cfg.depth), true);
    const int64_t positions = v.positive("num_position_embeddings", 2304);
    cfg.position_side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(positions))));
    if (cfg.position_side * cfg.position_side != positions)
      v.invalid("num_position_embeddings", str(positions, " is not a square grid"));
    cfg.deepstack = {8, 16, 24};
    if (v.has("deepstack_visual_indexes")) {
      if (!v.at("deepstack_visual_indexes").is_array()) v.invalid("deepstack_visual_indexes", "must list block indices");
      cfg.deepstack = v.at("deepstack_visual_indexes").get<std::vector<int64_t>>();
    }
    for (int64_t i : cfg.deepstack)
      if (i < 0 || i >= cfg.depth) v.invalid("deepstack_visual_indexes", str("block ", i, " is not one of the ", cfg.depth, " blocks"));
  } else if (family.gated_mlp) {  // 2.5: hidden_size is the tower's width, out_hidden_size the merger's
    cfg.width = v.positive("hidden_size", 3584);
    cfg.ffn = v.positive("intermediate_size", 3420);
    cfg.out_hidden = v.positive("out_hidden_size", 3584);
    cfg.activation = v.string("hidden_act", "silu");
    const int64_t window_size = v.positive("window_size", 112);
    cfg.window = window_size / cfg.merge / cfg.patch;
    if (cfg.window < 1) v.invalid("window_size", str("must span at least one merged patch (", cfg.merge * cfg.patch, " pixels)"));
    cfg.full_attention.assign(static_cast<size_t>(cfg.depth), false);
    std::vector<int64_t> full{7, 15, 23, 31};
    if (v.has("fullatt_block_indexes")) {
      if (!v.at("fullatt_block_indexes").is_array()) v.invalid("fullatt_block_indexes", "must list block indices");
      full = v.at("fullatt_block_indexes").get<std::vector<int64_t>>();
    }
    for (int64_t i : full)
      if (i >= 0 && i < cfg.depth) cfg.full_attention[static_cast<size_t>(i)] = true;
  } else {  // 2: embed_dim is the tower's width, hidden_size the merger's
    cfg.width = v.positive("embed_dim", 1280);
    cfg.ffn = v.scaled("mlp_ratio", 4.0, cfg.width);
    cfg.out_hidden = v.positive("hidden_size", 3584);
    cfg.activation = v.string("hidden_act", "quick_gelu");
    cfg.full_attention.assign(static_cast<size_t>(cfg.depth), true);
  }
  check_activation(v, "hidden_act", cfg.activation);
  if (cfg.width % cfg.heads != 0) v.invalid("num_heads", "must divide the tower's width");
  if (cfg.head_dim() % 4 != 0) v.invalid("num_heads", str("head size ", cfg.head_dim(), " must be a multiple of 4 (2-D RoPE)"));
  return cfg;
}

// Where each part of the checkpoint is: the Hub's 4.x and what transformers 5 saves (model.,
// visual.), or save_pretrained(save_original_format=False) (model.language_model., model.visual.).
struct QwenLayout {
  std::string language_model, head, visual;
};

QwenLayout qwen_layout(const Checkpoint& ckpt) {
  if (ckpt.find("model.language_model.embed_tokens.weight")) return {"model.language_model.", "lm_head", "model.visual."};
  return {"model.", "lm_head", "visual."};
}

// For each patch (row of pixel_values): a key shared by the patches of its frame (the frame's first
// row) and its row and column in the image's patch grid, from image_grid_thw as the image processor
// laid the patches out (frames of merge x merge blocks, row-major blocks).
struct PatchPlaces {
  Value* frame;
  Value* row;
  Value* column;
  Value* merged_columns;  // the image's columns of merge x merge blocks
  Value* image;           // the image's index in image_grid_thw
  Value* heights;         // [images]: each image's rows and columns of patches
  Value* widths;
};

PatchPlaces patch_places(Builder& b, Value* grid_thw, const Dim& patches, Value* count, int64_t merge) {
  auto column = [&](int64_t j) { return b.gather(grid_thw, b.const_i64({j}), 1); };  // [images]
  Value* t = column(0);
  Value* h = column(1);
  Value* w = column(2);
  Value* frame_size = b.mul(h, w);
  Value* ends = b.cumsum(b.mul(t, frame_size), 0);
  Value* starts = b.sub(ends, b.mul(t, frame_size));
  Value* n = b.range(b.const_i64({0}), count, b.const_i64({1}), patches);
  // The image of row n: how many images end at or before it.
  Value* ended = b.compare(OpKind::LessOrEqual, b.unsqueeze(ends, {1}), b.unsqueeze(n, {0}));
  Value* image = b.reduce(OpKind::ReduceSum, b.cast(ended, DType::I64), {0}, false);
  Value* size = b.gather(frame_size, image, 0);
  Value* local = b.sub(n, b.gather(starts, image, 0));
  Value* in_frame = b.mod(local, size);
  Value* frame = b.sub(n, in_frame);
  Value* block_area = b.const_i64({merge * merge});
  Value* mk = b.const_i64({merge});
  Value* block = b.div(in_frame, block_area);
  Value* inside = b.mod(in_frame, block_area);
  Value* blocks_per_row = b.div(b.gather(w, image, 0), mk);
  Value* row = b.add(b.mul(b.div(block, blocks_per_row), mk), b.div(inside, mk));
  Value* col = b.add(b.mul(b.mod(block, blocks_per_row), mk), b.mod(inside, mk));
  return {frame, row, col, blocks_per_row, image, h, w};
}

// [1, 1, patches, patches] bool: rows with equal keys attend to each other.
Value* same_key_mask(Builder& b, Value* key) {
  return b.unsqueeze(b.compare(OpKind::Equal, b.unsqueeze(key, {1}), b.unsqueeze(key, {0})), {0, 1});
}

// cos/sin [1, patches, head_dim] of each patch's angles [patches, head_dim / 2] repeated (rotate_half
// over the full head).
std::pair<Value*, Value*> rotary_tables(Builder& b, Value* angles) {
  Value* emb = b.unsqueeze(b.concat({angles, angles}, -1), {0});
  return {b.unary(OpKind::Cos, emb), b.unary(OpKind::Sin, emb)};
}

// The 2-D RoPE's cos/sin [1, patches, head_dim]: frequencies over head_dim / 2, the row's then
// the column's angles, the whole repeated (rotate_half over the full head).
std::pair<Value*, Value*> axial_rope(Builder& b, const QwenVisionConfig& cfg, const PatchPlaces& at) {
  const int64_t spatial = cfg.head_dim() / 2;
  std::vector<float> inv_freq;
  for (int64_t i = 0; i < spatial; i += 2)
    inv_freq.push_back(1.0f / std::pow(static_cast<float>(cfg.theta), static_cast<float>(i) / static_cast<float>(spatial)));
  Value* freq = b.const_f32(inv_freq, {static_cast<int64_t>(inv_freq.size())});
  auto angles = [&](Value* pos) { return b.mul(b.unsqueeze(b.cast(pos, DType::F32), {1}), freq); };
  return rotary_tables(b, b.concat({angles(at.row), angles(at.column)}, -1));
}

Value* vision_norm(ModelBuilder& m, const QwenVisionConfig& cfg, const std::string& module, Value* x) {
  m.b().set_scope(module);
  Value* w = m.weight(module + ".weight", {cfg.width});
  if (cfg.family.rms_norm) return m.b().rms_norm(x, w, 1e-6);
  return m.b().layer_norm(x, w, m.weight(module + ".bias", {cfg.width}), 1e-6);
}

// Qwen3-VL's position embedding of each patch: the learned square grid resampled to the patch's
// image grid as F.interpolate(bilinear, align_corners=True), in transformers' form: two taps per
// axis, floor(src) and the next (clamped), src = index * (side - 1) / max(size - 1, 1); the four
// cells' rows weighted by the product of their axes' weights, summed in float32.
Value* learned_positions(ModelBuilder& m, const QwenVisionConfig& cfg, const std::string& v, const PatchPlaces& at) {
  Builder& b = m.b();
  b.set_scope(v + "pos_embed");
  const int64_t side = cfg.position_side;
  Value* table = b.cast(m.weight(v + "pos_embed.weight", {side * side, cfg.width}), DType::F32);
  Value* one = b.const_i64({1});
  Value* last = b.const_i64({side - 1});
  Value* unit = b.scalar(1.0, DType::F32);
  struct Tap {
    Value* cell;
    Value* weight;
  };
  auto axis = [&](Value* index, Value* sizes) {
    Value* span = b.max(b.sub(b.gather(sizes, at.image, 0), one), one);
    Value* scaled = b.mul(index, last);
    Value* first = b.div(scaled, span);  // floor(src): exact in integers
    Value* src = b.div(b.cast(scaled, DType::F32), b.cast(span, DType::F32));
    Value* fraction = b.sub(src, b.cast(first, DType::F32));
    Value* beyond = b.sub(fraction, unit);
    return std::array<Tap, 2>{Tap{first, b.sub(unit, fraction)},
                              Tap{b.min(b.add(first, one), last), b.sub(unit, b.max(beyond, b.unary(OpKind::Neg, beyond)))}};
  };
  const auto rows = axis(at.row, at.heights);
  const auto columns = axis(at.column, at.widths);
  Value* sum = nullptr;
  for (const Tap& r : rows)
    for (const Tap& c : columns) {
      Value* cell = b.gather(table, b.add(b.mul(r.cell, b.const_i64({side})), c.cell), 0);  // [patches, width]
      Value* term = b.mul(cell, b.unsqueeze(b.mul(r.weight, c.weight), {1}));
      sum = sum ? b.add(sum, term) : term;
    }
  return b.unsqueeze(b.cast(sum, m.config().dtype), {0});
}

// Qwen3-VL's patch merger: LayerNorm over each patch (or, `postshuffle`, over each merged group of
// merge^2 patches: the deepstack mergers), the groups concatenated, linear_fc1, GELU, linear_fc2.
Value* qwen3_merger(ModelBuilder& m, const QwenVisionConfig& cfg, const std::string& p, Value* x, bool postshuffle,
                    int64_t text_hidden, const Dim& merged) {
  Builder& b = m.b();
  const int64_t merged_width = cfg.width * cfg.merge * cfg.merge;
  const int64_t norm_width = postshuffle ? merged_width : cfg.width;
  auto norm = [&](Value* v) {
    b.set_scope(p + "norm");
    return b.layer_norm(v, m.weight(p + "norm.weight", {norm_width}), m.weight(p + "norm.bias", {norm_width}), 1e-6);
  };
  if (!postshuffle) x = norm(x);
  x = b.reshape(x, {merged, Dim(merged_width)});
  if (postshuffle) x = norm(x);
  b.set_scope(p + "linear_fc1");
  x = b.linear(x, m.weight(p + "linear_fc1.weight", {merged_width, merged_width}), m.weight(p + "linear_fc1.bias", {merged_width}));
  x = b.gelu(x, GeluApproximation::None);
  b.set_scope(p + "linear_fc2");
  return b.linear(x, m.weight(p + "linear_fc2.weight", {text_hidden, merged_width}), m.weight(p + "linear_fc2.bias", {text_hidden}));
}

void check_merger_width(const Checkpoint& ckpt, const QwenVisionConfig& cfg, int64_t text_hidden) {
  if (cfg.out_hidden != text_hidden)
    ckpt.config().invalid("vision_config", str("the merger's output size (", cfg.out_hidden,
                                               ") must be the language model's hidden_size (", text_hidden, ")"));
}

// The 3-D patch convolution as a linear (3: with its bias): [patches, patch size] -> [patches, width].
Value* patch_embedding(ModelBuilder& m, const QwenVisionConfig& cfg, const std::string& v, Value* pixels) {
  Builder& b = m.b();
  b.set_scope(v + "patch_embed");
  Value* embed = m.view(m.weight(v + "patch_embed.proj.weight", {cfg.width, cfg.channels, cfg.temporal, cfg.patch, cfg.patch}),
                        {cfg.width, cfg.patch_dim()});
  return b.linear(pixels, embed, m.weight_if(cfg.family.learned_positions, v + "patch_embed.proj.bias", {cfg.width}));
}

struct TowerOutput {
  Value* features;   // [patches / merge^2, text hidden]
  Value* deepstack;  // 3: [deepstack mergers, patches / merge^2, text hidden]; null without them
};

// The blocks over x [1, patches, width] (attending where full_mask, or on 2.5's window blocks
// window_mask, allows: [1, 1, patches, patches] bool), the deepstack mergers on their blocks, and
// the merger.
TowerOutput blocks_and_merger(ModelBuilder& m, const QwenVisionConfig& cfg, const std::string& v, Value* x, Value* cos,
                              Value* sin, Value* full_mask, Value* window_mask, int64_t text_hidden, const Dim& merged) {
  Builder& b = m.b();
  const bool qwen3 = cfg.family.learned_positions;
  AttentionSpec attn{cfg.width, cfg.heads, cfg.heads, cfg.head_dim()};
  attn.qkv = "qkv";
  attn.o = "proj";
  attn.qkv_bias = attn.o_bias = true;
  MlpSpec mlp{cfg.width, cfg.ffn, true, cfg.activation};
  if (!cfg.family.gated_mlp) {
    mlp.gated = false;
    mlp.up = qwen3 ? "linear_fc1" : "fc1";
    mlp.down = qwen3 ? "linear_fc2" : "fc2";
  }
  std::vector<Value*> deepstack;
  for (int64_t i = 0; i < cfg.depth; ++i) {
    const std::string p = v + "blocks." + std::to_string(i) + ".";
    Value* mask = cfg.full_attention[static_cast<size_t>(i)] ? full_mask : window_mask;
    const AttentionContext ctx{cos, sin, mask, [](Value* k, Value* val) { return std::pair{k, val}; }, false};
    x = b.add(x, attention_block(m, p + "attn.", attn, vision_norm(m, cfg, p + "norm1", x), ctx));
    x = b.add(x, gated_mlp(m, p + "mlp.", mlp, vision_norm(m, cfg, p + "norm2", x)));
    for (size_t k = 0; k < cfg.deepstack.size(); ++k)
      if (cfg.deepstack[k] == i) {
        const std::string merger = v + "deepstack_merger_list." + std::to_string(k) + ".";
        deepstack.push_back(b.unsqueeze(qwen3_merger(m, cfg, merger, x, true, text_hidden, merged), {0}));
      }
  }
  if (qwen3) {
    Value* features = qwen3_merger(m, cfg, v + "merger.", x, false, text_hidden, merged);
    // in deepstack_visual_indexes' order
    if (deepstack.empty()) return {features, nullptr};
    return {features, deepstack.size() == 1 ? deepstack.front() : b.concat(deepstack, 0)};
  }
  const std::string merger = v + "merger.";
  x = vision_norm(m, cfg, merger + "ln_q", x);
  b.set_scope(merger + "mlp");
  const int64_t merged_width = cfg.width * cfg.merge * cfg.merge;
  x = b.reshape(x, {merged, Dim(merged_width)});
  x = b.linear(x, m.weight(merger + "mlp.0.weight", {merged_width, merged_width}), m.weight(merger + "mlp.0.bias", {merged_width}));
  x = b.gelu(x, GeluApproximation::None);
  x = b.linear(x, m.weight(merger + "mlp.2.weight", {text_hidden, merged_width}), m.weight(merger + "mlp.2.bias", {text_hidden}));
  return {x, nullptr};
}

std::unique_ptr<Graph> qwen_vision_encoder(const Checkpoint& ckpt, const ExportConfig& config, const QwenVisionConfig& cfg,
                                           const QwenLayout& at, int64_t text_hidden, std::set<std::string>& dims) {
  check_merger_width(ckpt, cfg, text_hidden);
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  b.set_scope("inputs");
  const Dim patches = m.dim("patches", cfg.merge * cfg.merge, kMaxPatches);
  Value* pixels = b.input("pixel_values", config.dtype, {patches, Dim(cfg.patch_dim())});
  Value* grid = b.input("image_grid_thw", DType::I64, {m.dim("images", 1, kMaxImages), Dim(3)});
  const std::string v = at.visual;

  b.set_scope(v + "rotary_pos_emb");
  Value* count = b.gather(b.shape_of(pixels), b.const_i64({0}), 0);  // a scalar: Range's limit
  const PatchPlaces places = patch_places(b, grid, patches, count, cfg.merge);
  const auto [cos, sin] = axial_rope(b, cfg, places);
  Value* frame_mask = same_key_mask(b, places.frame);
  Value* window_mask = nullptr;
  if (cfg.family.windows) {
    // The frame's first row + the window's index in the frame (fewer windows than patches in a
    // frame: the keys of two frames never meet, and stay small for runtimes that compute in int32).
    Value* span = b.const_i64({cfg.merge * cfg.window});  // a window's side in patches
    Value* windows_per_row = b.div(b.add(places.merged_columns, b.const_i64({cfg.window - 1})), b.const_i64({cfg.window}));
    Value* window = b.add(b.mul(b.div(places.row, span), windows_per_row), b.div(places.column, span));
    window_mask = same_key_mask(b, b.add(places.frame, window));
  }

  Value* x = b.unsqueeze(patch_embedding(m, cfg, v, pixels), {0});  // [1, patches, width]: one sequence
  if (cfg.family.learned_positions) x = b.add(x, learned_positions(m, cfg, v, places));
  const Dim merged = m.graph().dim(dim_floordiv(patches, cfg.merge * cfg.merge));
  const TowerOutput out = blocks_and_merger(m, cfg, v, x, cos, sin, frame_mask, window_mask, text_hidden, merged);
  b.output(out.features, "image_features");
  if (out.deepstack) b.output(out.deepstack, "deepstack_features");
  m.tolerate_outside({v});  // the language model's
  return finish_component(m, "BaseModelOutputWithPooling", cfg.depth, dims);
}

// Tolerates the tower's tensors under the modules `unused` (another part of the split reads them).
void tolerate_tower_parts(ModelBuilder& m, const Checkpoint& ckpt, const std::string& v, const std::vector<std::string>& unused) {
  m.tolerate_outside({v});
  for (const TensorView* t : ckpt.tensors())
    for (const std::string& module : unused)
      if (t->name.starts_with(v + module)) m.tolerate(t->name);
}

// OpenVINO GenAI's split of the tower, which its VLMPipeline runs with what it computes on the
// host (the RoPE table, attention masks, 2.5's window order, 3's position taps and their sum):
// vision_embeddings (hidden_states [patches, patch size] -> the patch embedding), 3's
// vision_embeddings_pos (input [4, patches] grid cells -> their rows [4, patches, width]) and
// vision_embeddings_merger (the blocks and mergers over hidden_states, attention_mask and
// rotary_pos_emb; 2.5: window_attention_mask and window_index, the merged patches in window order).
std::vector<Component> openvino_genai_tower(const Checkpoint& ckpt, const ExportConfig& config, const QwenVisionConfig& cfg,
                                            const QwenLayout& at, int64_t text_hidden, std::set<std::string>& dims) {
  check_merger_width(ckpt, cfg, text_hidden);
  const std::string v = at.visual;
  std::vector<Component> parts;
  {
    ModelBuilder m(ckpt, config);
    Builder& b = m.b();
    b.set_scope("inputs");
    Value* pixels = b.input("hidden_states", config.dtype, {m.dim("patches", cfg.merge * cfg.merge, kMaxPatches), Dim(cfg.patch_dim())});
    b.output(patch_embedding(m, cfg, v, pixels), "last_hidden_state");
    tolerate_tower_parts(m, ckpt, v, {"blocks.", "merger.", "deepstack_merger_list.", "pos_embed."});
    parts.push_back({Role::VisionEmbeddings, finish_component(m, "BaseModelOutput", 0, dims)});
  }
  if (cfg.family.learned_positions) {
    ModelBuilder m(ckpt, config);
    Builder& b = m.b();
    b.set_scope("inputs");
    Value* cells = b.input("input", DType::I64, {Dim(int64_t{4}), m.dim("patches", cfg.merge * cfg.merge, kMaxPatches)});
    b.set_scope(v + "pos_embed");
    const int64_t side = cfg.position_side;
    Value* table = b.cast(m.weight(v + "pos_embed.weight", {side * side, cfg.width}), DType::F32);
    b.output(b.gather(table, cells, 0), "last_hidden_state");
    tolerate_tower_parts(m, ckpt, v, {"blocks.", "merger.", "deepstack_merger_list.", "patch_embed."});
    parts.push_back({Role::VisionEmbeddingsPos, finish_component(m, "BaseModelOutput", 0, dims)});
  }
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  b.set_scope("inputs");
  const Dim patches = m.dim("patches", cfg.merge * cfg.merge, kMaxPatches);
  const Dim merged = m.graph().dim(dim_floordiv(patches, cfg.merge * cfg.merge));
  Value* hidden = b.input("hidden_states", config.dtype, {patches, Dim(cfg.width)});
  Value* full = b.input("attention_mask", DType::F32, {Dim(int64_t{1}), patches, patches});
  Value* window = cfg.family.windows ? b.input("window_attention_mask", DType::F32, {Dim(int64_t{1}), patches, patches}) : nullptr;
  Value* order = cfg.family.windows ? b.input("window_index", DType::I64, {merged}) : nullptr;
  Value* rotary = b.input("rotary_pos_emb", DType::F32, {patches, Dim(cfg.head_dim() / 2)});
  b.set_scope(v + "rotary_pos_emb");
  // The host's masks are additive (0 or -inf): attend where 0.
  auto attended = [&](Value* additive) { return b.unsqueeze(b.compare(OpKind::Equal, additive, b.scalar(0.0, DType::F32)), {1}); };
  // Rows by merged patch in window order (each merge^2 rows move together).
  auto in_window_order = [&](Value* rows) {
    const Dim width = rows->shape[1];
    Value* grouped = b.reshape(rows, {merged, Dim(width.value() * cfg.merge * cfg.merge)});
    return b.reshape(b.gather(grouped, order, 0), {patches, width});
  };
  if (order) {
    hidden = in_window_order(hidden);
    rotary = in_window_order(rotary);
  }
  const auto [cos, sin] = rotary_tables(b, rotary);
  const TowerOutput out = blocks_and_merger(m, cfg, v, b.unsqueeze(hidden, {0}), cos, sin, attended(full),
                                            window ? attended(window) : nullptr, text_hidden, merged);
  Value* features = out.features;
  if (order) {  // back to the patches' order: the result's row j is merged patch order[j]
    b.set_scope(v + "merger");
    Value* rows = b.range(b.const_i64({0}), b.gather(b.shape_of(order), b.const_i64({0}), 0), b.const_i64({1}), merged);
    features = b.gather(features, b.scatter_elements(rows, order, rows, 0), 0);
  }
  b.output(features, "last_hidden_state");
  if (out.deepstack) b.output(out.deepstack, "deepstack_feature_lists");
  tolerate_tower_parts(m, ckpt, v, {"patch_embed.", "pos_embed."});
  parts.push_back({Role::VisionEmbeddingsMerger, finish_component(m, "BaseModelOutputWithPooling", cfg.depth, dims)});
  return parts;
}

// The language model: Qwen2 (Qwen3 for 3) whose RoPE takes [3, batch, sequence] positions, with
// transformers' default mrope_section ([16, 24, 24]; 3: [24, 20, 20], interleaved).
class QwenVLTextDecoder : public Decoder {
 public:
  QwenVLTextDecoder(DecoderDefaults defaults, std::array<int64_t, 3> section, bool interleaved, bool moe = false)
      : Decoder(defaults), section_(section), interleaved_(interleaved), moe_(moe) {}
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    if (moe_) {  // Qwen3-VL-MoE: softmax top-k, always renormalised, on decoder_sparse_step's layers
      MoeSpec moe = parse_moe(c, cfg, c.positive("moe_intermediate_size", 1408), 4);
      moe.layout = MoeSpec::Layout::FusedConcatIn;
      cfg.moe = moe;
      cfg.layer_moe = sparse_layers(c, cfg.layers);
    }
    RopeConfig& rope = cfg.ropes.front();
    if (rope.mrope_section.empty()) rope.mrope_section.assign(section_.begin(), section_.end());
    rope.mrope_interleaved = interleaved_;  // 3 interleaves whatever mrope_interleaved says
    const auto half = static_cast<int64_t>(rope.inv_freq.size());
    if (rope.mrope_section[0] + rope.mrope_section[1] + rope.mrope_section[2] != half)
      c.invalid("rope_parameters", str("mrope_section (default [", section_[0], ", ", section_[1], ", ", section_[2],
                                       "]) must sum to ", half, " (head size / 2)"));
    return cfg;
  }
  // The experts as the Hub stores them ([E, H, 2I]), or as transformers' modules hold them
  // ([E, 2I, H]: save_pretrained(save_original_format=False)); a square one reads as the Hub's.
  Value* mlp(DecoderGraph& g, int64_t i, const std::string& prefix, Value* x) const override {
    if (!g.cfg.moe || !g.cfg.layer_moe[static_cast<size_t>(i)]) return Decoder::mlp(g, i, prefix, x);
    MoeSpec spec = *g.cfg.moe;
    const std::vector<int64_t> shape = g.m.stored_shape(prefix + spec.fused_gate_up);
    if (shape.size() == 3 && shape[1] == 2 * spec.intermediate && shape[2] == spec.hidden && spec.hidden != 2 * spec.intermediate)
      spec.layout = MoeSpec::Layout::FusedConcat;
    return moe_block(g.m, prefix, spec, x);
  }

 private:
  std::array<int64_t, 3> section_;
  bool interleaved_, moe_;
};

constexpr DecoderDefaults kQwenVLText{
    .max_position_embeddings = 32768,
    .attention_bias = AttentionBias::QkvAlways,
    .window = WindowRule::LayerTypes,
    .rope_theta = 1000000.0,
};

// Qwen3VLTextConfig: a Qwen3 decoder without sliding windows.
constexpr DecoderDefaults kQwen3VLText{
    .max_position_embeddings = 128000,
    .head_dim = 128,
    .attention_bias = AttentionBias::FromConfig,
    .qk_norm = true,
    .rope_theta = 500000.0,
};

// Qwen3VLMoeTextConfig: the same with mixture-of-experts layers (head_dim hidden / heads).
constexpr DecoderDefaults kQwen3VLMoeText{
    .max_position_embeddings = 128000,
    .attention_bias = AttentionBias::FromConfig,
    .qk_norm = true,
    .rope_theta = 500000.0,
    .output_type = "MoeCausalLMOutputWithPast",
};

std::unique_ptr<Decoder> make_qwen_vl_text() { return std::make_unique<QwenVLTextDecoder>(kQwenVLText, std::array<int64_t, 3>{16, 24, 24}, false); }
std::unique_ptr<Decoder> make_qwen3_vl_text() { return std::make_unique<QwenVLTextDecoder>(kQwen3VLText, std::array<int64_t, 3>{24, 20, 20}, true); }
const bool registered_qwen2_vl_text = register_decoder("qwen2_vl_text", make_qwen_vl_text);
const bool registered_qwen2_5_vl_text = register_decoder("qwen2_5_vl_text", make_qwen_vl_text);
std::unique_ptr<Decoder> make_qwen3_vl_moe_text() {
  return std::make_unique<QwenVLTextDecoder>(kQwen3VLMoeText, std::array<int64_t, 3>{24, 20, 20}, true, true);
}
const bool registered_qwen3_vl_text = register_decoder("qwen3_vl_text", make_qwen3_vl_text);
const bool registered_qwen3_vl_moe_text = register_decoder("qwen3_vl_moe_text", make_qwen3_vl_moe_text);

ExportModel build_qwen_vl(const Checkpoint& ckpt, const ExportConfig& config, const char* model_type,
                          const QwenVisionFamily& family, const char* output_type) {
  const JsonConfig& c = ckpt.config();
  const auto vision_config = c.object("vision_config");
  if (!vision_config) c.invalid("vision_config", str(model_type, " needs the vision tower's vision_config"));
  const QwenVisionConfig vision = parse_qwen_vision(*vision_config, family);
  const QwenLayout at = qwen_layout(ckpt);
  VisionLanguageSpec spec;
  spec.model_type = model_type;
  spec.text_model_type = std::string(model_type) + "_text";
  spec.language_model = at.language_model;
  spec.head = at.head;
  spec.vision_encoder = [&](int64_t text_hidden, std::set<std::string>& dims) {
    return qwen_vision_encoder(ckpt, config, vision, at, text_hidden, dims);
  };
  spec.openvino_genai_tower = [&](int64_t text_hidden, std::set<std::string>& dims) {
    return openvino_genai_tower(ckpt, config, vision, at, text_hidden, dims);
  };
  spec.image_token_id = c.integer("image_token_id", 151655);
  spec.features_in_embedding = true;
  spec.features_per_image = 0;  // image_grid_thw.prod() / merge^2: varies with the image's size
  spec.image_tokens_extra = {{"rope_index", "qwen2_vl"},
                             {"spatial_merge_size", vision.merge},
                             {"vision_start_token_id", c.integer("vision_start_token_id", 151652)}};
  spec.output_type = output_type;
  spec.deepstack_layers = static_cast<int64_t>(vision.deepstack.size());
  return build_vision_language(ckpt, config, spec);
}

ExportModel build_qwen2_vl(const Checkpoint& ckpt, const ExportConfig& config) {
  return build_qwen_vl(ckpt, config, "qwen2_vl", {false, false, false},
                       "transformers.modeling_outputs.MultimodalCausalLMOutputWithPast");
}

ExportModel build_qwen2_5_vl(const Checkpoint& ckpt, const ExportConfig& config) {
  return build_qwen_vl(ckpt, config, "qwen2_5_vl", {true, true, true},
                       "transformers.modeling_outputs.MultimodalCausalLMOutputWithPast");
}

constexpr QwenVisionFamily kQwen3Vision{false, false, false, true};

ExportModel build_qwen3_vl(const Checkpoint& ckpt, const ExportConfig& config) {
  return build_qwen_vl(ckpt, config, "qwen3_vl", kQwen3Vision, "transformers.modeling_outputs.MultimodalCausalLMOutputWithPast");
}

ExportModel build_qwen3_vl_moe(const Checkpoint& ckpt, const ExportConfig& config) {
  return build_qwen_vl(ckpt, config, "qwen3_vl_moe", kQwen3Vision,
                       "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe.Qwen3VLMoeCausalLMOutputWithPast");
}

}  // namespace

HFX_REGISTER_ARCH("qwen2_vl", build_qwen2_vl)
HFX_REGISTER_ARCH("qwen2_5_vl", build_qwen2_5_vl)
HFX_REGISTER_ARCH("qwen3_vl", build_qwen3_vl)
HFX_REGISTER_ARCH("qwen3_vl_moe", build_qwen3_vl_moe)

}  // namespace hfx
