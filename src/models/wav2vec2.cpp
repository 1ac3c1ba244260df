// wav2vec2 (Wav2Vec2ForCTC: automatic-speech-recognition's CTC logits; Wav2Vec2Model:
// feature-extraction's last_hidden_state). Raw 16 kHz samples input_values [batch, samples] through
// the convolutional feature encoder (conv_dim / conv_kernel / conv_stride, no padding; a GroupNorm
// of one group per channel after the first convolution ("group"), or a LayerNorm over the channels
// after each ("layer"); then the activation), the feature projection (LayerNorm, Linear), a grouped
// convolution as relative positions (weight-normalised over its kernel positions, as many frames
// out as in, GELU) added to the frames, and transformer layers: post-norm after a LayerNorm
// over the sum (do_stable_layer_norm false) or pre-norm closed by a LayerNorm (true); the CTC head
// is a Linear. No attention_mask: every sample counts (the base checkpoints' feature extractor
// returns none; pad batches with zeros, as it does).
#include <algorithm>
#include <set>

#include "core/error.h"
#include "models/blocks.h"
#include "models/decoder.h"
#include "models/encoder.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/seq2seq.h"

namespace hfx {
namespace {

constexpr int64_t kMaxBatch = 16;
constexpr int64_t kMaxSamples = 30 * 16000;  // 30 s at 16 kHz (--dim samples=MIN:MAX for more)
constexpr double kGroupNormEps = 1e-5;       // nn.GroupNorm's default: the config has no key for it

struct Wav2Vec2Config {
  std::vector<std::string> architectures;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, ffn = 0, positions_kernel = 0, positions_groups = 0;
  std::vector<int64_t> conv_dim, conv_kernel, conv_stride;
  bool conv_bias = false, group_norm = true, stable = false;
  double eps = 1e-5;
  std::string activation, feature_activation;
};

std::vector<int64_t> positive_list(const JsonConfig& c, const char* key, std::vector<int64_t> fallback) {
  if (!c.has(key)) return fallback;
  const nlohmann::json& j = c.json().at(key);
  if (!j.is_array() || j.empty()) c.invalid(key, "must be a non-empty list of positive integers");
  std::vector<int64_t> out;
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() <= 0) c.invalid(key, "must be a non-empty list of positive integers");
    out.push_back(v.get<int64_t>());
  }
  return out;
}

Wav2Vec2Config parse_wav2vec2(const JsonConfig& c) {
  Wav2Vec2Config cfg;
  cfg.architectures = architectures(c);
  cfg.vocab = c.positive("vocab_size", 32);
  cfg.hidden = c.positive("hidden_size", 768);
  cfg.layers = c.positive("num_hidden_layers", 12);
  cfg.heads = c.positive("num_attention_heads", 12);
  if (cfg.hidden % cfg.heads != 0) c.invalid("num_attention_heads", "must divide hidden_size");
  cfg.ffn = c.positive("intermediate_size", 3072);
  cfg.conv_dim = positive_list(c, "conv_dim", {512, 512, 512, 512, 512, 512, 512});
  cfg.conv_kernel = positive_list(c, "conv_kernel", {10, 3, 3, 3, 3, 2, 2});
  cfg.conv_stride = positive_list(c, "conv_stride", {5, 2, 2, 2, 2, 2, 2});
  if (cfg.conv_kernel.size() != cfg.conv_dim.size() || cfg.conv_stride.size() != cfg.conv_dim.size())
    c.invalid("conv_kernel", "conv_dim, conv_kernel and conv_stride must have one entry per convolution");
  cfg.conv_bias = c.boolean("conv_bias", false);
  const std::string norm = c.string("feat_extract_norm", "group");
  if (norm != "group" && norm != "layer") c.invalid("feat_extract_norm", "must be \"group\" or \"layer\"");
  cfg.group_norm = norm == "group";
  cfg.stable = c.boolean("do_stable_layer_norm", false);
  cfg.positions_kernel = c.positive("num_conv_pos_embeddings", 128);
  cfg.positions_groups = c.positive("num_conv_pos_embedding_groups", 16);
  if (cfg.hidden % cfg.positions_groups != 0) c.invalid("num_conv_pos_embedding_groups", "must divide hidden_size");
  cfg.eps = c.number("layer_norm_eps", 1e-5);
  cfg.activation = c.string("hidden_act", "gelu");
  check_activation(c, "hidden_act", cfg.activation);
  cfg.feature_activation = c.string("feat_extract_activation", "gelu");
  check_activation(c, "feat_extract_activation", cfg.feature_activation);
  for (const char* key : {"add_adapter", "use_weighted_layer_sum"})
    if (c.boolean(key, false)) c.invalid(key, "is not supported");
  return cfg;
}

// The fewest samples that make one frame: the receptive field of the convolutions.
int64_t receptive_field(const Wav2Vec2Config& cfg) {
  int64_t field = cfg.conv_kernel[0], hop = cfg.conv_stride[0];
  for (size_t i = 1; i < cfg.conv_kernel.size(); ++i) {
    field += (cfg.conv_kernel[i] - 1) * hop;
    hop *= cfg.conv_stride[i];
  }
  return field;
}

Task wav2vec2_task(const ExportConfig& config, const Wav2Vec2Config& cfg) {
  const bool ctc = std::find(cfg.architectures.begin(), cfg.architectures.end(), "Wav2Vec2ForCTC") != cfg.architectures.end();
  const Task task = config.task.empty() ? (ctc ? Task::SpeechRecognition : Task::FeatureExtraction) : *task_named(config.task);
  if (task != Task::SpeechRecognition && task != Task::FeatureExtraction)
    fail("task: wav2vec2 exports automatic-speech-recognition (CTC logits) or feature-extraction, not ", task_name(task));
  if (config.generation.enabled)
    fail("task: wav2vec2 is an encoder with a CTC head: it has no decode loop (--for-generation)");
  return task;
}

// Per channel over time ([batch, channels, time]): GroupNorm with one group per channel.
Value* channel_norm(ModelBuilder& m, const std::string& module, int64_t channels, Value* x) {
  Builder& b = m.b();
  b.set_scope(module);
  Value* centred = b.sub(x, b.reduce(OpKind::ReduceMean, x, {2}, true));
  Value* variance = b.reduce(OpKind::ReduceMean, b.mul(centred, centred), {2}, true);
  Value* scale = b.unary(OpKind::Sqrt, b.add(variance, b.scalar(kGroupNormEps, x->dtype)));
  Value* weight = b.reshape(m.weight(module + ".weight", {channels}), {Dim(channels), Dim(int64_t{1})});
  Value* bias = b.reshape(m.weight(module + ".bias", {channels}), {Dim(channels), Dim(int64_t{1})});
  return b.add(b.mul(b.div(centred, scale), weight), bias);
}

// The convolutional feature encoder: [batch, samples] -> [batch, frames, conv_dim[-1]].
Value* feature_encoder(ModelBuilder& m, const std::string& p, const Wav2Vec2Config& cfg, Value* samples) {
  Builder& b = m.b();
  Value* x = b.unsqueeze(samples, {1});
  int64_t channels = 1;
  for (size_t i = 0; i < cfg.conv_dim.size(); ++i) {
    const std::string layer = p + "conv_layers." + std::to_string(i);
    const int64_t out = cfg.conv_dim[i];
    b.set_scope(layer + ".conv");
    Value* bias = m.weight_if(cfg.conv_bias, layer + ".conv.bias", {out});
    x = b.conv(x, m.weight(layer + ".conv.weight", {out, channels, cfg.conv_kernel[i]}), bias, {cfg.conv_stride[i]}, {0}, {1});
    if (cfg.group_norm && i == 0) {
      x = channel_norm(m, layer + ".layer_norm", out, x);
    } else if (!cfg.group_norm) {
      x = b.transpose(encoder_layer_norm(m, layer + ".layer_norm", b.transpose(x, {0, 2, 1}), cfg.eps), {0, 2, 1});
    }
    x = activation(b, cfg.feature_activation, x);
    channels = out;
  }
  return b.transpose(x, {0, 2, 1});
}

// The relative positions: a grouped convolution over the frames, its weight g * v / |v| (the norm
// over every dim but the kernel's), as the checkpoint stores it (weight_g / weight_v, or torch's
// parametrizations original0 / original1), then GELU.
Value* positional_conv(ModelBuilder& m, const std::string& module, const Wav2Vec2Config& cfg, Value* x) {
  Builder& b = m.b();
  b.set_scope(module);
  const int64_t k = cfg.positions_kernel, per_group = cfg.hidden / cfg.positions_groups;
  const bool parametrized = m.has(module + ".parametrizations.weight.original0");
  const std::string g_name = parametrized ? module + ".parametrizations.weight.original0" : module + ".weight_g";
  const std::string v_name = parametrized ? module + ".parametrizations.weight.original1" : module + ".weight_v";
  Value* v = m.weight(v_name, {cfg.hidden, per_group, k});
  Value* norm = b.unary(OpKind::Sqrt, b.reduce(OpKind::ReduceSum, b.mul(v, v), {0, 1}, true));
  Value* weight = b.mul(v, b.div(m.weight(g_name, {1, 1, k}), norm));
  // k / 2 frames of zeros before and after, less the last for an even kernel (whose padding makes
  // one frame too many, which transformers drops): as many frames out as in.
  Value* frames = b.pad(b.transpose(x, {0, 2, 1}), {0, 0, k / 2}, {0, 0, k / 2 - (k % 2 == 0 ? 1 : 0)});
  Value* y = b.conv(frames, weight, m.weight(module + ".bias", {cfg.hidden}), {1}, {0}, {1}, cfg.positions_groups);
  return b.transpose(activation(b, "gelu", y), {0, 2, 1});
}

Value* encoder_layer(ModelBuilder& m, const std::string& p, const Wav2Vec2Config& cfg, Value* x) {
  Builder& b = m.b();
  const AttentionSpec attention = encoder_attention(cfg.hidden, cfg.heads, "out_proj");
  const AttentionContext ctx = encoder_attention_context(nullptr);
  const MlpSpec mlp = encoder_mlp(cfg.hidden, cfg.ffn, cfg.activation, "feed_forward.intermediate_dense",
                                  "feed_forward.output_dense");
  if (cfg.stable) {
    x = b.add(x, attention_block(m, p + "attention.", attention, encoder_layer_norm(m, p + "layer_norm", x, cfg.eps), ctx));
    return b.add(x, gated_mlp(m, p, mlp, encoder_layer_norm(m, p + "final_layer_norm", x, cfg.eps)));
  }
  x = encoder_layer_norm(m, p + "layer_norm", b.add(x, attention_block(m, p + "attention.", attention, x, ctx)), cfg.eps);
  return encoder_layer_norm(m, p + "final_layer_norm", b.add(x, gated_mlp(m, p, mlp, x)), cfg.eps);
}

ExportModel build_wav2vec2(const Checkpoint& ckpt, const ExportConfig& config) {
  const Wav2Vec2Config cfg = parse_wav2vec2(ckpt.config());
  ExportModel out{"wav2vec2", cfg.architectures, {}, {}};
  out.task = wav2vec2_task(config, cfg);
  const std::string root = ckpt.find("wav2vec2.feature_projection.projection.weight") ? "wav2vec2." : "";
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  b.set_scope("inputs");
  const std::vector<std::string> names = m.taken_inputs({"input_values"}, {"input_values"});
  if (names.empty()) fail("inputs: must include input_values");
  const Dim batch = m.dim("batch", 1, kMaxBatch), samples = m.dim("samples", receptive_field(cfg), kMaxSamples);
  Value* x = feature_encoder(m, root + "feature_extractor.", cfg, b.input("input_values", config.dtype, {batch, samples}));
  x = encoder_layer_norm(m, root + "feature_projection.layer_norm", x, cfg.eps);
  b.set_scope(root + "feature_projection.projection");
  x = encoder_dense(m, root + "feature_projection.projection", cfg.hidden, cfg.conv_dim.back(), x);
  const std::string p = root + "encoder.";
  x = b.add(x, positional_conv(m, p + "pos_conv_embed.conv", cfg, x));
  if (!cfg.stable) x = encoder_layer_norm(m, p + "layer_norm", x, cfg.eps);
  for (int64_t i = 0; i < cfg.layers; ++i) x = encoder_layer(m, p + "layers." + std::to_string(i) + ".", cfg, x);
  if (cfg.stable) x = encoder_layer_norm(m, p + "layer_norm", x, cfg.eps);
  const char* output_type = "BaseModelOutput";
  if (out.task == Task::SpeechRecognition) {
    b.output(b.cast(encoder_dense(m, "lm_head", cfg.vocab, cfg.hidden, x), DType::F32), "logits");
    output_type = "CausalLMOutput";
  } else {
    b.output(x, "last_hidden_state");
  }
  // Pre-training and fine-tuning leftovers the forward does not read.
  for (const TensorView* t : ckpt.tensors())
    if (t->name.ends_with("masked_spec_embed") || t->name.starts_with("quantizer.") || t->name.starts_with("project_") ||
        (out.task == Task::FeatureExtraction && t->name.starts_with("lm_head.")))
      m.tolerate(t->name);
  out.components.push_back({Role::Forward, finish_component(m, output_type, cfg.layers, out.dims)});
  return out;
}

}  // namespace

HFX_REGISTER_ARCH("wav2vec2", build_wav2vec2)

}  // namespace hfx
