// Whisper (whisper). The encoder: log-mel input_features [batch, num_mel_bins, 2 x
// max_source_positions] through two GELU convolutions (kernel 3; the second of stride 2), plus the
// learned positions, then pre-LayerNorm layers (attention without a key bias, a GELU MLP) and a
// final LayerNorm: WhisperEncoder's last_hidden_state (--task feature-extraction). With
// --for-generation (automatic-speech-recognition), two components: the `encoder`, which also
// computes every decoder layer's cross-attention keys and values once (write-once state), and the
// `decoder`: token and learned position embeddings, pre-LayerNorm layers of causal self-attention
// over its KV cache, cross-attention over the encoder's state and a GELU MLP, a final LayerNorm and
// proj_out (tied to the token embeddings).
#include <optional>

#include "core/error.h"
#include "models/blocks.h"
#include "models/decoder.h"
#include "models/decoder_io.h"
#include "models/encoder.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/seq2seq.h"

namespace hfx {
namespace {

// The batch bound of both components (a runtime that plans memory for the bound, ExecuTorch,
// would plan 30 s of features per row).
constexpr int64_t kMaxBatch = 64;

struct WhisperConfig {
  std::vector<std::string> architectures;
  int64_t hidden = 0, layers = 0, heads = 0, ffn = 0, mels = 0, positions = 0;
  int64_t vocab = 0, decoder_layers = 0, decoder_heads = 0, decoder_ffn = 0, target_positions = 0;
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
  cfg.vocab = c.positive("vocab_size", 51865);
  cfg.decoder_layers = c.positive("decoder_layers", 4);
  cfg.decoder_heads = c.positive("decoder_attention_heads", 6);
  if (cfg.hidden % cfg.decoder_heads != 0) c.invalid("decoder_attention_heads", "must divide d_model");
  cfg.decoder_ffn = c.positive("decoder_ffn_dim", 1536);
  cfg.target_positions = c.positive("max_target_positions", 448);
  cfg.activation = c.string("activation_function", "gelu");
  check_activation(c, "activation_function", cfg.activation);
  return cfg;
}

// The task: configured, else speech recognition for the conditional-generation class (a decode
// loop: --for-generation), else the encoder's features.
Task whisper_task(const ExportConfig& config, const WhisperConfig& cfg) {
  const bool generates = std::find(cfg.architectures.begin(), cfg.architectures.end(),
                                   "WhisperForConditionalGeneration") != cfg.architectures.end();
  const Task task = config.task.empty() ? (generates || config.generation.enabled ? Task::SpeechRecognition
                                                                                  : Task::FeatureExtraction)
                                        : *task_named(config.task);
  if (task != Task::SpeechRecognition && task != Task::FeatureExtraction)
    fail("task: whisper exports automatic-speech-recognition (--for-generation) or its encoder for "
         "feature-extraction, not ", task_name(task));
  if (task == Task::SpeechRecognition && !config.generation.enabled)
    fail("task: whisper's automatic-speech-recognition is a decode loop: export it with --for-generation "
         "(the encoder and the decoder with its caches), or the encoder alone with --task feature-extraction");
  return task;
}

constexpr double kLayerNormEps = 1e-5;  // nn.LayerNorm's default: Whisper's config has no key for it

Value* conv(ModelBuilder& m, const std::string& module, int64_t in, int64_t out, int64_t stride, Value* x) {
  Builder& b = m.b();
  b.set_scope(module);
  Value* y = b.conv(x, m.weight(module + ".weight", {out, in, 3}), m.weight(module + ".bias", {out}), {stride}, {1}, {1});
  return b.gelu(y, GeluApproximation::None);
}

AttentionSpec attention_spec(int64_t hidden, int64_t heads) {
  AttentionSpec attention{.hidden = hidden, .heads = heads, .kv_heads = heads, .head_dim = hidden / heads};
  attention.o = "out_proj";
  attention.qkv_bias = attention.o_bias = true;
  attention.k_bias = false;
  return attention;
}

Value* feed_forward(ModelBuilder& m, const std::string& p, int64_t hidden, int64_t ffn, const std::string& act, Value* x) {
  MlpSpec mlp{.hidden = hidden, .intermediate = ffn, .bias = true, .activation = act, .gated = false};
  mlp.up = "fc1", mlp.down = "fc2";
  return m.b().add(x, gated_mlp(m, p, mlp, encoder_layer_norm(m, p + "final_layer_norm", x, kLayerNormEps)));
}

Value* encoder_layer(ModelBuilder& m, const std::string& p, const WhisperConfig& cfg, Value* x) {
  const AttentionSpec attention = attention_spec(cfg.hidden, cfg.heads);
  const AttentionContext ctx{nullptr, nullptr, nullptr, [](Value* k, Value* v) { return std::pair{k, v}; }, false};
  x = m.b().add(x, attention_block(m, p + "self_attn.", attention, encoder_layer_norm(m, p + "self_attn_layer_norm", x, kLayerNormEps), ctx));
  return feed_forward(m, p, cfg.hidden, cfg.ffn, cfg.activation, x);
}

// Where the checkpoint keeps the model: under "model." (WhisperForConditionalGeneration) or at the
// top (WhisperModel).
std::string model_prefix(const Checkpoint& ckpt) { return ckpt.find("model.encoder.conv1.weight") ? "model." : ""; }

// The cross-attention state of each decoder layer: [batch, heads, max_source_positions, head_dim].
CrossStateShape cross_shape(const WhisperConfig& cfg, Dim batch, DType dtype) {
  return {batch, Dim(cfg.positions), cfg.decoder_heads, cfg.hidden / cfg.decoder_heads, dtype};
}

// The encoder's graph: last_hidden_state, and with `cross_states` each decoder layer's
// cross-attention keys and values of it, written once for the decoder's steps.
std::unique_ptr<Graph> encoder_graph(const Checkpoint& ckpt, const ExportConfig& config, const WhisperConfig& cfg,
                                     bool cross_states, std::set<std::string>& dims) {
  const std::string root = model_prefix(ckpt), p = root + "encoder.";
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
  x = encoder_layer_norm(m, p + "layer_norm", x, kLayerNormEps);
  b.output(x, "last_hidden_state");
  const AttentionSpec cross = attention_spec(cfg.hidden, cfg.decoder_heads);
  cross_states = cross_states && encoder_writes_cross_state(config.generation);
  for (int64_t i = 0; cross_states && i < cfg.decoder_layers; ++i) {
    const auto [k, v] = cross_keys_values(m, root + "decoder.layers." + std::to_string(i) + ".encoder_attn.", cross, x);
    write_cross_state(b, i, cross_shape(cfg, batch, config.dtype), k, v);
  }
  // The decoder's other weights, the projection heads and the LM head are not the encoder's.
  for (const TensorView* t : ckpt.tensors())
    if (!t->name.starts_with(p) && !(cross_states && is_cross_key_value(t->name, ".encoder_attn.", cross)))
      m.tolerate(t->name);
  return finish_component(m, "BaseModelOutput", cfg.layers, dims);
}

// One decoder layer: self-attention over the cache, cross-attention over the encoder's state, MLP.
Value* decoder_layer(ModelBuilder& m, DecoderIO& io, const WhisperConfig& cfg, const std::string& root, int64_t i,
                     Value* mask, Dim batch, Value* encoder_hidden_states, Value* x) {
  Builder& b = m.b();
  const std::string p = root + "decoder.layers." + std::to_string(i) + ".";
  const AttentionSpec attention = attention_spec(cfg.hidden, cfg.decoder_heads);
  const AttentionContext ctx{nullptr, nullptr, mask, [&](Value* k, Value* v) { return io.update_cache(i, k, v); }, true};
  x = b.add(x, attention_block(m, p + "self_attn.", attention, encoder_layer_norm(m, p + "self_attn_layer_norm", x, kLayerNormEps), ctx));
  const auto [keys, values] = decoder_cross_state(m, i, cross_shape(cfg, batch, m.config().dtype), encoder_hidden_states,
                                                  p + "encoder_attn.", attention);
  Value* normed = encoder_layer_norm(m, p + "encoder_attn_layer_norm", x, kLayerNormEps);
  x = b.add(x, cross_attention_block(m, p + "encoder_attn.", attention, normed, keys, values, nullptr));
  return feed_forward(m, p, cfg.hidden, cfg.decoder_ffn, cfg.activation, x);
}

// The decoder's graph: input_ids, attention_mask and position_ids of the decoder tokens (the
// prompt, or a step) over its self-attention cache (past_key_values.{i}.decoder.*, from empty) and
// the encoder's cross-attention state (past_key_values.{i}.encoder.*) -> logits.
std::unique_ptr<Graph> decoder_graph(const Checkpoint& ckpt, const ExportConfig& config, const WhisperConfig& cfg,
                                     std::set<std::string>& dims) {
  const std::string root = model_prefix(ckpt), p = root + "decoder.";
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  const DecoderVariant variant = decoder_variant(config.generation);
  const int64_t head_dim = cfg.hidden / cfg.decoder_heads;
  b.set_scope("inputs");
  DecoderIO io(m, variant, cfg.target_positions, {cfg.decoder_layers, cfg.decoder_heads, head_dim, config.dtype},
               {cfg.hidden, config.dtype});
  Value* ids = io.input_ids();
  if (!ids) fail("inputs: whisper's decoder takes input_ids");
  b.set_scope(p + "embed_tokens");
  Value* table = m.weight(p + "embed_tokens.weight", {cfg.vocab, cfg.hidden});
  Value* x = b.embedding(table, ids);
  b.set_scope(p + "embed_positions");
  x = b.add(x, b.embedding(m.weight(p + "embed_positions.weight", {cfg.target_positions, cfg.hidden}), io.position_ids()));
  Value* mask = io.mask({});
  const Dim batch = ids->shape[0];
  Value* encoder_hidden_states =
      first_step_hidden_states(b, config.generation, batch, Dim(cfg.positions), cfg.hidden, config.dtype);
  for (int64_t i = 0; i < cfg.decoder_layers; ++i)
    x = decoder_layer(m, io, cfg, root, i, mask, batch, encoder_hidden_states, x);
  // A loop needs only the last position's logits (the backend asks when one graph serves prompt and steps).
  if (config.generation.last_logits_only) x = b.slice(x, 1, -1, INT64_MAX);
  x = encoder_layer_norm(m, p + "layer_norm", x, kLayerNormEps);
  b.set_scope("proj_out");
  // proj_out is tied to the token embeddings: a checkpoint may store it or leave it out.
  Value* head = m.has("proj_out.weight") ? m.weight("proj_out.weight", {cfg.vocab, cfg.hidden}) : table;
  io.finish(b.cast(b.linear(x, head), DType::F32));
  const AttentionSpec cross = attention_spec(cfg.hidden, cfg.decoder_heads);
  for (const TensorView* t : ckpt.tensors())
    if (!t->name.starts_with(p) || is_cross_key_value(t->name, ".encoder_attn.", cross)) m.tolerate(t->name);
  return finish_component(m, "Seq2SeqLMOutput", cfg.decoder_layers, dims);
}

// Both components read the same batch dim: bounded alike unless configured.
ExportConfig with_batch_bound(const ExportConfig& config) {
  ExportConfig out = config;
  out.dims.try_emplace("batch", DimRange{1, kMaxBatch});
  return out;
}

ExportModel build_whisper(const Checkpoint& ckpt, const ExportConfig& config) {
  const WhisperConfig cfg = parse_whisper(ckpt.config());
  ExportModel out{"whisper", cfg.architectures, {}, {}};
  out.task = whisper_task(config, cfg);
  if (out.task == Task::FeatureExtraction) {
    out.components.push_back({Role::Forward, encoder_graph(ckpt, config, cfg, false, out.dims)});
    return out;
  }
  const ExportConfig graphs = with_batch_bound(config);
  add_generation_components(
      out, graphs, [&](const ExportConfig& c) { return encoder_graph(ckpt, c, cfg, true, out.dims); },
      [&](const ExportConfig& c) { return decoder_graph(ckpt, c, cfg, out.dims); });
  return out;
}

}  // namespace

HFX_REGISTER_ARCH("whisper", build_whisper)

}  // namespace hfx
