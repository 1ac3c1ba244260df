// DeBERTa-v2 and -v3 (deberta-v2): BERT's post-LayerNorm encoder layers with disentangled
// attention. Embeddings: tokens (+ absolute positions where position_biased_input, + token types
// where type_vocab_size > 0), projected to the hidden size without bias where embedding_size
// differs, LayerNorm, then zeroed at the padding. Relative positions (query - key, log-bucketed
// where position_buckets > 0) index encoder.rel_embeddings (LayerNorm'ed where norm_rel_ebd says
// layer_norm); each layer projects those through its key / query projections (share_att_key) or
// its own pos_key_proj / pos_query_proj, and the scores gain content-to-position (c2p) and
// position-to-content (p2c) terms picked by GatherElements, all scaled by sqrt(head_dim x (1 +
// terms)). v2-xlarge's convolution (conv_kernel_size > 0) follows the first layer. As transformers
// masks both queries and keys, a padding query averages every value (a row of equal scores): the
// graph does the same, so the padded rows, and a pooler reading one, match too.
// Heads: feature-extraction (last_hidden_state), sentence-similarity, text-classification
// (ContextPooler: dense + pooler_hidden_act over the first token, then the classifier),
// token-classification, fill-mask (the legacy cls.predictions head or lm_predictions), question
// answering.
#include <algorithm>
#include <cmath>
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
constexpr const char* kPrefix = "deberta.";

struct DebertaConfig {
  std::vector<std::string> architectures;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, head_dim = 0, intermediate = 0, max_positions = 0;
  int64_t type_vocab = 0, embedding = 0, labels = 2;
  double eps = 1e-7;
  std::string activation, pooler_activation, conv_activation;
  bool absolute_positions = true, legacy = true, tied = true;
  // Disentangled attention: the terms in the scores, the span of relative distances (rows of
  // rel_embeddings: 2 x span), the log buckets (0: none) and the distance they reach.
  bool relative = false, c2p = false, p2c = false, share_att_key = false, norm_rel_embeddings = false;
  int64_t span = 0, buckets = 0, max_relative = 0;
  int64_t conv_kernel = 0, conv_groups = 1;
};

// A config term trimmed of spaces and lower-cased, as transformers reads "p2c|c2p" and norm_rel_ebd.
std::string normalized_term(std::string t) {
  t.erase(0, t.find_first_not_of(' '));
  t.erase(t.find_last_not_of(' ') + 1);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return t;
}

// A config string's '|'-separated terms, each normalized.
std::vector<std::string> bar_separated_terms(const std::string& s) {
  std::vector<std::string> terms;
  for (size_t begin = 0; begin <= s.size();) {
    const size_t bar = std::min(s.find('|', begin), s.size());
    terms.push_back(normalized_term(s.substr(begin, bar - begin)));
    begin = bar + 1;
  }
  return terms;
}

// pos_att_type: a list, or a "p2c|c2p" string (older configs); terms other than c2p and p2c are
// not read by transformers' DeBERTa-v2 either.
std::vector<std::string> position_terms(const JsonConfig& c) {
  if (!c.has("pos_att_type")) return {};
  const auto& v = c.at("pos_att_type");
  if (v.is_string()) return bar_separated_terms(v.get<std::string>());
  if (!v.is_array())
    c.invalid("pos_att_type", "must be a list such as [\"p2c\", \"c2p\"] or a \"p2c|c2p\" string");
  std::vector<std::string> terms;
  for (const auto& t : v) {
    if (!t.is_string()) c.invalid("pos_att_type", "must be a list of strings");
    terms.push_back(normalized_term(t.get<std::string>()));
  }
  return terms;
}

DebertaConfig parse_deberta(const JsonConfig& c) {
  DebertaConfig cfg;
  cfg.architectures = architectures(c);
  cfg.vocab = c.positive("vocab_size", 128100);
  cfg.hidden = c.positive("hidden_size", 1536);
  cfg.layers = c.positive("num_hidden_layers", 24);
  cfg.heads = c.positive("num_attention_heads", 24);
  if (cfg.hidden % cfg.heads != 0) c.invalid("num_attention_heads", "must divide the hidden size");
  cfg.head_dim = c.positive("attention_head_size", cfg.hidden / cfg.heads);
  if (cfg.head_dim * cfg.heads != cfg.hidden)  // the attention's output dense is hidden x hidden
    c.invalid("attention_head_size", "times num_attention_heads must equal hidden_size");
  cfg.intermediate = c.positive("intermediate_size", 6144);
  cfg.max_positions = c.positive("max_position_embeddings", 512);
  const int64_t type_vocab = c.integer("type_vocab_size", 0);
  if (type_vocab < 0) c.invalid("type_vocab_size", "must not be negative");
  cfg.type_vocab = type_vocab;
  cfg.embedding = c.positive("embedding_size", cfg.hidden);
  cfg.eps = c.number("layer_norm_eps", 1e-7);
  if (cfg.eps < 0) c.invalid("layer_norm_eps", "must not be negative");
  cfg.activation = c.string("hidden_act", "gelu");
  check_activation(c, "hidden_act", cfg.activation);
  cfg.pooler_activation = c.string("pooler_hidden_act", "gelu");
  check_activation(c, "pooler_hidden_act", cfg.pooler_activation);
  if (c.has("pooler_hidden_size") && c.positive("pooler_hidden_size", cfg.hidden) != cfg.hidden)
    c.invalid("pooler_hidden_size", "must equal hidden_size (the pooler reads a hidden state)");
  cfg.absolute_positions = c.boolean("position_biased_input", true);
  cfg.legacy = c.boolean("legacy", true);
  cfg.tied = c.boolean("tie_word_embeddings", true);
  if (!cfg.legacy && cfg.embedding != cfg.hidden)
    c.invalid("legacy", "false needs embedding_size == hidden_size (lm_predictions multiplies by the embeddings)");
  cfg.labels = label_count(c);
  for (const std::string& t : position_terms(c)) {
    cfg.c2p = cfg.c2p || t == "c2p";
    cfg.p2c = cfg.p2c || t == "p2c";
  }
  cfg.relative = c.boolean("relative_attention", false);
  cfg.share_att_key = c.boolean("share_att_key", false);
  cfg.max_relative = c.integer("max_relative_positions", -1);
  if (cfg.max_relative < 1) cfg.max_relative = cfg.max_positions;
  cfg.buckets = std::max<int64_t>(c.integer("position_buckets", -1), 0);
  if (cfg.relative && cfg.buckets == 1)
    c.invalid("position_buckets", "must be at least 2 (half of it is where the log buckets start)");
  cfg.span = cfg.buckets > 0 ? cfg.buckets : cfg.max_relative;
  const std::vector<std::string> norm_rel = bar_separated_terms(c.string("norm_rel_ebd", "none"));
  cfg.norm_rel_embeddings = std::find(norm_rel.begin(), norm_rel.end(), "layer_norm") != norm_rel.end();
  cfg.conv_kernel = std::max<int64_t>(c.integer("conv_kernel_size", 0), 0);
  if (cfg.conv_kernel > 0) {
    if (cfg.conv_kernel % 2 == 0)
      c.invalid("conv_kernel_size", "must be odd (an even kernel changes the sequence length in transformers too)");
    cfg.conv_groups = c.positive("conv_groups", 1);
    if (cfg.hidden % cfg.conv_groups != 0) c.invalid("conv_groups", "must divide the hidden size");
    cfg.conv_activation = c.string("conv_act", "tanh");
    check_activation(c, "conv_act", cfg.conv_activation);
  }
  return cfg;
}

struct Inputs {
  Value *input_ids = nullptr, *attention_mask = nullptr, *token_type_ids = nullptr, *position_ids = nullptr;
};

// input_ids and attention_mask by default, token_type_ids where the model has token types
// (optimum's signature); position_ids when asked for and there are absolute positions.
Inputs deberta_inputs(ModelBuilder& m, const DebertaConfig& cfg) {
  std::vector<std::string> declared = {"input_ids", "attention_mask"}, defaults = declared;
  if (cfg.type_vocab > 0) {
    declared.push_back("token_type_ids");
    defaults.push_back("token_type_ids");
  }
  if (cfg.absolute_positions) declared.push_back("position_ids");
  const std::vector<std::string> names = m.taken_inputs(declared, defaults);
  auto has = [&](const char* name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  if (!has("input_ids")) fail("inputs: must include input_ids");
  const Dim batch = m.dim("batch", 1, kMaxBatch), sequence = m.dim("sequence", 1, cfg.max_positions);
  Inputs in;
  Builder& b = m.b();
  in.input_ids = b.input("input_ids", DType::I64, {batch, sequence});
  if (has("attention_mask")) in.attention_mask = b.input("attention_mask", DType::I64, {batch, sequence});
  if (has("token_type_ids")) in.token_type_ids = b.input("token_type_ids", DType::I64, {batch, sequence});
  if (has("position_ids")) in.position_ids = b.input("position_ids", DType::I64, {batch, sequence});
  return in;
}

// make_log_bucket_position of `relative` (query - key), in float32 as transformers computes it.
int64_t log_bucket(int64_t relative, const DebertaConfig& cfg) {
  if (cfg.buckets <= 0) return relative;
  const int64_t mid = cfg.buckets / 2;
  const int64_t magnitude = relative < mid && relative > -mid ? mid - 1 : std::abs(relative);
  if (magnitude <= mid) return relative;
  const float reach = std::log(static_cast<float>(static_cast<double>(cfg.max_relative - 1) / static_cast<double>(mid)));
  const float log_pos =
      std::ceil(std::log(static_cast<float>(magnitude) / static_cast<float>(mid)) / reach * static_cast<float>(mid - 1)) +
      static_cast<float>(mid);
  return static_cast<int64_t>(relative < 0 ? -log_pos : log_pos);
}

// The rows of a layer's projected relative embeddings each (query, key) pair reads, by distance
// key - query: c2p reads bucket(query - key) + span; p2c, before its transpose, reads
// -bucket(row - column) + span. Both clamped to [0, 2 span).
std::vector<int64_t> term_rows(const DebertaConfig& cfg, bool c2p) {
  std::vector<int64_t> table;
  for (int64_t distance = -(cfg.max_positions - 1); distance < cfg.max_positions; ++distance) {
    const int64_t bucket = log_bucket(-distance, cfg);
    table.push_back(std::clamp<int64_t>((c2p ? bucket : -bucket) + cfg.span, 0, 2 * cfg.span - 1));
  }
  return table;
}

// What every layer's disentangled terms read: the relative embeddings and each term's rows.
struct RelativeContext {
  Value* embeddings = nullptr;   // [2 span, hidden]
  Value* c2p_rows = nullptr;     // [S, S] int64
  Value* p2c_rows = nullptr;
};

RelativeContext relative_context(ModelBuilder& m, const DebertaConfig& cfg, const std::string& p, Value* input_ids) {
  RelativeContext r;
  if (!cfg.relative || (!cfg.c2p && !cfg.p2c)) {  // relative embeddings (or their norm) no term reads
    for (const char* name : {"encoder.rel_embeddings.weight", "encoder.LayerNorm.weight", "encoder.LayerNorm.bias"})
      m.tolerate(p + name);
    return r;
  }
  Builder& b = m.b();
  b.set_scope(p + "encoder.rel_embeddings");
  r.embeddings = m.weight(p + "encoder.rel_embeddings.weight", {2 * cfg.span, cfg.hidden});
  if (cfg.norm_rel_embeddings) r.embeddings = encoder_layer_norm(m, p + "encoder.LayerNorm", r.embeddings, cfg.eps);
  if (cfg.c2p) r.c2p_rows = by_distance(b, term_rows(cfg, true), input_ids);
  if (cfg.p2c) r.p2c_rows = by_distance(b, term_rows(cfg, false), input_ids);
  return r;
}

Value* embeddings(ModelBuilder& m, const DebertaConfig& cfg, const std::string& p, const Inputs& in, Value* kept) {
  Builder& b = m.b();
  b.set_scope(p + "embeddings");
  Value* x = b.embedding(m.weight(p + "embeddings.word_embeddings.weight", {cfg.vocab, cfg.embedding}), in.input_ids);
  if (cfg.absolute_positions) {
    Value* positions = in.position_ids ? in.position_ids : arange_tokens(b, in.input_ids);
    x = b.add(x, b.embedding(m.weight(p + "embeddings.position_embeddings.weight", {cfg.max_positions, cfg.embedding}),
                             positions));
  }
  if (cfg.type_vocab > 0) {
    Value* types = m.weight(p + "embeddings.token_type_embeddings.weight", {cfg.type_vocab, cfg.embedding});
    x = b.add(x, in.token_type_ids ? b.embedding(types, in.token_type_ids) : b.gather(types, b.const_i64({0}), 0));
  }
  if (cfg.embedding != cfg.hidden) {
    b.set_scope(p + "embeddings.embed_proj");
    x = b.linear(x, m.weight(p + "embeddings.embed_proj.weight", {cfg.hidden, cfg.embedding}));
  }
  x = encoder_layer_norm(m, p + "embeddings.LayerNorm", x, cfg.eps);
  return kept ? b.mul(x, kept) : x;
}

// [2 span, hidden] -> [1, heads, head_dim, 2 span]: a projection of the relative embeddings as the
// right operand of a per-head MatMul, of the scores' rank (onnxruntime's session setup crashes on
// a float16 MatMul of a 4-D by a transposed 3-D operand).
Value* relative_heads(ModelBuilder& m, const DebertaConfig& cfg, const std::string& module, Value* rel) {
  Builder& b = m.b();
  const int64_t width = cfg.heads * cfg.head_dim;
  Value* y = b.linear(rel, m.weight(module + ".weight", {width, cfg.hidden}), m.weight(module + ".bias", {width}));
  Value* heads = b.transpose(b.reshape(y, {Dim(1), Dim(2 * cfg.span), Dim(cfg.heads), Dim(cfg.head_dim)}), {0, 2, 1, 3});
  return b.transpose(heads, {0, 1, 3, 2});
}

// [B, H, S, S]: a term's scores, picked from `scores` [B, H, S, 2 span] at `rows` [S, S].
Value* pick_rows(Builder& b, Value* scores, Value* rows) {
  Value* shape = b.concat({b.slice(b.shape_of(scores), 0, 0, 3), b.slice(b.shape_of(rows), 0, 1, 2)}, 0);
  const Shape result{scores->shape[0], scores->shape[1], scores->shape[2], scores->shape[2]};
  return b.gather_elements(scores, b.expand(rows, shape, result), 3);
}

// DisentangledSelfAttention.disentangled_attention_bias: c2p / scale + p2c^T / scale.
Value* disentangled_bias(ModelBuilder& m, const DebertaConfig& cfg, const std::string& p, const RelativeContext& r,
                         Value* q, Value* k, double scale) {
  Builder& b = m.b();
  Value* bias = nullptr;
  Value* divisor = b.scalar(scale, q->dtype);
  if (cfg.c2p) {
    Value* keys = relative_heads(m, cfg, p + (cfg.share_att_key ? "key_proj" : "pos_key_proj"), r.embeddings);
    bias = b.div(pick_rows(b, b.matmul(q, keys), r.c2p_rows), divisor);
  }
  if (cfg.p2c) {
    Value* queries = relative_heads(m, cfg, p + (cfg.share_att_key ? "query_proj" : "pos_query_proj"), r.embeddings);
    Value* p2c = b.transpose(pick_rows(b, b.matmul(k, queries), r.p2c_rows), {0, 1, 3, 2});
    p2c = b.div(p2c, divisor);
    bias = bias ? b.add(bias, p2c) : p2c;
  }
  return bias;
}

Value* heads_of(Builder& b, Value* x, const DebertaConfig& cfg) {
  return b.transpose(b.reshape(x, {x->shape[0], x->shape[1], Dim(cfg.heads), Dim(cfg.head_dim)}), {0, 2, 1, 3});
}

Value* attention(ModelBuilder& m, const DebertaConfig& cfg, const std::string& p, const RelativeContext& r,
                 Value* mask, Value* query_pad, Value* x) {
  Builder& b = m.b();
  const std::string a = p + "attention.self.";
  b.set_scope(a.substr(0, a.size() - 1));
  const int64_t width = cfg.heads * cfg.head_dim;
  auto project = [&](const char* name) {
    return heads_of(b, b.linear(x, m.weight(a + name + ".weight", {width, cfg.hidden}), m.weight(a + name + ".bias", {width})),
                    cfg);
  };
  Value* q = project("query_proj");
  Value* k = project("key_proj");
  Value* v = project("value_proj");
  const int64_t terms = 1 + (cfg.c2p ? 1 : 0) + (cfg.p2c ? 1 : 0);
  const double scale = std::sqrt(static_cast<double>(static_cast<float>(cfg.head_dim) * static_cast<float>(terms)));
  Value* bias = cfg.relative && (cfg.c2p || cfg.p2c) ? disentangled_bias(m, cfg, a, r, q, k, scale) : nullptr;
  Value* o = b.attention(q, k, v, mask, {.scale = 1.0 / scale, .causal = false}, nullptr, bias);
  if (query_pad) o = b.where(query_pad, b.reduce(OpKind::ReduceMean, v, {2}, true), o);
  o = b.reshape(b.transpose(o, {0, 2, 1, 3}), {x->shape[0], x->shape[1], Dim(width)});
  o = encoder_dense(m, p + "attention.output.dense", cfg.hidden, width, o);
  return encoder_layer_norm(m, p + "attention.output.LayerNorm", b.add(o, x), cfg.eps);
}

Value* layer(ModelBuilder& m, const DebertaConfig& cfg, const std::string& p, const RelativeContext& r, Value* mask,
             Value* query_pad, Value* x) {
  x = attention(m, cfg, p, r, mask, query_pad, x);
  Value* h = activation(m.b(), cfg.activation, encoder_dense(m, p + "intermediate.dense", cfg.intermediate, cfg.hidden, x));
  h = encoder_dense(m, p + "output.dense", cfg.hidden, cfg.intermediate, h);
  return encoder_layer_norm(m, p + "output.LayerNorm", m.b().add(h, x), cfg.eps);
}

// ConvLayer after the first layer: a same-length Conv1d over the embeddings, zero at the padding,
// activated, added to the layer's output under a LayerNorm, zeroed at the padding.
Value* conv_layer(ModelBuilder& m, const DebertaConfig& cfg, const std::string& p, Value* embedded, Value* kept,
                  Value* x) {
  Builder& b = m.b();
  const std::string c = p + "encoder.conv.";
  b.set_scope(c + "conv");
  Value* w = m.weight(c + "conv.weight", {cfg.hidden, cfg.hidden / cfg.conv_groups, cfg.conv_kernel});
  Value* y = b.conv(b.transpose(embedded, {0, 2, 1}), w, m.weight(c + "conv.bias", {cfg.hidden}), {1},
                    {(cfg.conv_kernel - 1) / 2}, {1}, cfg.conv_groups);
  y = b.transpose(y, {0, 2, 1});
  if (kept) y = b.mul(y, kept);
  y = encoder_layer_norm(m, c + "LayerNorm", b.add(x, activation(b, cfg.conv_activation, y)), cfg.eps);
  return kept ? b.mul(y, kept) : y;
}

// The legacy head (cls.predictions: dense to the embedding size, activation, LayerNorm, the
// decoder tied to the word embeddings) or lm_predictions.lm_head (the same at the hidden size,
// times the word embeddings, plus its bias).
Value* masked_lm_head(ModelBuilder& m, const DebertaConfig& cfg, const std::string& p, Value* x) {
  Builder& b = m.b();
  const std::string words = p + "embeddings.word_embeddings.weight";
  if (!cfg.legacy) {
    const std::string h = "lm_predictions.lm_head.";
    x = activation(b, cfg.activation, encoder_dense(m, h + "dense", cfg.hidden, cfg.hidden, x));
    x = encoder_layer_norm(m, h + "LayerNorm", x, cfg.eps);
    b.set_scope("lm_predictions.lm_head");
    return b.linear(x, m.weight(words, {cfg.vocab, cfg.hidden}), m.weight(h + "bias", {cfg.vocab}));
  }
  const std::string h = "cls.predictions.";
  x = activation(b, cfg.activation, encoder_dense(m, h + "transform.dense", cfg.embedding, cfg.hidden, x));
  x = encoder_layer_norm(m, h + "transform.LayerNorm", x, cfg.eps);
  b.set_scope(h + "decoder");
  const std::string decoder = cfg.tied ? words : h + "decoder.weight";
  const std::string bias = !cfg.tied && m.has(h + "decoder.bias") ? h + "decoder.bias" : h + "bias";
  for (const std::string& copy : {h + "decoder.weight", h + "decoder.bias", h + "bias"})
    if (copy != decoder && copy != bias) m.tolerate(copy);
  return b.linear(x, m.weight(decoder, {cfg.vocab, cfg.embedding}), m.weight(bias, {cfg.vocab}));
}

const char* finish_task(ModelBuilder& m, Task task, const DebertaConfig& cfg, const std::string& p,
                        const std::optional<SentencePooling>& pooling, const Inputs& in, Value* x) {
  Builder& b = m.b();
  if (base_model_outputs(b, task, pooling, x, in.attention_mask)) return "BaseModelOutput";
  switch (task) {
    case Task::TextClassification: {  // ContextPooler over the first token
      Value* first = b.gather(x, b.const_i64({0}), 1);
      first = activation(b, cfg.pooler_activation, encoder_dense(m, "pooler.dense", cfg.hidden, cfg.hidden, first));
      b.output(encoder_dense(m, "classifier", cfg.labels, cfg.hidden, first), "logits");
      return "SequenceClassifierOutput";
    }
    case Task::TokenClassification:
      b.output(encoder_dense(m, "classifier", cfg.labels, cfg.hidden, x), "logits");
      return "TokenClassifierOutput";
    case Task::FillMask:
      b.output(masked_lm_head(m, cfg, p, x), "logits");
      return "MaskedLMOutput";
    case Task::QuestionAnswering:
      return span_outputs(b, encoder_dense(m, "qa_outputs", 2, cfg.hidden, x));
    default:
      break;
  }
  fail("internal error: encoder task ", task_name(task), " was not refused");
}

ExportModel build_deberta_v2(const Checkpoint& ckpt, const ExportConfig& config) {
  const DebertaConfig cfg = parse_deberta(ckpt.config());
  ExportModel out{"deberta-v2", cfg.architectures, {}, {}};
  const std::optional<SentencePooling> pooling = read_sentence_pooling(ckpt);
  out.task = resolve_encoder_task("deberta-v2", config, cfg.architectures, pooling, ckpt);
  const std::string p = ckpt.find(std::string(kPrefix) + "embeddings.word_embeddings.weight") ? kPrefix : "";
  ModelBuilder m(ckpt, config);
  Builder& b = m.b();
  b.set_scope("inputs");
  const Inputs in = deberta_inputs(m, cfg);
  Value* mask = in.attention_mask ? padding_mask(b, in.input_ids, in.attention_mask) : nullptr;
  // [B, S, 1] 1 at the real tokens (DeBERTa zeroes the padding's embeddings), and [B, 1, S, 1]
  // true at a padding query.
  Value* kept = in.attention_mask ? b.unsqueeze(b.cast(in.attention_mask, config.dtype), {2}) : nullptr;
  Value* query_pad = in.attention_mask
                         ? b.unsqueeze(b.compare(OpKind::Equal, in.attention_mask, b.const_i64({0})), {1, 3})
                         : nullptr;
  Value* x = embeddings(m, cfg, p, in, kept);
  const RelativeContext r = relative_context(m, cfg, p, in.input_ids);
  Value* embedded = x;
  for (int64_t i = 0; i < cfg.layers; ++i) {
    x = layer(m, cfg, p + "encoder.layer." + std::to_string(i) + ".", r, mask, query_pad, x);
    if (i == 0 && cfg.conv_kernel > 0) x = conv_layer(m, cfg, p, embedded, kept, x);
  }
  const char* output_type = finish_task(m, out.task, cfg, p, pooling, in, x);
  m.tolerate(p + "embeddings.position_ids");  // old checkpoints' buffers
  for (const TensorView* t : ckpt.tensors())  // DeBERTa-v3's replaced-token detection head: not a task here
    if (t->name.starts_with("mask_predictions.")) m.tolerate(t->name);
  finish_encoder(m, out, ckpt, p, output_type, cfg.layers, pooling);
  return out;
}

}  // namespace

HFX_REGISTER_ARCH("deberta-v2", build_deberta_v2)

}  // namespace hfx
