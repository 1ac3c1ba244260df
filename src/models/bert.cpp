// BERT (bert), the RoBERTa family (roberta, xlm-roberta, camembert), DistilBERT (distilbert: its
// own module and config key names, no token types, a ReLU classifier head) and ELECTRA (electra:
// embeddings of their own embedding_size, projected to the hidden size; no pooler; GELU
// heads) and MPNet (mpnet: RoBERTa's positions from a padding index fixed at 1 and its heads, no
// token types, a relative position bias shared by the layers): token + token-type +
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
#include "models/encoder.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/sentence_pooling.h"

namespace hfx {
namespace {

constexpr int64_t kMaxBatch = 4096;

// The layer's modules, under encoder.layer.{i}. (BERT's) or transformer.layer.{i}. (DistilBERT's).
struct EncoderNames {
  const char *layers, *q, *k, *v, *o, *attention_norm, *up, *down, *output_norm;
};
constexpr EncoderNames kBertNames{"encoder.layer.", "attention.self.query", "attention.self.key",
                                  "attention.self.value", "attention.output.dense", "attention.output.LayerNorm",
                                  "intermediate.dense", "output.dense", "output.LayerNorm"};
constexpr EncoderNames kMpnetNames{"encoder.layer.", "attention.attn.q", "attention.attn.k", "attention.attn.v",
                                   "attention.attn.o", "attention.LayerNorm", "intermediate.dense", "output.dense",
                                   "output.LayerNorm"};
constexpr EncoderNames kDistilNames{"transformer.layer.", "attention.q_lin", "attention.k_lin", "attention.v_lin",
                                    "attention.out_lin", "sa_layer_norm", "ffn.lin1", "ffn.lin2", "output_layer_norm"};

// The heads' modules: BERT's (pooler + classifier; cls.predictions), RoBERTa's (a dense + tanh
// classifier; lm_head), DistilBERT's (pre_classifier + ReLU + classifier; vocab_*) or ELECTRA's
// (a dense + GELU classifier; generator_predictions + generator_lm_head).
enum class Heads { Bert, Roberta, Distil, Electra };

// What the family changes: the head classes' prefix, how positions are numbered, token types,
// the config's key names, the modules.
struct BertFamily {
  const char* prefix;           // "bert.", "roberta.", "distilbert."
  bool positions_from_padding;  // RoBERTa: pad_token_id + 1 + index among the non-pad tokens
  Heads heads;
  bool distil_config = false;   // DistilBERT's keys: dim, hidden_dim, n_heads, n_layers, activation (no token types)
  const EncoderNames& names = kBertNames;
  bool token_types = true;
  // MPNet: positions count from padding index 1 whatever pad_token_id says, and the scores get a
  // relative position bias (encoder.relative_attention_bias), one table for every layer.
  bool mpnet = false;
};
constexpr BertFamily kBert{"bert.", false, Heads::Bert}, kRoberta{"roberta.", true, Heads::Roberta},
    kDistilBert{"distilbert.", false, Heads::Distil, true, kDistilNames}, kElectra{"electra.", false, Heads::Electra},
    kMpnet{"mpnet.", true, Heads::Roberta, false, kMpnetNames, false, true};

// MPNet's relative position buckets: 32 (compute_position_bias's default, whatever the table's
// size), distances up to 128, both directions.
constexpr int64_t kMpnetBuckets = 32, kMpnetMaxDistance = 128;

struct BertConfig {
  std::vector<std::string> architectures;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, intermediate = 0, max_positions = 0, type_vocab = 0;
  int64_t embedding = 0;  // the embeddings' width: ELECTRA's embedding_size, else the hidden size
  double eps = 1e-12;
  std::string activation;
  bool token_types = true;
  bool tied = true;    // the masked-LM decoder is the word embeddings
  int64_t labels = 2;  // classification heads' outputs
  std::optional<int64_t> padding_positions;  // RoBERTa: pad_token_id, where positions start
  int64_t relative_buckets = 0;              // MPNet: rows of encoder.relative_attention_bias
};

BertConfig parse_bert(const JsonConfig& c, const BertFamily& family) {
  BertConfig cfg;
  cfg.architectures = architectures(c);
  const bool d = family.distil_config;
  cfg.vocab = c.positive("vocab_size", 30522);
  cfg.hidden = c.positive(d ? "dim" : "hidden_size", 768);
  cfg.layers = c.positive(d ? "n_layers" : "num_hidden_layers", d ? 6 : 12);
  cfg.heads = c.positive(d ? "n_heads" : "num_attention_heads", 12);
  if (cfg.hidden % cfg.heads != 0) c.invalid(d ? "n_heads" : "num_attention_heads", "must divide the hidden size");
  cfg.intermediate = c.positive(d ? "hidden_dim" : "intermediate_size", d ? 4 * cfg.hidden : 3072);
  cfg.embedding = family.heads == Heads::Electra ? c.positive("embedding_size", 128) : cfg.hidden;
  cfg.max_positions = c.positive("max_position_embeddings", 512);
  cfg.token_types = !d && family.token_types;
  if (cfg.token_types) cfg.type_vocab = c.positive("type_vocab_size", 2);
  cfg.eps = d ? 1e-12 : c.number("layer_norm_eps", 1e-12);  // DistilBERT's is fixed
  if (cfg.eps < 0) c.invalid("layer_norm_eps", "must not be negative");
  const char* activation_key = d ? "activation" : "hidden_act";
  cfg.activation = c.string(activation_key, "gelu");
  check_activation(c, activation_key, cfg.activation);
  // transformers 4.x's relative position embeddings (removed in 5.x) and the decoder forms.
  if (const std::string p = c.string("position_embedding_type", "absolute"); p != "absolute")
    c.invalid("position_embedding_type", "\"" + p + "\" is not supported (absolute positions only)");
  if (c.boolean("is_decoder", false)) c.invalid("is_decoder", "true is not supported (BERT as an encoder only)");
  if (c.boolean("add_cross_attention", false)) c.invalid("add_cross_attention", "true is not supported");
  cfg.tied = c.boolean("tie_word_embeddings", true);
  cfg.labels = label_count(c);
  if (family.mpnet) {
    cfg.relative_buckets = c.positive("relative_attention_num_buckets", 32);
    if (cfg.relative_buckets < kMpnetBuckets)
      c.invalid("relative_attention_num_buckets", "must be at least 32: MPNet's attention indexes 32 buckets");
    cfg.padding_positions = 1;  // MPNetEmbeddings.padding_idx
    if (cfg.max_positions <= 2) c.invalid("max_position_embeddings", "must exceed 2 (positions start after index 1)");
  } else if (family.positions_from_padding) {
    if (c.json().contains("pad_token_id") && c.json().at("pad_token_id").is_null())
      c.invalid("pad_token_id", "must be set: positions are numbered after the padding token");
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

// RoBERTa's positions run to sequence + pad_token_id.
int64_t longest_sequence(const BertConfig& cfg) {
  return cfg.max_positions - (cfg.padding_positions ? *cfg.padding_positions + 1 : 0);
}

BertInputs bert_inputs(ModelBuilder& m, const BertConfig& cfg) {
  std::vector<std::string> declared = {"input_ids", "attention_mask", "token_type_ids", "position_ids"};
  if (!cfg.token_types) declared.erase(declared.begin() + 2);  // DistilBERT, MPNet
  // By default what the family's tokenizer returns: token types only where there are several
  // (RoBERTa's tokenizers return none; its type_vocab_size is 1).
  std::vector<std::string> defaults = {"input_ids", "attention_mask"};
  if (cfg.token_types && cfg.type_vocab > 1) defaults.push_back("token_type_ids");
  const std::vector<std::string> names = m.taken_inputs(declared, defaults);
  auto has = [&](const char* name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  if (!has("input_ids")) fail("inputs: must include input_ids");
  Builder& b = m.b();
  const int64_t longest = longest_sequence(cfg);
  const Dim batch = m.dim("batch", 1, kMaxBatch), sequence = m.dim("sequence", 1, longest);
  BertInputs in;
  for (const std::string& name : declared)
    if (has(name.c_str())) {
      Value* v = b.input(name, DType::I64, {batch, sequence});
      (name == "input_ids" ? in.input_ids
       : name == "attention_mask" ? in.attention_mask
       : name == "token_type_ids" ? in.token_type_ids
                                  : in.position_ids) = v;
    }
  return in;
}

// RoBERTa's positions (create_position_ids_from_input_ids): cumsum(ids != pad) * (ids != pad) + pad.
Value* positions_after_padding(Builder& b, Value* input_ids, int64_t pad) {
  Value* pad_id = b.const_i64({pad});
  Value* real = b.cast(b.logical_not(b.compare(OpKind::Equal, input_ids, pad_id)), DType::I64);
  return b.add(b.mul(b.cumsum(real, 1), real), pad_id);
}

// MPNetEncoder.relative_position_bucket of `relative` (key - query): T5's, in float32, so that
// the buckets' edges (distances 16, 32, 64) fall where they do there.
int64_t mpnet_bucket(int64_t relative) { return bidirectional_bucket(relative, kMpnetBuckets, kMpnetMaxDistance); }

// [1, heads, sequence, sequence]: encoder.relative_attention_bias's row for each (query, key)
// pair's bucket. The buckets of every distance the positions allow are a constant table,
// indexed by key - query + (longest - 1).
Value* mpnet_position_bias(ModelBuilder& m, const std::string& p, const BertConfig& cfg, Value* input_ids) {
  Builder& b = m.b();
  b.set_scope(p + "encoder");
  const int64_t longest = longest_sequence(cfg);
  std::vector<int64_t> table;
  for (int64_t relative = -(longest - 1); relative < longest; ++relative) table.push_back(mpnet_bucket(relative));
  Value* buckets = by_distance(b, table, input_ids);
  Value* weights = m.weight(p + "encoder.relative_attention_bias.weight", {cfg.relative_buckets, cfg.heads});
  Value* bias = b.embedding(weights, buckets);  // [S, S, heads]
  return b.unsqueeze(b.transpose(bias, {2, 0, 1}), {0});
}

// Over the hidden size, or ELECTRA's embedding size.
Value* layer_norm(ModelBuilder& m, const std::string& module, Value* x, const BertConfig& cfg) {
  return encoder_layer_norm(m, module, x, cfg.eps);
}

Value* dense(ModelBuilder& m, const std::string& module, int64_t out, int64_t in, Value* x) {
  return encoder_dense(m, module, out, in, x);
}

Value* embeddings(ModelBuilder& m, const std::string& p, const BertConfig& cfg, const BertInputs& in) {
  Builder& b = m.b();
  b.set_scope(p + "embeddings");
  Value* x = b.embedding(m.weight(p + "embeddings.word_embeddings.weight", {cfg.vocab, cfg.embedding}), in.input_ids);
  if (cfg.token_types) {
    Value* types = m.weight(p + "embeddings.token_type_embeddings.weight", {cfg.type_vocab, cfg.embedding});
    x = b.add(x, in.token_type_ids ? b.embedding(types, in.token_type_ids) : b.gather(types, b.const_i64({0}), 0));
  }
  Value* positions = in.position_ids               ? in.position_ids
                     : cfg.padding_positions ? positions_after_padding(b, in.input_ids, *cfg.padding_positions)
                                             : arange_tokens(b, in.input_ids);
  x = b.add(x, b.embedding(m.weight(p + "embeddings.position_embeddings.weight", {cfg.max_positions, cfg.embedding}),
                           positions));
  x = layer_norm(m, p + "embeddings.LayerNorm", x, cfg);
  // ELECTRA's embeddings are narrower than its layers where embedding_size says so.
  return cfg.embedding == cfg.hidden ? x : dense(m, p + "embeddings_project", cfg.hidden, cfg.embedding, x);
}

Value* encoder_layer(ModelBuilder& m, const std::string& p, const BertConfig& cfg, const EncoderNames& names,
                     Value* mask, Value* bias, Value* x) {
  AttentionSpec attention{.hidden = cfg.hidden, .heads = cfg.heads, .kv_heads = cfg.heads, .head_dim = cfg.hidden / cfg.heads};
  attention.q = names.q, attention.k = names.k, attention.v = names.v, attention.o = names.o;
  attention.qkv_bias = attention.o_bias = true;
  const AttentionContext ctx{nullptr, nullptr, mask, [](Value* k, Value* v) { return std::pair{k, v}; }, false, bias};
  Value* a = attention_block(m, p, attention, x, ctx);
  x = layer_norm(m, p + names.attention_norm, m.b().add(a, x), cfg);
  MlpSpec mlp{.hidden = cfg.hidden, .intermediate = cfg.intermediate, .bias = true, .activation = cfg.activation,
              .gated = false};
  mlp.up = names.up, mlp.down = names.down;
  Value* h = gated_mlp(m, p, mlp, x);
  return layer_norm(m, p + names.output_norm, m.b().add(h, x), cfg);
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

// The masked-LM head: dense, activation, LayerNorm, then the decoder (the word embeddings when
// tied) plus its bias. BERT's cls.predictions.transform (hidden_act), RoBERTa's lm_head (GELU).
Value* masked_lm_head(ModelBuilder& m, const std::string& p, const BertConfig& cfg, const BertFamily& family,
                      Value* x) {
  Builder& b = m.b();
  if (family.heads == Heads::Distil) {
    x = activation(b, cfg.activation, dense(m, "vocab_transform", cfg.hidden, cfg.hidden, x));
    x = layer_norm(m, "vocab_layer_norm", x, cfg);
    b.set_scope("vocab_projector");
    if (cfg.tied) m.tolerate("vocab_projector.weight");
    const std::string weight = cfg.tied ? p + "embeddings.word_embeddings.weight" : "vocab_projector.weight";
    return b.linear(x, m.weight(weight, {cfg.vocab, cfg.hidden}), m.weight("vocab_projector.bias", {cfg.vocab}));
  }
  if (family.heads == Heads::Electra) {  // GELU whatever hidden_act says, a LayerNorm of the embedding size
    x = activation(b, "gelu", dense(m, "generator_predictions.dense", cfg.embedding, cfg.hidden, x));
    x = layer_norm(m, "generator_predictions.LayerNorm", x, cfg);
    b.set_scope("generator_lm_head");
    if (cfg.tied) m.tolerate("generator_lm_head.weight");
    const std::string weight = cfg.tied ? p + "embeddings.word_embeddings.weight" : "generator_lm_head.weight";
    return b.linear(x, m.weight(weight, {cfg.vocab, cfg.embedding}), m.weight("generator_lm_head.bias", {cfg.vocab}));
  }
  const bool roberta = family.heads == Heads::Roberta;
  m.tolerate("cls.seq_relationship.weight");  // BertForPreTraining's next-sentence head (bert-base-uncased)
  m.tolerate("cls.seq_relationship.bias");
  const std::string head = roberta ? "lm_head." : "cls.predictions.";
  const std::string transform = roberta ? "lm_head." : "cls.predictions.transform.";
  x = dense(m, transform + "dense", cfg.hidden, cfg.hidden, x);
  x = activation(b, roberta ? "gelu" : cfg.activation, x);
  x = layer_norm(m, transform + (roberta ? "layer_norm" : "LayerNorm"), x, cfg);
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
      // A sentence-transformers checkpoint's Transformer module: the token embeddings alone (what
      // its ONNX backend and OpenVINO GenAI's TextEmbeddingPipeline pool themselves).
      b.output(x, "last_hidden_state");
      if (pooling) {
        m.tolerate(p + "pooler.dense.weight");
        m.tolerate(p + "pooler.dense.bias");
      }
      if (pooling || !m.has(p + "pooler.dense.weight")) return "BaseModelOutputWithPoolingAndCrossAttentions";
      b.output(pooler(m, p, cfg, x), "pooler_output");
      return "BaseModelOutputWithPoolingAndCrossAttentions";
    case Task::SentenceSimilarity:
      b.output(x, "last_hidden_state");
      b.set_scope("pooling");
      b.output(sentence_embedding(b, *pooling, x, in.attention_mask), "sentence_embedding");
      m.tolerate(p + "pooler.dense.weight");  // the pooler is BertModel's, not the sentence embedding's
      m.tolerate(p + "pooler.dense.bias");
      return "BaseModelOutputWithPoolingAndCrossAttentions";
    case Task::TextClassification: {  // over the first token: BERT's pooler, RoBERTa's dense + tanh,
                                      // DistilBERT's + ReLU, ELECTRA's + GELU
      Value* first = b.gather(x, b.const_i64({0}), 1);
      if (family.heads == Heads::Bert) first = pooler(m, p, cfg, x);
      if (family.heads == Heads::Roberta)
        first = b.unary(OpKind::Tanh, dense(m, "classifier.dense", cfg.hidden, cfg.hidden, first));
      if (family.heads == Heads::Distil)
        first = b.max(dense(m, "pre_classifier", cfg.hidden, cfg.hidden, first), b.scalar(0.0, first->dtype));
      if (family.heads == Heads::Electra)
        first = activation(b, "gelu", dense(m, "classifier.dense", cfg.hidden, cfg.hidden, first));
      const bool out_proj = family.heads == Heads::Roberta || family.heads == Heads::Electra;
      const char* classifier = out_proj ? "classifier.out_proj" : "classifier";
      b.output(dense(m, classifier, cfg.labels, cfg.hidden, first), "logits");
      return "SequenceClassifierOutput";
    }
    case Task::TokenClassification:
      b.output(dense(m, "classifier", cfg.labels, cfg.hidden, x), "logits");
      return "TokenClassifierOutput";
    case Task::FillMask:
      b.output(masked_lm_head(m, p, cfg, family, x), "logits");
      return "MaskedLMOutput";
    case Task::QuestionAnswering:
      return span_outputs(b, dense(m, "qa_outputs", 2, cfg.hidden, x));
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
  out.task = resolve_encoder_task(model_type, config, cfg.architectures, pooling, ckpt);
  // The base model's own checkpoint has no prefix; a head class's holds it under the family's
  // prefix, beside its head.
  const std::string p = ckpt.find(std::string(family.prefix) + "embeddings.word_embeddings.weight") ? family.prefix : "";
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  b.set_scope("inputs");
  const BertInputs in = bert_inputs(m, cfg);
  Value* mask = in.attention_mask ? padding_mask(b, in.input_ids, in.attention_mask) : nullptr;
  Value* x = embeddings(m, p, cfg, in);
  Value* bias = family.mpnet ? mpnet_position_bias(m, p, cfg, in.input_ids) : nullptr;
  for (int64_t i = 0; i < cfg.layers; ++i)
    x = encoder_layer(m, p + family.names.layers + std::to_string(i) + ".", cfg, family.names, mask, bias, x);
  const char* output_type = finish_task(m, out.task, p, cfg, family, pooling, in, x);
  if (out.task != Task::FeatureExtraction && out.task != Task::SentenceSimilarity) {
    // a pooler some head classes carry and their head does not read
    m.tolerate(p + "pooler.dense.weight");
    m.tolerate(p + "pooler.dense.bias");
  }
  m.tolerate(p + "embeddings.position_ids");  // old checkpoints' buffers
  m.tolerate(p + "embeddings.token_type_ids");
  finish_encoder(m, out, ckpt, p, output_type, cfg.layers, pooling);
  return out;
}

}  // namespace

HFX_REGISTER_ARCH("bert", [](const Checkpoint& c, const ExportConfig& x) { return build_encoder(c, x, kBert); })
HFX_REGISTER_ARCH("roberta", [](const Checkpoint& c, const ExportConfig& x) { return build_encoder(c, x, kRoberta); })
HFX_REGISTER_ARCH("xlm-roberta", [](const Checkpoint& c, const ExportConfig& x) { return build_encoder(c, x, kRoberta); })
HFX_REGISTER_ARCH("distilbert", [](const Checkpoint& c, const ExportConfig& x) { return build_encoder(c, x, kDistilBert); })
HFX_REGISTER_ARCH("electra", [](const Checkpoint& c, const ExportConfig& x) { return build_encoder(c, x, kElectra); })
HFX_REGISTER_ARCH("mpnet", [](const Checkpoint& c, const ExportConfig& x) { return build_encoder(c, x, kMpnet); })
HFX_REGISTER_ARCH("camembert", [](const Checkpoint& c, const ExportConfig& x) { return build_encoder(c, x, kRoberta); })

}  // namespace hfx
