// The T5 family's encoder (t5, mt5, umt5): T5EncoderModel's last_hidden_state, or the encoder of an
// encoder-decoder checkpoint with --task feature-extraction (its generation is not exported yet).
// Token embeddings (shared, or encoder.embed_tokens), then pre-norm blocks: RMSNorm without mean
// (T5LayerNorm), self-attention without biases or scaling whose scores get a relative position
// bias (bidirectional buckets; the first block's table serves every block in t5 / mt5, each block
// has its own in umt5), RMSNorm, then the feed-forward (ReLU DenseReluDense, or gated:
// act(wi_0) * wi_1, as feed_forward_proj says), a final RMSNorm. Bidirectional over the padding
// mask. sentence-similarity for a sentence-transformers checkpoint (sentence-T5: mean pooling,
// Dense, Normalize).
#include <algorithm>
#include <optional>

#include "core/error.h"
#include "models/blocks.h"
#include "models/decoder.h"
#include "models/encoder.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/sentence_pooling.h"

namespace hfx {
namespace {

constexpr int64_t kMaxBatch = 4096;
// T5 has no position limit (relative buckets only); sequences are bounded at its training length
// (--dim sequence=1:N raises it).
constexpr int64_t kLongestSequence = 512;

struct T5Config {
  std::vector<std::string> architectures;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, head_dim = 0, ff = 0, buckets = 0, max_distance = 0;
  double eps = 1e-6;
  bool gated = false;
  std::string activation;
  bool bias_per_layer = false;  // umt5
};

T5Config parse_t5(const JsonConfig& c, bool bias_per_layer) {
  T5Config cfg;
  cfg.architectures = architectures(c);
  cfg.vocab = c.positive("vocab_size", 32128);
  cfg.hidden = c.positive("d_model", 512);
  cfg.layers = c.positive("num_layers", 6);
  cfg.heads = c.positive("num_heads", 8);
  cfg.head_dim = c.positive("d_kv", 64);
  cfg.ff = c.positive("d_ff", 2048);
  cfg.buckets = c.positive("relative_attention_num_buckets", 32);
  if (cfg.buckets < 4) c.invalid("relative_attention_num_buckets", "must be at least 4 (two exact buckets per direction)");
  cfg.max_distance = c.positive("relative_attention_max_distance", 128);
  if (cfg.max_distance <= cfg.buckets / 4)
    c.invalid("relative_attention_max_distance", "must exceed a quarter of relative_attention_num_buckets");
  cfg.eps = c.number("layer_norm_epsilon", 1e-6);
  if (cfg.eps < 0) c.invalid("layer_norm_epsilon", "must not be negative");
  // T5Config: "relu", "gated-gelu" (gelu_new), "gated-silu", ...: [gated-]activation.
  const std::string proj = c.string("feed_forward_proj", "relu");
  const size_t dash = proj.find('-');
  if (dash != std::string::npos && (proj.substr(0, dash) != "gated" || proj.find('-', dash + 1) != std::string::npos))
    c.invalid("feed_forward_proj", "\"" + proj + "\" is not an activation or gated-<activation>");
  cfg.gated = dash != std::string::npos;
  cfg.activation = proj == "gated-gelu" ? "gelu_new" : proj.substr(dash == std::string::npos ? 0 : dash + 1);
  check_activation(c, "feed_forward_proj", cfg.activation);
  cfg.bias_per_layer = bias_per_layer;
  return cfg;
}

// The encoder-decoder classes' default task is generation, which is not exported yet: only an
// explicit task (or a sentence-transformers checkpoint, or T5EncoderModel) exports the encoder.
void refuse_generation_default(const std::string& model_type, const ExportConfig& config, const T5Config& cfg,
                               const std::optional<SentencePooling>& pooling) {
  if (!config.task.empty() || pooling || cfg.architectures.empty()) return;
  for (const std::string& a : cfg.architectures)
    if (a.ends_with("EncoderModel")) return;
  fail("task: ", model_type, " checkpoint of ", cfg.architectures.front(),
       ": an encoder-decoder, whose generation hfexport does not export yet; --task feature-extraction exports "
       "its encoder's last_hidden_state (what T5EncoderModel computes)");
}

// [1, heads, sequence, sequence]: the relative_attention_bias row of each (query, key) pair's bucket.
Value* position_bias(ModelBuilder& m, const std::string& module, const T5Config& cfg, Value* input_ids) {
  Builder& b = m.b();
  b.set_scope(module);
  std::vector<int64_t> table;
  for (int64_t relative = -(kLongestSequence - 1); relative < kLongestSequence; ++relative)
    table.push_back(bidirectional_bucket(relative, cfg.buckets, cfg.max_distance));
  Value* buckets = by_distance(b, table, input_ids);
  Value* bias = b.embedding(m.weight(module + ".weight", {cfg.buckets, cfg.heads}), buckets);  // [S, S, heads]
  return b.unsqueeze(b.transpose(bias, {2, 0, 1}), {0});
}

Value* rms_norm(ModelBuilder& m, const std::string& module, const T5Config& cfg, Value* x) {
  m.b().set_scope(module);
  return m.b().rms_norm(x, m.weight(module + ".weight", {cfg.hidden}), cfg.eps);
}

Value* block(ModelBuilder& m, const std::string& p, const T5Config& cfg, Value* mask, Value* bias, Value* x) {
  AttentionSpec attention{.hidden = cfg.hidden, .heads = cfg.heads, .kv_heads = cfg.heads, .head_dim = cfg.head_dim};
  attention.q = "SelfAttention.q", attention.k = "SelfAttention.k", attention.v = "SelfAttention.v";
  attention.o = "SelfAttention.o";
  attention.scale = 1.0;  // T5 folds the scale into its initialisation
  const AttentionContext ctx{nullptr, nullptr, mask, [](Value* k, Value* v) { return std::pair{k, v}; }, false, bias};
  x = m.b().add(x, attention_block(m, p + "layer.0.", attention, rms_norm(m, p + "layer.0.layer_norm", cfg, x), ctx));
  MlpSpec mlp{.hidden = cfg.hidden, .intermediate = cfg.ff, .bias = false, .activation = cfg.activation,
              .gated = cfg.gated};
  mlp.gate = "DenseReluDense.wi_0", mlp.up = cfg.gated ? "DenseReluDense.wi_1" : "DenseReluDense.wi";
  mlp.down = "DenseReluDense.wo";
  return m.b().add(x, gated_mlp(m, p + "layer.1.", mlp, rms_norm(m, p + "layer.1.layer_norm", cfg, x)));
}

ExportModel build_t5(const Checkpoint& ckpt, const ExportConfig& config, bool bias_per_layer) {
  const std::string model_type = ckpt.config().string("model_type", "t5");
  const T5Config cfg = parse_t5(ckpt.config(), bias_per_layer);
  ExportModel out{model_type, cfg.architectures, {}, {}};
  const std::optional<SentencePooling> pooling = read_sentence_pooling(ckpt);
  refuse_generation_default(model_type, config, cfg, pooling);
  out.task = resolve_encoder_task(model_type, config, {}, pooling, ckpt);
  if (out.task != Task::FeatureExtraction && out.task != Task::SentenceSimilarity)
    fail("task: ", model_type, " exports its encoder for feature-extraction or sentence-similarity, not ",
         task_name(out.task));
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  b.set_scope("inputs");
  const std::vector<std::string> names =
      m.taken_inputs({"input_ids", "attention_mask"}, {"input_ids", "attention_mask"});
  if (std::find(names.begin(), names.end(), "input_ids") == names.end()) fail("inputs: must include input_ids");
  const Dim batch = m.dim("batch", 1, kMaxBatch), sequence = m.dim("sequence", 1, kLongestSequence);
  Value* input_ids = b.input("input_ids", DType::I64, {batch, sequence});
  Value* attention_mask = std::find(names.begin(), names.end(), "attention_mask") != names.end()
                              ? b.input("attention_mask", DType::I64, {batch, sequence})
                              : nullptr;
  Value* mask = attention_mask ? padding_mask(b, input_ids, attention_mask) : nullptr;
  // The encoder's own copy of the shared embeddings where the checkpoint has one.
  const std::string embeddings = m.has("encoder.embed_tokens.weight") ? "encoder.embed_tokens.weight" : "shared.weight";
  b.set_scope("encoder.embed_tokens");
  Value* x = b.embedding(m.weight(embeddings, {cfg.vocab, cfg.hidden}), input_ids);
  const std::string bias_module = "layer.0.SelfAttention.relative_attention_bias";
  Value* bias = nullptr;
  for (int64_t i = 0; i < cfg.layers; ++i) {
    const std::string p = "encoder.block." + std::to_string(i) + ".";
    if (i == 0 || cfg.bias_per_layer) bias = position_bias(m, p + bias_module, cfg, input_ids);
    x = block(m, p, cfg, mask, bias, x);
  }
  x = rms_norm(m, "encoder.final_layer_norm", cfg, x);
  base_model_outputs(b, out.task, pooling, x, attention_mask);
  // The decoder, the LM head and the other copy of the embeddings are not the encoder's.
  for (const TensorView* t : ckpt.tensors())
    if (!t->name.starts_with("encoder.")) m.tolerate(t->name);
  finish_encoder(m, out, ckpt, "", "BaseModelOutput", cfg.layers, pooling);
  return out;
}

}  // namespace

HFX_REGISTER_ARCH("t5", [](const Checkpoint& c, const ExportConfig& x) { return build_t5(c, x, false); })
HFX_REGISTER_ARCH("mt5", [](const Checkpoint& c, const ExportConfig& x) { return build_t5(c, x, false); })
HFX_REGISTER_ARCH("umt5", [](const Checkpoint& c, const ExportConfig& x) { return build_t5(c, x, true); })

}  // namespace hfx
