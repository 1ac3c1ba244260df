// BERT (bert) and the RoBERTa family (roberta, xlm-roberta, camembert): token + token-type +
// absolute position embeddings under a LayerNorm, post-LayerNorm encoder layers (attention and a
// plain GELU MLP, biases everywhere) over a bidirectional padding mask, and the pooler (dense +
// tanh over the first token) where the checkpoint has one. RoBERTa numbers positions from
// pad_token_id + 1 over the tokens that are not padding (pads keep pad_token_id).
// feature-extraction: last_hidden_state and, with a pooler, pooler_output (BertModel's outputs);
// sentence-similarity (the default for a sentence-transformers checkpoint): last_hidden_state and
// the sentence_embedding its Pooling / Normalize modules make.
// Checkpoints as saved from the base model (no prefix) or from a head class (the family's prefix;
// the head's weights unread).
#include <algorithm>
#include <optional>

#include "core/error.h"
#include "models/blocks.h"
#include "models/decoder.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/sentence_pooling.h"

namespace hfx {
namespace {

constexpr int64_t kMaxBatch = 4096;

// What the family changes: the head classes' prefix, how positions are numbered, and the heads'
// modules (RoBERTa classifies with its own dense + tanh head, and names its masked-LM head lm_head).
struct BertFamily {
  const char* prefix;           // "bert.", "roberta."
  bool positions_from_padding;  // RoBERTa: pad_token_id + 1 + index among the non-pad tokens
  bool roberta_heads;
};
constexpr BertFamily kBert{"bert.", false, false}, kRoberta{"roberta.", true, true};

struct BertConfig {
  std::vector<std::string> architectures;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, intermediate = 0, max_positions = 0, type_vocab = 0;
  double eps = 1e-12;
  std::string activation;
  bool tied = true;    // the masked-LM decoder is the word embeddings
  int64_t labels = 2;  // classification heads' outputs
  std::optional<int64_t> padding_positions;  // RoBERTa: pad_token_id, where positions start
};

BertConfig parse_bert(const JsonConfig& c, const BertFamily& family) {
  BertConfig cfg;
  cfg.architectures = architectures(c);
  cfg.vocab = c.positive("vocab_size", 30522);
  cfg.hidden = c.positive("hidden_size", 768);
  cfg.layers = c.positive("num_hidden_layers", 12);
  cfg.heads = c.positive("num_attention_heads", 12);
  if (cfg.hidden % cfg.heads != 0) c.invalid("num_attention_heads", "must divide hidden_size");
  cfg.intermediate = c.positive("intermediate_size", 3072);
  cfg.max_positions = c.positive("max_position_embeddings", 512);
  cfg.type_vocab = c.positive("type_vocab_size", 2);
  cfg.eps = c.number("layer_norm_eps", 1e-12);
  if (cfg.eps < 0) c.invalid("layer_norm_eps", "must not be negative");
  cfg.activation = c.string("hidden_act", "gelu");
  check_activation(c, "hidden_act", cfg.activation);
  // transformers 4.x's relative position embeddings (removed in 5.x) and the decoder forms.
  if (const std::string p = c.string("position_embedding_type", "absolute"); p != "absolute")
    c.invalid("position_embedding_type", "\"" + p + "\" is not supported (absolute positions only)");
  if (c.boolean("is_decoder", false)) c.invalid("is_decoder", "true is not supported (BERT as an encoder only)");
  if (c.boolean("add_cross_attention", false)) c.invalid("add_cross_attention", "true is not supported");
  cfg.tied = c.boolean("tie_word_embeddings", true);
  // num_labels is written as id2label (transformers saves the map, not the count).
  if (c.has("id2label") && c.at("id2label").is_object() && !c.at("id2label").empty())
    cfg.labels = static_cast<int64_t>(c.at("id2label").size());
  else
    cfg.labels = c.positive("num_labels", 2);
  if (family.positions_from_padding) {
    const int64_t pad = c.integer("pad_token_id", 1);
    if (pad < 0 || pad + 1 >= cfg.max_positions)
      c.invalid("pad_token_id", "positions start after it: it must be below max_position_embeddings - 1");
    cfg.padding_positions = pad;
  }
  return cfg;
}

// The inputs BERT declares: input_ids, attention_mask and token_type_ids by default (optimum's and
// sentence-transformers' ONNX signature); position_ids when asked for (else 0..sequence-1, as
// BertModel's forward uses). Left out: token types 0, every token attended.
struct BertInputs {
  Value *input_ids = nullptr, *attention_mask = nullptr, *token_type_ids = nullptr, *position_ids = nullptr;
};

BertInputs bert_inputs(ModelBuilder& m, const BertConfig& cfg) {
  static constexpr const char* kDeclared[] = {"input_ids", "attention_mask", "token_type_ids", "position_ids"};
  std::vector<std::string> names = m.config().inputs;
  if (names.empty()) names = {"input_ids", "attention_mask", "token_type_ids"};
  for (const std::string& name : names)
    if (std::find(std::begin(kDeclared), std::end(kDeclared), name) == std::end(kDeclared))
      fail("inputs: '", name, "' is not an input of this model (it takes input_ids, attention_mask, token_type_ids, "
           "position_ids)");
  auto has = [&](const char* name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  if (!has("input_ids")) fail("inputs: must include input_ids");
  Builder& b = m.b();
  // RoBERTa's positions run to sequence + pad_token_id.
  const int64_t longest = cfg.max_positions - (cfg.padding_positions ? *cfg.padding_positions + 1 : 0);
  const Dim batch = m.dim("batch", 1, kMaxBatch), sequence = m.dim("sequence", 1, longest);
  BertInputs in;
  for (const char* name : kDeclared)
    if (has(name)) {
      Value* v = b.input(name, DType::I64, {batch, sequence});
      (std::string_view(name) == "input_ids" ? in.input_ids
       : std::string_view(name) == "attention_mask" ? in.attention_mask
       : std::string_view(name) == "token_type_ids" ? in.token_type_ids
                                                    : in.position_ids) = v;
    }
  return in;
}

Value* token_count(Builder& b, Value* input_ids) { return b.gather(b.shape_of(input_ids), b.const_i64({1}), 0); }

// [sequence] 0..sequence-1, the positions (and the key slots) of this call's tokens.
Value* arange_tokens(Builder& b, Value* input_ids) {
  return b.range(b.const_i64({0}), token_count(b, input_ids), b.const_i64({1}), input_ids->shape[1]);
}

// [batch, 1, sequence, sequence] bool: every query sees every key the attention_mask keeps (the
// full [S, S] shape: some attention kernels index the mask by query). key > query - count holds
// for every pair.
Value* padding_mask(Builder& b, Value* input_ids, Value* attention_mask) {
  Value* slots = arange_tokens(b, input_ids);
  Value* rows = b.unsqueeze(slots, {1});
  Value* every = b.compare(OpKind::Greater, b.unsqueeze(slots, {0}), b.sub(rows, token_count(b, input_ids)));
  Value* kept = b.unsqueeze(b.compare(OpKind::Greater, attention_mask, b.const_i64({0})), {1, 2});
  return b.logical_and(b.unsqueeze(every, {0, 1}), kept);
}

// RoBERTa's positions (create_position_ids_from_input_ids): cumsum(ids != pad) * (ids != pad) + pad.
Value* positions_after_padding(Builder& b, Value* input_ids, int64_t pad) {
  Value* pad_id = b.const_i64({pad});
  Value* real = b.cast(b.logical_not(b.compare(OpKind::Equal, input_ids, pad_id)), DType::I64);
  return b.add(b.mul(b.cumsum(real, 1), real), pad_id);
}

Value* layer_norm(ModelBuilder& m, const std::string& module, Value* x, const BertConfig& cfg) {
  m.b().set_scope(module);
  return m.b().layer_norm(x, m.weight(module + ".weight", {cfg.hidden}), m.weight(module + ".bias", {cfg.hidden}),
                          cfg.eps);
}

Value* embeddings(ModelBuilder& m, const std::string& p, const BertConfig& cfg, const BertInputs& in) {
  Builder& b = m.b();
  b.set_scope(p + "embeddings");
  Value* x = b.embedding(m.weight(p + "embeddings.word_embeddings.weight", {cfg.vocab, cfg.hidden}), in.input_ids);
  Value* types = m.weight(p + "embeddings.token_type_embeddings.weight", {cfg.type_vocab, cfg.hidden});
  x = b.add(x, in.token_type_ids ? b.embedding(types, in.token_type_ids) : b.gather(types, b.const_i64({0}), 0));
  Value* positions = in.position_ids               ? in.position_ids
                     : cfg.padding_positions ? positions_after_padding(b, in.input_ids, *cfg.padding_positions)
                                             : arange_tokens(b, in.input_ids);
  x = b.add(x, b.embedding(m.weight(p + "embeddings.position_embeddings.weight", {cfg.max_positions, cfg.hidden}),
                           positions));
  return layer_norm(m, p + "embeddings.LayerNorm", x, cfg);
}

Value* encoder_layer(ModelBuilder& m, const std::string& p, const BertConfig& cfg, Value* mask, Value* x) {
  AttentionSpec attention{.hidden = cfg.hidden, .heads = cfg.heads, .kv_heads = cfg.heads, .head_dim = cfg.hidden / cfg.heads};
  attention.q = "self.query", attention.k = "self.key", attention.v = "self.value", attention.o = "output.dense";
  attention.qkv_bias = attention.o_bias = true;
  const AttentionContext ctx{nullptr, nullptr, mask, [](Value* k, Value* v) { return std::pair{k, v}; }, false};
  Value* a = attention_block(m, p + "attention.", attention, x, ctx);
  x = layer_norm(m, p + "attention.output.LayerNorm", m.b().add(a, x), cfg);
  MlpSpec mlp{.hidden = cfg.hidden, .intermediate = cfg.intermediate, .bias = true, .activation = cfg.activation,
              .gated = false};
  mlp.up = "intermediate.dense", mlp.down = "output.dense";
  Value* h = gated_mlp(m, p, mlp, x);
  return layer_norm(m, p + "output.LayerNorm", m.b().add(h, x), cfg);
}

// dense + tanh over each row's first token ([CLS]).
Value* pooler(ModelBuilder& m, const std::string& p, const BertConfig& cfg, Value* hidden) {
  Builder& b = m.b();
  b.set_scope(p + "pooler");
  Value* first = b.gather(hidden, b.const_i64({0}), 1);
  Value* dense = b.linear(first, m.weight(p + "pooler.dense.weight", {cfg.hidden, cfg.hidden}),
                          m.weight(p + "pooler.dense.bias", {cfg.hidden}));
  return b.unary(OpKind::Tanh, dense);
}

Value* dense(ModelBuilder& m, const std::string& module, int64_t out, int64_t in, Value* x) {
  m.b().set_scope(module);
  return m.b().linear(x, m.weight(module + ".weight", {out, in}), m.weight(module + ".bias", {out}));
}

// The masked-LM head: dense, activation, LayerNorm, then the decoder (the word embeddings when
// tied) plus its bias. BERT's cls.predictions.transform (hidden_act), RoBERTa's lm_head (GELU).
Value* masked_lm_head(ModelBuilder& m, const std::string& p, const BertConfig& cfg, const BertFamily& family,
                      Value* x) {
  Builder& b = m.b();
  const std::string head = family.roberta_heads ? "lm_head." : "cls.predictions.";
  const std::string transform = family.roberta_heads ? "lm_head." : "cls.predictions.transform.";
  x = dense(m, transform + "dense", cfg.hidden, cfg.hidden, x);
  x = activation(b, family.roberta_heads ? "gelu" : cfg.activation, x);
  x = layer_norm(m, transform + (family.roberta_heads ? "layer_norm" : "LayerNorm"), x, cfg);
  b.set_scope(head + "decoder");
  const std::string decoder = cfg.tied ? p + "embeddings.word_embeddings.weight" : head + "decoder.weight";
  // Tied, the decoder's bias is the head's `bias` (also saved as decoder.bias by some versions);
  // untied (transformers 5.x), the decoder keeps a bias of its own.
  const std::string bias = !cfg.tied && m.has(head + "decoder.bias") ? head + "decoder.bias" : head + "bias";
  for (const std::string& copy : {head + "decoder.weight", head + "decoder.bias", head + "bias"})
    if (copy != decoder && copy != bias) m.tolerate(copy);
  return b.linear(x, m.weight(decoder, {cfg.vocab, cfg.hidden}), m.weight(bias, {cfg.vocab}));
}

// The task's outputs over the final hidden states; returns the transformers output class.
const char* finish_task(ModelBuilder& m, Task task, const std::string& p, const BertConfig& cfg, const BertFamily& family,
                        const std::optional<SentencePooling>& pooling, const BertInputs& in, Value* x) {
  Builder& b = m.b();
  switch (task) {
    case Task::FeatureExtraction:
      b.output(x, "last_hidden_state");
      if (!m.has(p + "pooler.dense.weight")) return "BaseModelOutputWithPoolingAndCrossAttentions";
      b.output(pooler(m, p, cfg, x), "pooler_output");
      return "BaseModelOutputWithPoolingAndCrossAttentions";
    case Task::SentenceSimilarity:
      b.output(x, "last_hidden_state");
      b.set_scope("pooling");
      b.output(sentence_embedding(b, *pooling, x, in.attention_mask), "sentence_embedding");
      m.tolerate(p + "pooler.dense.weight");  // the pooler is BertModel's, not the sentence embedding's
      m.tolerate(p + "pooler.dense.bias");
      return "BaseModelOutputWithPoolingAndCrossAttentions";
    case Task::TextClassification: {  // over the first token: BERT's pooler, or RoBERTa's dense + tanh
      Value* first = family.roberta_heads
                         ? b.unary(OpKind::Tanh, dense(m, "classifier.dense", cfg.hidden, cfg.hidden, b.gather(x, b.const_i64({0}), 1)))
                         : pooler(m, p, cfg, x);
      b.output(dense(m, family.roberta_heads ? "classifier.out_proj" : "classifier", cfg.labels, cfg.hidden, first), "logits");
      return "SequenceClassifierOutput";
    }
    case Task::TokenClassification:
      b.output(dense(m, "classifier", cfg.labels, cfg.hidden, x), "logits");
      return "TokenClassifierOutput";
    case Task::FillMask:
      b.output(masked_lm_head(m, p, cfg, family, x), "logits");
      return "MaskedLMOutput";
    case Task::QuestionAnswering: {
      Value* spans = dense(m, "qa_outputs", 2, cfg.hidden, x);
      b.output(b.gather(spans, b.const_i64({0}), 2), "start_logits");
      b.output(b.gather(spans, b.const_i64({1}), 2), "end_logits");
      return "QuestionAnsweringModelOutput";
    }
    default:
      break;
  }
  fail("internal error: encoder task ", task_name(task), " was not refused");
}

ExportModel build_encoder(const Checkpoint& ckpt, const ExportConfig& config, const BertFamily& family) {
  const BertConfig cfg = parse_bert(ckpt.config(), family);
  const std::string model_type = ckpt.config().string("model_type", "bert");
  ExportModel out{model_type, cfg.architectures, {}, {}};
  const std::optional<SentencePooling> pooling = read_sentence_pooling(ckpt);
  out.task = config.task.empty() && pooling ? Task::SentenceSimilarity
                                            : resolve_task(config.task, cfg.architectures, Task::FeatureExtraction);
  constexpr Task kTasks[] = {Task::FeatureExtraction, Task::SentenceSimilarity, Task::TextClassification,
                             Task::TokenClassification, Task::FillMask, Task::QuestionAnswering};
  if (std::find(std::begin(kTasks), std::end(kTasks), out.task) == std::end(kTasks))
    fail("task: ", model_type, " exports feature-extraction, sentence-similarity, text-classification, "
         "token-classification, fill-mask or question-answering, not ", task_name(out.task),
         config.task.empty() ? " (from config.json's architectures; give --task)" : "");
  if (out.task == Task::SentenceSimilarity && !pooling)
    fail("task: sentence-similarity needs a sentence-transformers checkpoint (modules.json with a Pooling module) in ",
         ckpt.dir().string());
  if (config.generation.enabled) fail("task: ", model_type, " is an encoder: it has no decode loop (--for-generation)");
  // The base model's own checkpoint has no prefix; a head class's holds it under the family's
  // prefix, beside its head.
  const std::string p = ckpt.find(std::string(family.prefix) + "embeddings.word_embeddings.weight") ? family.prefix : "";
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  b.set_scope("inputs");
  const BertInputs in = bert_inputs(m, cfg);
  Value* mask = in.attention_mask ? padding_mask(b, in.input_ids, in.attention_mask) : nullptr;
  Value* x = embeddings(m, p, cfg, in);
  for (int64_t i = 0; i < cfg.layers; ++i) x = encoder_layer(m, p + "encoder.layer." + std::to_string(i) + ".", cfg, mask, x);
  const char* output_type = finish_task(m, out.task, p, cfg, family, pooling, in, x);
  const bool base_outputs = out.task == Task::FeatureExtraction || out.task == Task::SentenceSimilarity;
  for (const TensorView* t : ckpt.tensors())  // a head class's own weights, when its outputs are not exported
    if (base_outputs && !p.empty() && !t->name.starts_with(p)) m.tolerate(t->name);
  if (!base_outputs) {  // a pooler some head classes carry and their head does not read
    m.tolerate(p + "pooler.dense.weight");
    m.tolerate(p + "pooler.dense.bias");
  }
  m.tolerate(p + "embeddings.position_ids");  // old checkpoints' buffers
  m.tolerate(p + "embeddings.token_type_ids");
  std::unique_ptr<Graph> graph = m.finish();
  graph->output_type = std::string("transformers.modeling_outputs.") + output_type;
  graph->num_layers = cfg.layers;
  out.dims.insert(m.dim_names().begin(), m.dim_names().end());
  out.components.push_back({Role::Forward, std::move(graph)});
  return out;
}

}  // namespace

HFX_REGISTER_ARCH("bert", [](const Checkpoint& c, const ExportConfig& x) { return build_encoder(c, x, kBert); })
HFX_REGISTER_ARCH("roberta", [](const Checkpoint& c, const ExportConfig& x) { return build_encoder(c, x, kRoberta); })
HFX_REGISTER_ARCH("xlm-roberta", [](const Checkpoint& c, const ExportConfig& x) { return build_encoder(c, x, kRoberta); })
HFX_REGISTER_ARCH("camembert", [](const Checkpoint& c, const ExportConfig& x) { return build_encoder(c, x, kRoberta); })

}  // namespace hfx
