#include "models/encoder.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "models/seq2seq.h"

namespace hfx {

Task resolve_encoder_task(const std::string& model_type, const ExportConfig& config,
                          const std::vector<std::string>& architectures,
                          const std::optional<SentencePooling>& pooling, const Checkpoint& ckpt) {
  const Task task = resolve_task_with_pooling(config.task, architectures, Task::FeatureExtraction, pooling, ckpt);
  constexpr Task kTasks[] = {Task::FeatureExtraction, Task::SentenceSimilarity, Task::TextClassification,
                             Task::TokenClassification, Task::FillMask, Task::QuestionAnswering};
  if (std::find(std::begin(kTasks), std::end(kTasks), task) == std::end(kTasks))
    fail("task: ", model_type, " exports feature-extraction, sentence-similarity, text-classification, "
         "token-classification, fill-mask or question-answering, not ", task_name(task),
         config.task.empty() ? " (from config.json's architectures; give --task)" : "");
  if (config.generation.enabled) fail("task: ", model_type, " is an encoder: it has no decode loop (--for-generation)");
  return task;
}

Value* token_count(Builder& b, Value* input_ids) { return b.gather(b.shape_of(input_ids), b.const_i64({1}), 0); }

Value* arange_tokens(Builder& b, Value* input_ids) {
  return b.range(b.const_i64({0}), token_count(b, input_ids), b.const_i64({1}), input_ids->shape[1]);
}

// The full [S, S] shape: some attention kernels index the mask by query. key > query - count
// holds for every pair.
Value* padding_mask(Builder& b, Value* input_ids, Value* attention_mask) {
  Value* slots = arange_tokens(b, input_ids);
  Value* rows = b.unsqueeze(slots, {1});
  Value* every = b.compare(OpKind::Greater, b.unsqueeze(slots, {0}), b.sub(rows, token_count(b, input_ids)));
  Value* kept = b.unsqueeze(b.compare(OpKind::Greater, attention_mask, b.const_i64({0})), {1, 2});
  return b.logical_and(b.unsqueeze(every, {0, 1}), kept);
}

namespace {
// The bucket of distance n >= 0 among `buckets` of one direction: exact below half of them, then
// logarithmic up to max_distance (float32, as transformers computes it).
int64_t one_sided_bucket(int64_t n, int64_t buckets, int64_t max_distance) {
  const int64_t exact = buckets / 2;
  if (n < exact) return n;
  const float scaled = std::log(static_cast<float>(n) / static_cast<float>(exact)) /
                       static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(exact))) *
                       static_cast<float>(buckets - exact);
  return std::min<int64_t>(exact + static_cast<int64_t>(scaled), buckets - 1);
}
}  // namespace

int64_t bidirectional_bucket(int64_t relative, int64_t buckets, int64_t max_distance) {
  const int64_t half = buckets / 2;
  const int64_t side = relative > 0 ? half : 0;  // n = -relative < 0: keys after the query
  return side + one_sided_bucket(std::abs(relative), half, max_distance);
}

int64_t causal_bucket(int64_t distance, int64_t buckets, int64_t max_distance) {
  return one_sided_bucket(std::max<int64_t>(distance, 0), buckets, max_distance);
}

Value* by_distance(Builder& b, const std::vector<int64_t>& table, Value* input_ids) {
  HFX_CHECK(table.size() % 2 == 1, "internal error: a distance table must have an odd size");
  const int64_t longest = static_cast<int64_t>(table.size() + 1) / 2;
  Value* slots = arange_tokens(b, input_ids);
  Value* relative = b.sub(b.unsqueeze(slots, {0}), b.unsqueeze(slots, {1}));  // [S, S] key - query
  return b.gather(b.const_i64(table, {static_cast<int64_t>(table.size())}), b.add(relative, b.const_i64({longest - 1})),
                  0);
}

int64_t label_count(const JsonConfig& c) {
  if (c.has("id2label") && c.at("id2label").is_object() && !c.at("id2label").empty())
    return static_cast<int64_t>(c.at("id2label").size());
  return c.positive("num_labels", 2);
}

AttentionSpec encoder_attention(int64_t hidden, int64_t heads, const std::string& out) {
  AttentionSpec spec{.hidden = hidden, .heads = heads, .kv_heads = heads, .head_dim = hidden / heads};
  spec.o = out;
  spec.qkv_bias = spec.o_bias = true;
  return spec;
}

AttentionContext encoder_attention_context(Value* mask) {
  return {nullptr, nullptr, mask, [](Value* k, Value* v) { return std::pair{k, v}; }, false};
}

MlpSpec encoder_mlp(int64_t hidden, int64_t intermediate, const std::string& activation, const std::string& up,
                    const std::string& down) {
  MlpSpec mlp{.hidden = hidden, .intermediate = intermediate, .bias = true, .activation = activation, .gated = false};
  mlp.up = up, mlp.down = down;
  return mlp;
}

Value* patch_sequence(Builder& b, Value* grid, int64_t hidden, int64_t patches) {
  return b.transpose(b.reshape(grid, {grid->shape[0], Dim(hidden), Dim(patches)}), {0, 2, 1});
}

Value* per_row_token(Builder& b, Value* token, Value* rows_of, int64_t hidden) {
  Value* shape = b.concat({b.gather(b.shape_of(rows_of), b.const_i64({0}, {1}), 0), b.const_i64({1, hidden}, {2})}, 0);
  return b.expand(token, shape, {rows_of->shape[0], Dim(int64_t{1}), Dim(hidden)});
}

Value* encoder_layer_norm(ModelBuilder& m, const std::string& module, Value* x, double eps) {
  const int64_t width = x->shape.back().value();
  m.b().set_scope(module);
  return m.b().layer_norm(x, m.weight(module + ".weight", {width}), m.weight(module + ".bias", {width}), eps);
}

Value* encoder_dense(ModelBuilder& m, const std::string& module, int64_t out, int64_t in, Value* x) {
  m.b().set_scope(module);
  return m.b().linear(x, m.weight(module + ".weight", {out, in}), m.weight(module + ".bias", {out}));
}

bool base_model_outputs(Builder& b, Task task, const std::optional<SentencePooling>& pooling, Value* x,
                        Value* attention_mask) {
  if (task != Task::FeatureExtraction && task != Task::SentenceSimilarity) return false;
  b.output(x, "last_hidden_state");
  if (task == Task::FeatureExtraction) return true;
  b.set_scope("pooling");
  b.output(sentence_embedding(b, *pooling, x, attention_mask), "sentence_embedding");
  return true;
}

const char* span_outputs(Builder& b, Value* spans) {
  b.output(b.gather(spans, b.const_i64({0}), 2), "start_logits");
  b.output(b.gather(spans, b.const_i64({1}), 2), "end_logits");
  return "QuestionAnsweringModelOutput";
}

void finish_encoder(ModelBuilder& m, ExportModel& out, const Checkpoint& ckpt, const std::string& prefix,
                    const char* output_type, int64_t layers, const std::optional<SentencePooling>& pooling) {
  out.sentence_pooling = sentence_pooling_json(pooling);
  const bool base_outputs = out.task == Task::FeatureExtraction || out.task == Task::SentenceSimilarity;
  if (base_outputs && !prefix.empty())
    for (const TensorView* t : ckpt.tensors())
      if (!t->name.starts_with(prefix)) m.tolerate(t->name);
  out.components.push_back({Role::Forward, finish_component(m, output_type, layers, out.dims)});
}

}  // namespace hfx
