// The inputs, masks, KV cache and outputs of a decoder graph, for each generation variant:
// the plain forward, prefill (no past, emits present), decode with a dynamic cache (past ->
// present), and the static in-place cache (input.<name> -> output.<name>).
#pragma once
#include "core/task.h"
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "ir/builder.h"
#include "models/model_builder.h"
#include "models/sentence_pooling.h"

namespace hfx {

enum class CacheKind { None, Dynamic, Static };

struct DecoderVariant {
  CacheKind cache = CacheKind::None;
  bool has_past = false;      // dynamic: reads past_key_values.* inputs
  bool single_token = false;  // query length fixed to 1
  int64_t batch = 1;          // static: fixed batch size
  int64_t max_cache_len = 0;  // static: bound of the cache dim
  bool last_logits = false;   // logits for the last position only (prefill: all a loop needs)
  Task task = Task::TextGeneration;  // the head: logits, or the base model's last_hidden_state
  const SentencePooling* pooling = nullptr;  // sentence-similarity: a sentence-transformers checkpoint's
  // Inserted in the cache's names, past_key_values.{i}<group>.key: ".decoder" for an
  // encoder-decoder's self-attention (optimum's names; ".encoder" is the cross-attention's).
  const char* cache_group = "";
  // Dynamic cache: the graph counts its positions, past + i (as transformers' encoder-decoders
  // do), and takes no position_ids.
  bool positions_from_past = false;
  // Dynamic cache: false takes no attention_mask (every token is real; the cache's length is the past).
  bool attention_mask = true;
  // Takes inputs_embeds instead of input_ids whatever the configured inputs (a vision-language
  // model's language model: the caller merges image features into the embeddings).
  bool inputs_embeds = false;
  // Takes token_type_ids [batch, query] (1: an image token) and lets the image tokens of one image
  // (a run of them) attend to each other both ways, besides the pattern (Gemma 3's image blocks).
  bool image_blocks = false;
  // position_ids come as [position_rows, batch, query] (3: Qwen2-VL's temporal/height/width rows,
  // which only feed the RoPE); 0: [batch, query].
  int64_t position_rows = 0;
};

// Which keys a query sees besides the padding: none later than itself (causal), optionally only
// the last `window`; or every key (bidirectional), optionally only those less than `window`
// positions away on either side.
struct MaskPattern {
  bool bidirectional = false;
  std::optional<int64_t> window;
  auto operator<=>(const MaskPattern&) const = default;
};

struct CacheShape {
  int64_t layers, kv_heads, head_dim;
  DType dtype;
};

struct HiddenShape {  // of inputs_embeds
  int64_t size;
  DType dtype;
};

class DecoderIO {
 public:
  // Dims come from `m` (configured bounds, or static when fixed); nodes go to m.b().
  DecoderIO(ModelBuilder& m, const DecoderVariant& variant, int64_t max_positions, const CacheShape& cache,
            const HiddenShape& hidden);

  // The tokens: ids, or (`inputs` naming inputs_embeds) their embeddings [batch, query, hidden];
  // the other is null.
  Value* input_ids() const { return input_ids_; }
  Value* inputs_embeds() const { return inputs_embeds_; }
  // The caller's [batch, total] int64 mask (dynamic cache or none; null when not taken).
  Value* attention_mask() const { return variant_.cache == CacheKind::Static ? nullptr : attention_mask_; }
  Value* position_ids() const { return position_ids_; }
  // Image tokens also attend to later ones of their image: the masks are not causal-only (a fused
  // kernel that applies the causal rule itself must not run them).
  bool has_image_blocks() const { return token_type_ids_ != nullptr; }
  // [batch, 1, query, keys] bool, true = attend: the pattern over cache slots, and padding. Built
  // once per pattern.
  Value* mask(const MaskPattern& pattern);
  // Stores this step's keys/values ([batch, kv_heads, query, head_dim]) in the cache (graph state
  // past_key_values.{layer}.key / .value) and returns the keys/values attention reads.
  std::pair<Value*, Value*> update_cache(int64_t layer, Value* k, Value* v);
  // The keys this call's queries see ([1] int64: the mask's length, or the cached length plus this
  // call's, `queries` when given) and their dim (dynamic cache); `one` is a [1] int64 constant.
  Value* key_count(Value* one, Value* queries = nullptr);
  Dim key_dim() const { return total_ ? *total_ : query_; }
  Dim query_dim() const { return query_; }
  // This call's real tokens, [batch, query] in `dtype` (1; 0 for padding), from the attention
  // mask's last query columns; null when the graph takes no mask (every token is real).
  Value* real_tokens(DType dtype);
  // The causal depthwise convolution (CausalConv) of this call's `u` [batch, query, channels] at layer
  // `layer` by `weight` [channels, 1, kernel] (+ `bias` [channels], or null), all of u's type,
  // over the kernel - 1 inputs before this call: state past_conv.{layer} [batch, channels,
  // kernel - 1], which each call replaces with its own last ones; zeros where the sequence starts.
  Value* causal_conv(int64_t layer, Value* u, Value* weight, Value* bias);
  // A recurrent state at layer `layer` (state past_ssm.{layer}, float32 [batch, *dims], replaced by
  // each call) as this call finds it: zeros where a sequence starts.
  Value* recurrent_state(int64_t layer, const std::vector<int64_t>& dims);
  // A scalar bool: this call is one token after earlier ones of its sequence (transformers' Mamba2
  // takes its single-step path there, which does not clamp dt to time_step_limit); null when the
  // graph has no past.
  Value* single_step();
  // Stores this call's final recurrent state at `layer` (after recurrent_state(layer)).
  void update_recurrent_state(int64_t layer, Value* final_state);
  // Registers the logits as the graph output (state outputs are the backend's state pass's).
  void finish(Value* logits);

 private:
  Value* computed_mask(const MaskPattern& pattern);
  Value* static_mask(std::optional<int64_t> window);
  Value* image_block_mask(Value* key_positions, Value* key_columns);
  // A scalar bool: this call does not start a sequence (no position of it is 0).
  Value* continues_sequence();
  Value* continues_ = nullptr;
  // Zeros of float32 [batch, *dims] (`dtype`): a state before a sequence's first token.
  Value* zero_state(const std::vector<int64_t>& dims, DType dtype);
  struct PendingState {
    int64_t index;
    Value* current;  // null: the call starts the state
    Shape shape;
  };
  std::map<int64_t, PendingState> recurrent_;  // declared by recurrent_state, updated once
  bool positions_only_ = false;  // the cache_position form: the mask is built here, every token real
  Value* token_type_ids_ = nullptr;  // image_blocks only
  Value* image_blocks_ = nullptr;    // [batch, 1, query, keys] bool, built once
  Value* update_one(const std::string& name, Value* fresh);
  Value* arange_positions();
  Value* positions_after_past();
  Value* tokens_shape();
  void cache_position_inputs(int64_t max_cache_len);

  Builder& b_;
  DecoderVariant variant_;
  CacheShape cache_;
  Dim batch_, query_;
  std::optional<Dim> past_, total_;
  Value* input_ids_ = nullptr;
  Value* inputs_embeds_ = nullptr;
  Value* attention_mask_;  // null when the graph does not take one (or computes it)
  Value* position_ids_;
  std::map<MaskPattern, Value*> masks_;
  // Without a mask, layer 0's cached keys, read up front: their length is the past.
  std::optional<int64_t> first_state_;
  Value* first_read_ = nullptr;
};

}  // namespace hfx
