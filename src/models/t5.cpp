// The T5 family (t5, mt5, umt5). The encoder: T5EncoderModel's last_hidden_state, or an
// encoder-decoder checkpoint's encoder with --task feature-extraction. Token embeddings (shared, or
// encoder.embed_tokens), then pre-norm blocks: RMSNorm without mean (T5LayerNorm), self-attention
// without biases or scaling whose scores get a relative position bias (bidirectional buckets; the
// first block's table serves every block in t5 / mt5, each block has its own in umt5), RMSNorm,
// then the feed-forward (ReLU DenseReluDense, or gated: act(wi_0) * wi_1, as feed_forward_proj
// says), a final RMSNorm. Bidirectional over the padding mask. sentence-similarity for a
// sentence-transformers checkpoint (sentence-T5: mean pooling, Dense, Normalize).
// With --for-generation (text2text-generation, T5ForConditionalGeneration's default): the
// `encoder` also computes every decoder block's cross-attention keys and values once (write-once
// state), and the `decoder` runs causal self-attention over its cache with causal relative buckets,
// cross-attention over that state under the encoder's padding mask, the feed-forward, a final
// RMSNorm, and the LM head (shared embeddings unless the checkpoint stores lm_head; outputs scaled
// by d_model^-0.5 where transformers scales them: t5 / umt5 with tied embeddings).
#include <algorithm>
#include <cmath>
#include <set>
#include <optional>

#include "core/error.h"
#include "models/blocks.h"
#include "models/decoder.h"
#include "models/decoder_io.h"
#include "models/encoder.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/seq2seq.h"
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
  int64_t decoder_layers = 0;
  bool scale_decoder_outputs = false;  // hidden states times d_model^-0.5 before the LM head
};

// What differs between the family's model types.
struct T5Variant {
  bool bias_per_layer = false;  // umt5: each block has its own relative_attention_bias
  bool scales_outputs = true;   // t5 / umt5 may scale the decoder's outputs; mt5 never does
};

T5Config parse_t5(const JsonConfig& c, const T5Variant& variant) {
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
  cfg.bias_per_layer = variant.bias_per_layer;
  cfg.decoder_layers = c.positive("num_decoder_layers", cfg.layers);
  // transformers 5 ties T5's weights always and scales where the config's tie_word_embeddings was
  // not false (saved as scale_decoder_outputs).
  cfg.scale_decoder_outputs =
      variant.scales_outputs && c.boolean("scale_decoder_outputs", c.boolean("tie_word_embeddings", true));
  return cfg;
}

// The task: configured; else sentence-similarity (a sentence-transformers checkpoint) or
// feature-extraction (T5EncoderModel, or no architectures); else the conditional-generation
// classes' text2text-generation, a decode loop (--for-generation).
Task t5_task(const std::string& model_type, const ExportConfig& config, const T5Config& cfg,
             const std::optional<SentencePooling>& pooling, const Checkpoint& ckpt) {
  const bool encoder_only = pooling || cfg.architectures.empty() ||
                            std::any_of(cfg.architectures.begin(), cfg.architectures.end(),
                                        [](const std::string& a) { return a.ends_with("EncoderModel"); });
  if (encoder_only && !pooling && config.task.empty() && config.generation.enabled)
    fail("task: ", model_type, " checkpoint without a decoder (",
         cfg.architectures.empty() ? std::string("no architectures") : cfg.architectures.front(),
         ") is an encoder: it has no decode loop (--for-generation)");
  const bool generates = config.task.empty() ? !encoder_only : config.task == task_name(Task::Text2TextGeneration);
  if (!generates) {
    const Task task = resolve_encoder_task(model_type, config, {}, pooling, ckpt);
    if (task != Task::FeatureExtraction && task != Task::SentenceSimilarity)
      fail("task: ", model_type, " exports text2text-generation (--for-generation) or its encoder for "
           "feature-extraction or sentence-similarity, not ", task_name(task));
    return task;
  }
  if (!config.generation.enabled)
    fail("task: ", model_type, "'s text2text-generation is a decode loop: export it with --for-generation (the encoder "
         "and the decoder with its caches), or the encoder alone with --task feature-extraction");
  return Task::Text2TextGeneration;
}

// The largest size a dim takes.
int64_t dim_bound(const Dim& d) { return d.is_static() ? d.value() : d.symbol()->max; }

// [heads, ...] relative_attention_bias rows of `buckets` [S, T] as [1, heads, S, T].
Value* bias_of_buckets(ModelBuilder& m, const std::string& module, const T5Config& cfg, Value* buckets) {
  Builder& b = m.b();
  Value* bias = b.embedding(m.weight(module + ".weight", {cfg.buckets, cfg.heads}), buckets);  // [S, T, heads]
  return b.unsqueeze(b.transpose(bias, {2, 0, 1}), {0});
}

// [1, heads, sequence, sequence]: the relative_attention_bias row of each (query, key) pair's bucket.
Value* position_bias(ModelBuilder& m, const std::string& module, const T5Config& cfg, Value* input_ids) {
  Builder& b = m.b();
  b.set_scope(module);
  const int64_t longest = std::max(kLongestSequence, dim_bound(input_ids->shape[1]));
  std::vector<int64_t> table;
  for (int64_t relative = -(longest - 1); relative < longest; ++relative)
    table.push_back(bidirectional_bucket(relative, cfg.buckets, cfg.max_distance));
  return bias_of_buckets(m, module, cfg, by_distance(b, table, input_ids));
}

// The decoder's [1 or batch, heads, query, keys] bias: buckets by how far each key is behind its
// query's position.
Value* causal_position_bias(ModelBuilder& m, const std::string& module, const T5Config& cfg, const QueryPositions& q) {
  Builder& b = m.b();
  b.set_scope(module);
  std::vector<int64_t> table;
  for (int64_t distance = 0; distance < dim_bound(q.total); ++distance)
    table.push_back(causal_bucket(distance, cfg.buckets, cfg.max_distance));
  Value* cols = b.unsqueeze(b.range(b.const_i64({0}), q.keys, b.const_i64({1}), q.total), {0, 1});
  Value* distance = b.max(b.sub(b.unsqueeze(q.positions, {2}), cols), b.const_i64({0}));  // [P, S, T]
  Value* buckets = b.gather(b.const_i64(table, {static_cast<int64_t>(table.size())}), distance, 0);
  Value* bias = b.embedding(m.weight(module + ".weight", {cfg.buckets, cfg.heads}), buckets);  // [P, S, T, heads]
  return b.transpose(bias, {0, 3, 1, 2});
}

Value* rms_norm(ModelBuilder& m, const std::string& module, const T5Config& cfg, Value* x) {
  m.b().set_scope(module);
  return m.b().rms_norm(x, m.weight(module + ".weight", {cfg.hidden}), cfg.eps);
}

// The attention of a block under `module` ("SelfAttention", "EncDecAttention"): no biases, no scaling.
AttentionSpec t5_attention(const T5Config& cfg, const std::string& module) {
  AttentionSpec attention{.hidden = cfg.hidden, .heads = cfg.heads, .kv_heads = cfg.heads, .head_dim = cfg.head_dim};
  attention.q = module + ".q", attention.k = module + ".k", attention.v = module + ".v";
  attention.o = module + ".o";
  attention.scale = 1.0;  // T5 folds the scale into its initialisation
  return attention;
}

// The feed-forward sub-layer under `p` (".../layer.N."), with its pre-norm and residual.
Value* feed_forward(ModelBuilder& m, const std::string& p, const T5Config& cfg, Value* x) {
  MlpSpec mlp{.hidden = cfg.hidden, .intermediate = cfg.ff, .bias = false, .activation = cfg.activation,
              .gated = cfg.gated};
  mlp.gate = "DenseReluDense.wi_0", mlp.up = cfg.gated ? "DenseReluDense.wi_1" : "DenseReluDense.wi";
  mlp.down = "DenseReluDense.wo";
  return m.b().add(x, gated_mlp(m, p, mlp, rms_norm(m, p + "layer_norm", cfg, x)));
}

Value* block(ModelBuilder& m, const std::string& p, const T5Config& cfg, Value* mask, Value* bias, Value* x) {
  const AttentionSpec attention = t5_attention(cfg, "SelfAttention");
  const AttentionContext ctx{nullptr, nullptr, mask, [](Value* k, Value* v) { return std::pair{k, v}; }, false, bias};
  x = m.b().add(x, attention_block(m, p + "layer.0.", attention, rms_norm(m, p + "layer.0.layer_norm", cfg, x), ctx));
  return feed_forward(m, p + "layer.1.", cfg, x);
}

// The encoder's blocks over input_ids (and its padding mask), to its final norm.
Value* encoder_stack(ModelBuilder& m, const T5Config& cfg, Value* input_ids, Value* attention_mask) {
  Builder& b = m.b();
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
  return rms_norm(m, "encoder.final_layer_norm", cfg, x);
}

// The generation export's encoder: input_ids and attention_mask [batch, encoder_sequence] ->
// last_hidden_state, and every decoder block's cross-attention keys and values of it.
std::unique_ptr<Graph> generation_encoder(const Checkpoint& ckpt, const ExportConfig& config, const T5Config& cfg,
                                          std::set<std::string>& dims) {
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  b.set_scope("inputs");
  const Dim batch = m.dim("batch", 1, kMaxBatch), sequence = m.dim("encoder_sequence", 1, kLongestSequence);
  Value* input_ids = b.input("input_ids", DType::I64, {batch, sequence});
  Value* attention_mask = b.input("attention_mask", DType::I64, {batch, sequence});
  Value* x = encoder_stack(m, cfg, input_ids, attention_mask);
  b.output(x, "last_hidden_state");
  const AttentionSpec cross = t5_attention(cfg, "EncDecAttention");
  const bool writes = encoder_writes_cross_state(config.generation);
  for (int64_t i = 0; writes && i < cfg.decoder_layers; ++i) {
    const auto [k, v] = cross_keys_values(m, "decoder.block." + std::to_string(i) + ".layer.1.", cross, x);
    write_cross_state(b, i, {batch, sequence, cfg.heads, cfg.head_dim, config.dtype}, k, v);
  }
  for (const TensorView* t : ckpt.tensors())
    if (!t->name.starts_with("encoder.") && !(writes && is_cross_key_value(t->name, ".layer.1.", cross)))
      m.tolerate(t->name);
  return finish_component(m, "BaseModelOutput", cfg.layers, dims);
}

// The generation export's decoder: input_ids / attention_mask / position_ids of the decoder tokens
// over its self-attention cache (past_key_values.{i}.decoder.*, from empty), the encoder's
// cross-attention state (past_key_values.{i}.encoder.*) and encoder_attention_mask -> logits.
std::unique_ptr<Graph> generation_decoder(const Checkpoint& ckpt, const ExportConfig& config, const T5Config& cfg,
                                          std::set<std::string>& dims) {
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  const DecoderVariant variant = decoder_variant(config.generation);
  b.set_scope("inputs");
  DecoderIO io(m, variant, kLongestSequence, {cfg.decoder_layers, cfg.heads, cfg.head_dim, config.dtype},
               {cfg.hidden, config.dtype});
  Value* ids = io.input_ids();
  if (!ids) fail("inputs: the decoder takes input_ids");
  const Dim batch = ids->shape[0], encoder_sequence = m.dim("encoder_sequence", 1, kLongestSequence);
  Value* encoder_mask = b.input("encoder_attention_mask", DType::I64, {batch, encoder_sequence});
  Value* cross_mask = encoder_padding(b, encoder_mask);
  Value* encoder_hidden_states = first_step_hidden_states(b, config.generation, batch, encoder_sequence, cfg.hidden, config.dtype);
  const std::string embeddings = m.has("decoder.embed_tokens.weight") ? "decoder.embed_tokens.weight" : "shared.weight";
  b.set_scope("decoder.embed_tokens");
  Value* x = b.embedding(m.weight(embeddings, {cfg.vocab, cfg.hidden}), ids);
  Value* mask = io.mask({});
  const QueryPositions positions = decoder_positions(b, io, variant, ids);
  const AttentionSpec self = t5_attention(cfg, "SelfAttention"), cross = t5_attention(cfg, "EncDecAttention");
  Value* bias = nullptr;
  for (int64_t i = 0; i < cfg.decoder_layers; ++i) {
    const std::string p = "decoder.block." + std::to_string(i) + ".";
    if (i == 0 || cfg.bias_per_layer)
      bias = causal_position_bias(m, p + "layer.0.SelfAttention.relative_attention_bias", cfg, positions);
    const AttentionContext ctx{nullptr, nullptr, mask, [&](Value* k, Value* v) { return io.update_cache(i, k, v); },
                               true, bias};
    x = b.add(x, attention_block(m, p + "layer.0.", self, rms_norm(m, p + "layer.0.layer_norm", cfg, x), ctx));
    const auto [keys, values] = decoder_cross_state(m, i, {batch, encoder_sequence, cfg.heads, cfg.head_dim, config.dtype},
                                                    encoder_hidden_states, p + "layer.1.", cross);
    Value* normed = rms_norm(m, p + "layer.1.layer_norm", cfg, x);
    x = b.add(x, cross_attention_block(m, p + "layer.1.", cross, normed, keys, values, cross_mask));
    x = feed_forward(m, p + "layer.2.", cfg, x);
  }
  // A loop needs only the last position's logits (the backend asks when one graph serves prompt and steps).
  if (config.generation.last_logits_only) x = b.slice(x, 1, -1, INT64_MAX);
  x = rms_norm(m, "decoder.final_layer_norm", cfg, x);
  b.set_scope("lm_head");
  if (cfg.scale_decoder_outputs) x = b.mul(x, b.scalar(1.0 / std::sqrt(static_cast<double>(cfg.hidden)), config.dtype));
  // The LM head shares the embeddings unless the checkpoint stores its own (T5 v1.1, mT5).
  Value* head = m.weight(m.has("lm_head.weight") ? "lm_head.weight" : "shared.weight", {cfg.vocab, cfg.hidden});
  io.finish(b.cast(b.linear(x, head), DType::F32));
  for (const TensorView* t : ckpt.tensors())
    if (!t->name.starts_with("decoder.") || is_cross_key_value(t->name, ".layer.1.", cross)) m.tolerate(t->name);
  return finish_component(m, "Seq2SeqLMOutput", cfg.decoder_layers, dims);
}

ExportModel build_t5(const Checkpoint& ckpt, const ExportConfig& config, const T5Variant& variant) {
  const std::string model_type = ckpt.config().string("model_type", "t5");
  const T5Config cfg = parse_t5(ckpt.config(), variant);
  ExportModel out{model_type, cfg.architectures, {}, {}};
  const std::optional<SentencePooling> pooling = read_sentence_pooling(ckpt);
  out.task = t5_task(model_type, config, cfg, pooling, ckpt);
  if (out.task == Task::Text2TextGeneration) {
    add_generation_components(
        out, config, [&](const ExportConfig& c) { return generation_encoder(ckpt, c, cfg, out.dims); },
        [&](const ExportConfig& c) { return generation_decoder(ckpt, c, cfg, out.dims); });
    return out;
  }
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
  Value* x = encoder_stack(m, cfg, input_ids, attention_mask);
  base_model_outputs(b, out.task, pooling, x, attention_mask);
  // The decoder, the LM head and the other copy of the embeddings are not the encoder's.
  for (const TensorView* t : ckpt.tensors())
    if (!t->name.starts_with("encoder.")) m.tolerate(t->name);
  finish_encoder(m, out, ckpt, "", "BaseModelOutput", cfg.layers, pooling);
  return out;
}

}  // namespace

HFX_REGISTER_ARCH("t5", [](const Checkpoint& c, const ExportConfig& x) { return build_t5(c, x, {}); })
HFX_REGISTER_ARCH("mt5", [](const Checkpoint& c, const ExportConfig& x) { return build_t5(c, x, {.scales_outputs = false}); })
HFX_REGISTER_ARCH("umt5", [](const Checkpoint& c, const ExportConfig& x) { return build_t5(c, x, {.bias_per_layer = true}); })

}  // namespace hfx
