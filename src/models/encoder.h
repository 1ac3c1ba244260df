// What the text-encoder families (bert.cpp, modernbert.cpp) share around their graphs: the task
// an export computes, and handing the one forward graph over.
#pragma once
#include <optional>
#include <string>

#include "models/blocks.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/sentence_pooling.h"

namespace hfx {

// The encoder's task: configured, else sentence-similarity for a sentence-transformers
// checkpoint, else its head class's (feature-extraction for the base model). Anything but the
// encoder tasks, and a decode loop, are refused.
Task resolve_encoder_task(const std::string& model_type, const ExportConfig& config,
                          const std::vector<std::string>& architectures,
                          const std::optional<SentencePooling>& pooling, const Checkpoint& ckpt);

// The classification heads' outputs: id2label's size (transformers saves the map, not the count),
// else num_labels, else 2.
int64_t label_count(const JsonConfig& c);

// Multi-head self-attention of an encoder layer: q/k/v/out projections with biases (`out`: the
// output projection's module name).
AttentionSpec encoder_attention(int64_t hidden, int64_t heads, const std::string& out);
// What such a layer's attention reads: no RoPE, no cache; `mask` [B, 1, S, S] or null (every position).
AttentionContext encoder_attention_context(Value* mask);
// A plain (ungated) feed-forward with biases: down(act(up(x))).
MlpSpec encoder_mlp(int64_t hidden, int64_t intermediate, const std::string& activation, const std::string& up,
                    const std::string& down);

// A patch convolution's output [batch, hidden, *grid] as a sequence [batch, patches, hidden].
Value* patch_sequence(Builder& b, Value* grid, int64_t hidden, int64_t patches);
// A learned token [1, 1, hidden] (a [CLS], a pooling probe) repeated for each row of `rows_of` [batch, ...].
Value* per_row_token(Builder& b, Value* token, Value* rows_of, int64_t hidden);

// LayerNorm over x's last dim, with `module`.weight and .bias.
Value* encoder_layer_norm(ModelBuilder& m, const std::string& module, Value* x, double eps);

// A Linear with a bias, `module`.weight [out, in] and .bias [out].
Value* encoder_dense(ModelBuilder& m, const std::string& module, int64_t out, int64_t in, Value* x);

// The base model's outputs where the task is feature-extraction (last_hidden_state) or
// sentence-similarity (also the pooled sentence_embedding); false for the other tasks.
bool base_model_outputs(Builder& b, Task task, const std::optional<SentencePooling>& pooling, Value* x,
                        Value* attention_mask);

// Question answering's outputs from the span logits [batch, sequence, 2]: start_logits and
// end_logits; returns the transformers output class.
const char* span_outputs(Builder& b, Value* spans);

// [] the sequence length of input_ids [batch, sequence], as a 1-element int64 tensor.
Value* token_count(Builder& b, Value* input_ids);

// [sequence] 0..sequence-1, the positions (and the key slots) of this call's tokens.
Value* arange_tokens(Builder& b, Value* input_ids);

// [batch, 1, sequence, sequence] bool: every query sees every key the attention_mask keeps.
Value* padding_mask(Builder& b, Value* input_ids, Value* attention_mask);

// T5's bidirectional relative position bucket of `relative` (key - query), in float32 as
// transformers computes it (T5, MPNet): half the buckets per direction, exact below a quarter of
// them, logarithmic up to max_distance.
int64_t bidirectional_bucket(int64_t relative, int64_t buckets, int64_t max_distance);
// T5's decoder bucket of a key `distance` = query - key positions behind the query (keys after it,
// distance < 0, share bucket 0): every bucket for one direction.
int64_t causal_bucket(int64_t distance, int64_t buckets, int64_t max_distance);

// [sequence, sequence] int64: table[key - query + longest - 1] for each (query, key) pair, where
// `table` holds a value per distance -(longest - 1) ... longest - 1 (relative position buckets).
Value* by_distance(Builder& b, const std::vector<int64_t>& table, Value* input_ids);

// Puts the finished forward graph into `out`. A head class's own weights (outside `prefix`) are
// not read when only the base model's outputs are exported.
void finish_encoder(ModelBuilder& m, ExportModel& out, const Checkpoint& ckpt, const std::string& prefix,
                    const char* output_type, int64_t layers, const std::optional<SentencePooling>& pooling);

}  // namespace hfx
