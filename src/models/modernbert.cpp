// ModernBERT (modernbert): token embeddings under a LayerNorm, pre-norm layers (the first without
// an attention norm) of RoPE attention over a fused Wqkv and a GeGLU MLP (Wi's first half
// activated, times its second), LayerNorms without bias and Linears without bias by default, a
// final norm. Layers alternate global attention (every global_attn_every_n_layers-th, or as
// layer_types says) with local attention that sees the keys at most local_attention / 2 tokens
// away, each kind with its own RoPE base. Bidirectional over the padding mask; transformers' unpadded
// (flash) path computes the same numbers at the real tokens.
// Heads: feature-extraction (last_hidden_state), sentence-similarity (a sentence-transformers
// checkpoint's pooling), and over the prediction head (dense, activation, norm): fill-mask (the
// decoder tied to the embeddings), text-classification (CLS or mean pooling first), token
// classification and question answering.
#include <algorithm>
#include <optional>

#include "core/error.h"
#include "models/blocks.h"
#include "models/decoder.h"
#include "models/encoder.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/rope.h"
#include "models/sentence_pooling.h"

namespace hfx {
namespace {

constexpr int64_t kMaxBatch = 4096;
enum RopeKind { kGlobal = 0, kLocal = 1 };

struct ModernBertConfig {
  std::vector<std::string> architectures;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, intermediate = 0, max_positions = 0, labels = 2;
  double eps = 1e-5;
  std::string activation, classifier_activation;
  bool norm_bias = false, attention_bias = false, mlp_bias = false, decoder_bias = true, classifier_bias = false;
  bool tied = true, mean_pooling = false;
  std::vector<bool> local;       // per layer: local (sliding) attention
  int64_t reach = 0;             // a local layer keeps keys with |query - key| < reach
  std::vector<RopeConfig> ropes;  // kGlobal, kLocal
};

// 5.x nests the RoPE parameters by layer type; 4.x has global_rope_theta / local_rope_theta.
std::vector<RopeConfig> modernbert_ropes(const JsonConfig& c, const RopeDefaults& d) {
  auto entry = [&](const char* type, const char* theta_key, double theta) {
    if (const auto nested = c.object("rope_parameters"))
      if (const auto e = nested->object(type)) return parse_rope(c, d, e);
    const double t = c.number(theta_key, theta);
    if (t <= 0) c.invalid(theta_key, "must be positive");
    return parse_rope(c, d, JsonConfig({{"rope_type", "default"}, {"rope_theta", t}}, c.where()));
  };
  return {entry("full_attention", "global_rope_theta", 160000.0), entry("sliding_attention", "local_rope_theta", 10000.0)};
}

ModernBertConfig parse_modernbert(const JsonConfig& c) {
  ModernBertConfig cfg;
  cfg.architectures = architectures(c);
  cfg.vocab = c.positive("vocab_size", 50368);
  cfg.hidden = c.positive("hidden_size", 768);
  cfg.layers = c.positive("num_hidden_layers", 22);
  cfg.heads = c.positive("num_attention_heads", 12);
  if (cfg.hidden % cfg.heads != 0) c.invalid("num_attention_heads", "must divide the hidden size");
  cfg.intermediate = c.positive("intermediate_size", 1152);
  cfg.max_positions = c.positive("max_position_embeddings", 8192);
  cfg.eps = c.number("norm_eps", 1e-5);
  if (cfg.eps < 0) c.invalid("norm_eps", "must not be negative");
  cfg.activation = c.string("hidden_activation", "gelu");
  check_activation(c, "hidden_activation", cfg.activation);
  cfg.classifier_activation = c.string("classifier_activation", "gelu");
  check_activation(c, "classifier_activation", cfg.classifier_activation);
  cfg.norm_bias = c.boolean("norm_bias", false);
  cfg.attention_bias = c.boolean("attention_bias", false);
  cfg.mlp_bias = c.boolean("mlp_bias", false);
  cfg.decoder_bias = c.boolean("decoder_bias", true);
  cfg.classifier_bias = c.boolean("classifier_bias", false);
  cfg.tied = c.boolean("tie_word_embeddings", true);
  const std::string pooling = c.string("classifier_pooling", "cls");
  if (pooling != "cls" && pooling != "mean") c.invalid("classifier_pooling", "must be \"cls\" or \"mean\"");
  cfg.mean_pooling = pooling == "mean";
  cfg.labels = label_count(c);
  // local_attention is the whole window; a query sees local_attention / 2 keys on each side.
  cfg.reach = c.positive("local_attention", 128) / 2 + 1;
  const int64_t every = c.positive("global_attn_every_n_layers", 3);
  cfg.local.resize(static_cast<size_t>(cfg.layers));
  for (int64_t i = 0; i < cfg.layers; ++i) cfg.local[static_cast<size_t>(i)] = i % every != 0;
  if (const auto marked = sliding_layers(c, cfg.layers)) cfg.local = *marked;
  cfg.ropes = modernbert_ropes(c, {cfg.hidden / cfg.heads, cfg.max_positions, false, 1.0, 160000.0});
  return cfg;
}

struct Inputs {
  Value *input_ids = nullptr, *attention_mask = nullptr, *position_ids = nullptr;
};

// input_ids and attention_mask by default (what its tokenizer returns); position_ids when asked
// for (else 0..sequence-1, as ModernBertModel's forward uses).
Inputs modernbert_inputs(ModelBuilder& m, const ModernBertConfig& cfg) {
  const std::vector<std::string> names =
      m.taken_inputs({"input_ids", "attention_mask", "position_ids"}, {"input_ids", "attention_mask"});
  auto has = [&](const char* name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  if (!has("input_ids")) fail("inputs: must include input_ids");
  const Dim batch = m.dim("batch", 1, kMaxBatch), sequence = m.dim("sequence", 1, cfg.max_positions);
  Inputs in;
  in.input_ids = m.b().input("input_ids", DType::I64, {batch, sequence});
  if (has("attention_mask")) in.attention_mask = m.b().input("attention_mask", DType::I64, {batch, sequence});
  if (has("position_ids")) in.position_ids = m.b().input("position_ids", DType::I64, {batch, sequence});
  return in;
}

// [batch, 1, sequence, sequence] bool: keys the attention_mask keeps and, on a local layer, at
// most reach - 1 tokens away from the query.
Value* attention_mask(Builder& b, const Inputs& in, std::optional<int64_t> reach) {
  Value* count = token_count(b, in.input_ids);
  Value* slots = b.range(b.const_i64({0}), count, b.const_i64({1}), in.input_ids->shape[1]);
  Value* rows = b.unsqueeze(slots, {1});
  Value* cols = b.unsqueeze(slots, {0});
  Value* width = reach ? b.const_i64({*reach}) : count;  // the whole sequence: every pair
  Value* keep = b.logical_and(b.compare(OpKind::Greater, cols, b.sub(rows, width)),
                              b.compare(OpKind::Less, cols, b.add(rows, width)));
  keep = b.unsqueeze(keep, {0, 1});
  if (!in.attention_mask) return keep;
  return b.logical_and(keep, b.unsqueeze(b.compare(OpKind::Greater, in.attention_mask, b.const_i64({0})), {1, 2}));
}

Value* norm(ModelBuilder& m, const std::string& module, const ModernBertConfig& cfg, Value* x) {
  m.b().set_scope(module);
  return m.b().layer_norm(x, m.weight(module + ".weight", {cfg.hidden}),
                          m.weight_if(cfg.norm_bias, module + ".bias", {cfg.hidden}), cfg.eps);
}

Value* layer(ModelBuilder& m, const std::string& p, int64_t i, const ModernBertConfig& cfg,
             const std::pair<Value*, Value*>& rope, Value* mask, Value* x) {
  const int64_t head_dim = cfg.hidden / cfg.heads;
  AttentionSpec attention{.hidden = cfg.hidden, .heads = cfg.heads, .kv_heads = cfg.heads, .head_dim = head_dim};
  attention.qkv = "Wqkv", attention.o = "Wo";
  attention.qkv_bias = attention.o_bias = cfg.attention_bias;
  const AttentionContext ctx{rope.first, rope.second, mask, [](Value* k, Value* v) { return std::pair{k, v}; }, false};
  Value* h = i == 0 ? x : norm(m, p + "attn_norm", cfg, x);  // the first layer's attn_norm is Identity
  x = m.b().add(x, attention_block(m, p + "attn.", attention, h, ctx));
  MlpSpec mlp{.hidden = cfg.hidden, .intermediate = cfg.intermediate, .bias = cfg.mlp_bias,
              .activation = cfg.activation, .gated = true};
  mlp.gate_up = "Wi", mlp.down = "Wo";  // Wi's first half is activated: the gate rows
  return m.b().add(x, gated_mlp(m, p + "mlp.", mlp, norm(m, p + "mlp_norm", cfg, x)));
}

// ModernBertPredictionHead: dense, the classifier activation, norm.
Value* prediction_head(ModelBuilder& m, const ModernBertConfig& cfg, Value* x) {
  Builder& b = m.b();
  b.set_scope("head.dense");
  x = b.linear(x, m.weight("head.dense.weight", {cfg.hidden, cfg.hidden}),
               m.weight_if(cfg.classifier_bias, "head.dense.bias", {cfg.hidden}));
  return norm(m, "head.norm", cfg, activation(b, cfg.classifier_activation, x));
}

Value* classifier(ModelBuilder& m, const ModernBertConfig& cfg, int64_t outputs, Value* x) {
  m.b().set_scope("classifier");
  return m.b().linear(x, m.weight("classifier.weight", {outputs, cfg.hidden}), m.weight("classifier.bias", {outputs}));
}

// The rows' mean over their real tokens (ModernBertForSequenceClassification's "mean" pooling).
Value* mean_over_tokens(Builder& b, Value* x, Value* attention_mask) {
  if (!attention_mask) return b.reduce(OpKind::ReduceMean, x, {1}, false);
  Value* kept = b.cast(attention_mask, x->dtype);
  Value* sum = b.reduce(OpKind::ReduceSum, b.mul(x, b.unsqueeze(kept, {2})), {1}, false);
  return b.div(sum, b.reduce(OpKind::ReduceSum, kept, {1}, true));
}

const char* finish_task(ModelBuilder& m, Task task, const std::string& p, const ModernBertConfig& cfg,
                        const std::optional<SentencePooling>& pooling, const Inputs& in, Value* x) {
  Builder& b = m.b();
  if (base_model_outputs(b, task, pooling, x, in.attention_mask)) return "BaseModelOutput";
  switch (task) {
    case Task::FillMask: {
      x = prediction_head(m, cfg, x);
      b.set_scope("decoder");
      if (cfg.tied) m.tolerate("decoder.weight");
      const std::string weight = cfg.tied ? p + "embeddings.tok_embeddings.weight" : "decoder.weight";
      b.output(b.linear(x, m.weight(weight, {cfg.vocab, cfg.hidden}),
                        m.weight_if(cfg.decoder_bias, "decoder.bias", {cfg.vocab})), "logits");
      return "MaskedLMOutput";
    }
    case Task::TextClassification: {
      Value* pooled = cfg.mean_pooling ? mean_over_tokens(b, x, in.attention_mask) : b.gather(x, b.const_i64({0}), 1);
      b.output(classifier(m, cfg, cfg.labels, prediction_head(m, cfg, pooled)), "logits");
      return "SequenceClassifierOutput";
    }
    case Task::TokenClassification:
      b.output(classifier(m, cfg, cfg.labels, prediction_head(m, cfg, x)), "logits");
      return "TokenClassifierOutput";
    case Task::QuestionAnswering:
      return span_outputs(b, classifier(m, cfg, 2, prediction_head(m, cfg, x)));
    default:
      break;
  }
  fail("internal error: encoder task ", task_name(task), " was not refused");
}

ExportModel build_modernbert(const Checkpoint& ckpt, const ExportConfig& config) {
  const ModernBertConfig cfg = parse_modernbert(ckpt.config());
  ExportModel out{"modernbert", cfg.architectures, {}, {}};
  const std::optional<SentencePooling> pooling = read_sentence_pooling(ckpt);
  out.task = resolve_encoder_task("modernbert", config, cfg.architectures, pooling, ckpt);
  // The base model's checkpoint has no prefix; a head class's holds it under "model.".
  const std::string p = ckpt.find("model.embeddings.tok_embeddings.weight") ? "model." : "";
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  b.set_scope("inputs");
  const Inputs in = modernbert_inputs(m, cfg);
  Value* positions = in.position_ids;
  if (!positions) {
    Value* count = token_count(b, in.input_ids);
    Value* row = b.unsqueeze(b.range(b.const_i64({0}), count, b.const_i64({1}), in.input_ids->shape[1]), {0});
    positions = b.expand(row, b.shape_of(in.input_ids), in.input_ids->shape);  // a row per batch entry (RoPE tables are per row)
  }
  const bool any_local = std::find(cfg.local.begin(), cfg.local.end(), true) != cfg.local.end();
  const bool any_global = std::find(cfg.local.begin(), cfg.local.end(), false) != cfg.local.end();
  std::pair<Value*, Value*> ropes[2];
  Value* masks[2] = {nullptr, nullptr};
  b.set_scope("rope");
  if (any_global) ropes[kGlobal] = rope_cos_sin(b, cfg.ropes[kGlobal], positions);
  if (any_local) ropes[kLocal] = rope_cos_sin(b, cfg.ropes[kLocal], positions);
  b.set_scope("inputs");
  if (any_global) masks[kGlobal] = attention_mask(b, in, std::nullopt);
  if (any_local) masks[kLocal] = attention_mask(b, in, cfg.reach);
  b.set_scope(p + "embeddings");
  Value* x = b.embedding(m.weight(p + "embeddings.tok_embeddings.weight", {cfg.vocab, cfg.hidden}), in.input_ids);
  x = norm(m, p + "embeddings.norm", cfg, x);
  for (int64_t i = 0; i < cfg.layers; ++i) {
    const int kind = cfg.local[static_cast<size_t>(i)] ? kLocal : kGlobal;
    x = layer(m, p + "layers." + std::to_string(i) + ".", i, cfg, ropes[kind], masks[kind], x);
  }
  x = norm(m, p + "final_norm", cfg, x);
  const char* output_type = finish_task(m, out.task, p, cfg, pooling, in, x);
  finish_encoder(m, out, ckpt, p, output_type, cfg.layers, pooling);
  return out;
}

}  // namespace

HFX_REGISTER_ARCH("modernbert", build_modernbert)

}  // namespace hfx
