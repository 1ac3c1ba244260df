// Whisper's encoder (whisper): log-mel input_features [batch, num_mel_bins, 2 x max_source_positions]
// through two GELU convolutions (kernel 3; the second of stride 2), plus the learned positions, then
// pre-LayerNorm layers (attention without a key bias, a GELU MLP) and a final LayerNorm:
// WhisperEncoder's last_hidden_state, exported with --task feature-extraction. Generation (the
// decoder with its cross-attention cache) is not exported yet, and is refused by name.
#include <optional>

#include "core/error.h"
#include "models/blocks.h"
#include "models/decoder.h"
#include "models/encoder.h"
#include "models/model_builder.h"
#include "models/registry.h"

namespace hfx {
namespace {

constexpr int64_t kMaxBatch = 64;

struct WhisperConfig {
  std::vector<std::string> architectures;
  int64_t hidden = 0, layers = 0, heads = 0, ffn = 0, mels = 0, positions = 0;
  std::string activation;
};

WhisperConfig parse_whisper(const JsonConfig& c) {
  WhisperConfig cfg;
  cfg.architectures = architectures(c);
  cfg.hidden = c.positive("d_model", 384);
  cfg.layers = c.positive("encoder_layers", 4);
  cfg.heads = c.positive("encoder_attention_heads", 6);
  if (cfg.hidden % cfg.heads != 0) c.invalid("encoder_attention_heads", "must divide d_model");
  cfg.ffn = c.positive("encoder_ffn_dim", 1536);
  cfg.mels = c.positive("num_mel_bins", 80);
  cfg.positions = c.positive("max_source_positions", 1500);
  cfg.activation = c.string("activation_function", "gelu");
  check_activation(c, "activation_function", cfg.activation);
  return cfg;
}

// The conditional-generation classes' default task is generation, not exported yet.
void refuse_generation_default(const ExportConfig& config, const WhisperConfig& cfg) {
  if (!config.task.empty() || cfg.architectures.empty()) return;
  fail("task: whisper checkpoint of ", cfg.architectures.front(),
       ": speech recognition (the decoder and its cross-attention cache) is not exported yet; --task "
       "feature-extraction exports the encoder's last_hidden_state (what WhisperEncoder computes)");
}

constexpr double kLayerNormEps = 1e-5;  // nn.LayerNorm's default: Whisper's config has no key for it

Value* conv(ModelBuilder& m, const std::string& module, int64_t in, int64_t out, int64_t stride, Value* x) {
  Builder& b = m.b();
  b.set_scope(module);
  Value* y = b.conv(x, m.weight(module + ".weight", {out, in, 3}), m.weight(module + ".bias", {out}), {stride}, {1}, {1});
  return b.gelu(y, GeluApproximation::None);
}

Value* encoder_layer(ModelBuilder& m, const std::string& p, const WhisperConfig& cfg, Value* x) {
  AttentionSpec attention{.hidden = cfg.hidden, .heads = cfg.heads, .kv_heads = cfg.heads,
                          .head_dim = cfg.hidden / cfg.heads};
  attention.o = "out_proj";
  attention.qkv_bias = attention.o_bias = true;
  attention.k_bias = false;
  const AttentionContext ctx{nullptr, nullptr, nullptr, [](Value* k, Value* v) { return std::pair{k, v}; }, false};
  x = m.b().add(x, attention_block(m, p + "self_attn.", attention, encoder_layer_norm(m, p + "self_attn_layer_norm", x, kLayerNormEps), ctx));
  MlpSpec mlp{.hidden = cfg.hidden, .intermediate = cfg.ffn, .bias = true, .activation = cfg.activation, .gated = false};
  mlp.up = "fc1", mlp.down = "fc2";
  return m.b().add(x, gated_mlp(m, p, mlp, encoder_layer_norm(m, p + "final_layer_norm", x, kLayerNormEps)));
}

ExportModel build_whisper(const Checkpoint& ckpt, const ExportConfig& config) {
  const WhisperConfig cfg = parse_whisper(ckpt.config());
  ExportModel out{"whisper", cfg.architectures, {}, {}};
  refuse_generation_default(config, cfg);
  out.task = resolve_encoder_task("whisper", config, {}, std::nullopt, ckpt);
  if (out.task != Task::FeatureExtraction)
    fail("task: whisper exports its encoder for feature-extraction, not ", task_name(out.task));
  // WhisperForConditionalGeneration keeps the model under "model."; WhisperModel has no prefix.
  const std::string p = ckpt.find("model.encoder.conv1.weight") ? "model.encoder." : "encoder.";
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  b.set_scope("inputs");
  const std::vector<std::string> names = m.taken_inputs({"input_features"}, {"input_features"});
  if (names.empty()) fail("inputs: must include input_features");
  // The encoder takes exactly 30 s of features (WhisperEncoder refuses another length).
  const Dim batch = m.dim("batch", 1, kMaxBatch);
  Value* features = b.input("input_features", config.dtype, {batch, Dim(cfg.mels), Dim(2 * cfg.positions)});
  Value* x = conv(m, p + "conv1", cfg.mels, cfg.hidden, 1, features);
  x = conv(m, p + "conv2", cfg.hidden, cfg.hidden, 2, x);
  b.set_scope(p + "embed_positions");
  x = b.add(b.transpose(x, {0, 2, 1}), m.weight(p + "embed_positions.weight", {cfg.positions, cfg.hidden}));
  for (int64_t i = 0; i < cfg.layers; ++i) x = encoder_layer(m, p + "layers." + std::to_string(i) + ".", cfg, x);
  b.output(encoder_layer_norm(m, p + "layer_norm", x, kLayerNormEps), "last_hidden_state");
  // The decoder, the projection heads and the LM head are not the encoder's.
  for (const TensorView* t : ckpt.tensors())
    if (!t->name.starts_with(p)) m.tolerate(t->name);
  finish_encoder(m, out, ckpt, "", "BaseModelOutput", cfg.layers, std::nullopt);
  return out;
}

}  // namespace

HFX_REGISTER_ARCH("whisper", build_whisper)

}  // namespace hfx
