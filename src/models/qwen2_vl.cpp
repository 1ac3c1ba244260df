// qwen2_vl (Qwen2VLForConditionalGeneration) and qwen2_5_vl (Qwen2_5_VLForConditionalGeneration).
// vision_encoder: pixel_values [patches, channels * temporal_patch * patch * patch] (the image
// processor's flattened patches, each spatial_merge_size^2 block of an image consecutive) and
// image_grid_thw [images, 3] -> image_features [patches / merge^2, text hidden]: the 3-D patch
// convolution as a linear, blocks with 2-D (axial) RoPE whose attention stays inside one frame of
// one image (2.5: inside one window of merged patches, except on fullatt_block_indexes), the patch
// merger. transformers reorders 2.5's patches so that windows are contiguous and restores the order
// after the merger; a mask per window gives the same attention without moving rows.
// text_decoder: Qwen2 over inputs_embeds with multimodal RoPE: position_ids [3, batch, sequence]
// (temporal, height, width), as get_rope_index computes them; token_embedding as the others.
// Checkpoints as the Hub's 4.x (flat text keys, model. / visual.) and transformers 5 save them.
#include <cmath>

#include "core/error.h"
#include "models/blocks.h"
#include "models/decoder.h"
#include "models/model_builder.h"
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
  bool rms_norm;   // RMSNorm (2.5) or LayerNorm with bias (2) in the blocks and merger
  bool gated_mlp;  // gate/up/down with biases (2.5) or fc1/fc2 (2)
  bool windows;    // window attention outside fullatt_block_indexes (2.5)
};

struct QwenVisionConfig {
  QwenVisionFamily family{};
  int64_t width = 0, depth = 0, heads = 0, ffn = 0, out_hidden = 0;
  int64_t channels = 3, patch = 14, temporal = 2, merge = 2;
  std::string activation;
  double theta = 10000.0;
  int64_t window = 0;              // in merged patches (window_size / merge / patch)
  std::vector<bool> full_attention;  // per block (2.5); all true in 2
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
  if (family.gated_mlp) {  // 2.5: hidden_size is the tower's width, out_hidden_size the merger's
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
    cfg.ffn = static_cast<int64_t>(static_cast<double>(cfg.width) * v.number("mlp_ratio", 4.0));
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
  return {frame, row, col, blocks_per_row};
}

// [1, 1, patches, patches] bool: rows with equal keys attend to each other.
Value* same_key_mask(Builder& b, Value* key) {
  return b.unsqueeze(b.compare(OpKind::Equal, b.unsqueeze(key, {1}), b.unsqueeze(key, {0})), {0, 1});
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
  Value* half = b.concat({angles(at.row), angles(at.column)}, -1);
  Value* emb = b.unsqueeze(b.concat({half, half}, -1), {0});
  return {b.unary(OpKind::Cos, emb), b.unary(OpKind::Sin, emb)};
}

Value* vision_norm(ModelBuilder& m, const QwenVisionConfig& cfg, const std::string& module, Value* x) {
  m.b().set_scope(module);
  Value* w = m.weight(module + ".weight", {cfg.width});
  if (cfg.family.rms_norm) return m.b().rms_norm(x, w, 1e-6);
  return m.b().layer_norm(x, w, m.weight(module + ".bias", {cfg.width}), 1e-6);
}

std::unique_ptr<Graph> qwen_vision_encoder(const Checkpoint& ckpt, const ExportConfig& config, const QwenVisionConfig& cfg,
                                           const QwenLayout& at, int64_t text_hidden, std::set<std::string>& dims) {
  if (cfg.out_hidden != text_hidden)
    ckpt.config().invalid("vision_config", str("the merger's output size (", cfg.out_hidden,
                                               ") must be the language model's hidden_size (", text_hidden, ")"));
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

  b.set_scope(v + "patch_embed");
  Value* embed = m.view(m.weight(v + "patch_embed.proj.weight", {cfg.width, cfg.channels, cfg.temporal, cfg.patch, cfg.patch}),
                        {cfg.width, cfg.patch_dim()});
  Value* x = b.unsqueeze(b.linear(pixels, embed), {0});  // [1, patches, width]: one sequence

  AttentionSpec attn{cfg.width, cfg.heads, cfg.heads, cfg.head_dim()};
  attn.qkv = "qkv";
  attn.o = "proj";
  attn.qkv_bias = attn.o_bias = true;
  MlpSpec mlp{cfg.width, cfg.ffn, true, cfg.activation};
  if (!cfg.family.gated_mlp) {
    mlp.gated = false;
    mlp.up = "fc1";
    mlp.down = "fc2";
  }
  for (int64_t i = 0; i < cfg.depth; ++i) {
    const std::string p = v + "blocks." + std::to_string(i) + ".";
    Value* mask = cfg.full_attention[static_cast<size_t>(i)] ? frame_mask : window_mask;
    const AttentionContext ctx{cos, sin, mask, [](Value* k, Value* val) { return std::pair{k, val}; }, false};
    x = b.add(x, attention_block(m, p + "attn.", attn, vision_norm(m, cfg, p + "norm1", x), ctx));
    x = b.add(x, gated_mlp(m, p + "mlp.", mlp, vision_norm(m, cfg, p + "norm2", x)));
  }

  const std::string merger = v + "merger.";
  x = vision_norm(m, cfg, merger + "ln_q", x);
  b.set_scope(merger + "mlp");
  const int64_t merged_width = cfg.width * cfg.merge * cfg.merge;
  x = b.reshape(x, {m.graph().dim(dim_floordiv(patches, cfg.merge * cfg.merge)), Dim(merged_width)});
  x = b.linear(x, m.weight(merger + "mlp.0.weight", {merged_width, merged_width}), m.weight(merger + "mlp.0.bias", {merged_width}));
  x = b.gelu(x, GeluApproximation::None);
  x = b.linear(x, m.weight(merger + "mlp.2.weight", {text_hidden, merged_width}), m.weight(merger + "mlp.2.bias", {text_hidden}));
  b.output(x, "image_features");
  m.tolerate_outside({v});  // the language model's
  return finish_component(m, "BaseModelOutputWithPooling", cfg.depth, dims);
}

// The language model: Qwen2 whose RoPE takes [3, batch, sequence] positions (mrope_section
// defaults to transformers' [16, 24, 24]).
class QwenVLTextDecoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    RopeConfig& rope = cfg.ropes.front();
    if (rope.mrope_section.empty()) rope.mrope_section = {16, 24, 24};
    const auto half = static_cast<int64_t>(rope.inv_freq.size());
    if (rope.mrope_section[0] + rope.mrope_section[1] + rope.mrope_section[2] != half)
      c.invalid("rope_parameters", str("mrope_section (default [16, 24, 24]) must sum to ", half, " (head size / 2)"));
    return cfg;
  }
};

constexpr DecoderDefaults kQwenVLText{
    .max_position_embeddings = 32768,
    .attention_bias = AttentionBias::QkvAlways,
    .window = WindowRule::LayerTypes,
    .rope_theta = 1000000.0,
};

std::unique_ptr<Decoder> make_qwen_vl_text() { return std::make_unique<QwenVLTextDecoder>(kQwenVLText); }
const bool registered_qwen2_vl_text = register_decoder("qwen2_vl_text", make_qwen_vl_text);
const bool registered_qwen2_5_vl_text = register_decoder("qwen2_5_vl_text", make_qwen_vl_text);

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
  spec.image_token_id = c.integer("image_token_id", 151655);
  spec.features_in_embedding = true;
  spec.features_per_image = 0;  // image_grid_thw.prod() / merge^2: varies with the image's size
  spec.image_tokens_extra = {{"rope_index", "qwen2_vl"},
                             {"spatial_merge_size", vision.merge},
                             {"vision_start_token_id", c.integer("vision_start_token_id", 151652)}};
  spec.output_type = output_type;
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

}  // namespace

HFX_REGISTER_ARCH("qwen2_vl", build_qwen2_vl)
HFX_REGISTER_ARCH("qwen2_5_vl", build_qwen2_5_vl)

}  // namespace hfx
