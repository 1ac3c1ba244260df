#include "models/decoder_io.h"

#include <algorithm>

#include "core/error.h"

namespace hfx {

namespace {
constexpr int64_t kMaxBatch = 4096;

// The inputs a decoder graph declares, and what stands in for one left out of `inputs`.
struct DeclaredInput {
  const char* name;
  const char* when_absent;
};
constexpr DeclaredInput kDeclaredInputs[] = {
    {"input_ids", "the tokens, unless inputs_embeds replaces them"},
    {"inputs_embeds", "not taken: the embeddings of input_ids (plain forward only)"},
    {"attention_mask", "every token attends (causally)"},
    {"position_ids", "0..query-1 in every row"},
    {"cache_position", "not taken (a static cache's alternative to attention_mask and position_ids)"},
};

std::string declared_names() {
  std::string out;
  for (const DeclaredInput& d : kDeclaredInputs) out += (out.empty() ? "" : ", ") + std::string(d.name);
  return out;
}

// Which of the decoder's inputs the graph takes: input_ids, attention_mask and position_ids by
// default, else the configured ones. `inputs_embeds` replaces input_ids (the plain forward: a
// decode loop feeds tokens). `cache_position` (transformers' name; ExecuTorch's LLM runner's
// input_pos) replaces the mask and positions of a static cache: the positions of the query's
// tokens, which also fix the mask.
struct TakenInputs {
  bool inputs_embeds = false, attention_mask = true, position_ids = true, cache_position = false;
};

TakenInputs taken_inputs(const std::vector<std::string>& names, CacheKind cache, bool embeds_only) {
  if (names.empty()) return {embeds_only};
  for (const std::string& name : names)
    if (std::none_of(std::begin(kDeclaredInputs), std::end(kDeclaredInputs),
                     [&](const DeclaredInput& d) { return name == d.name; }))
      fail("inputs: '", name, "' is not an input of this model (it takes ", declared_names(), ")");
  auto has = [&](const char* name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  if (embeds_only && !has("inputs_embeds"))
    fail("inputs: must include inputs_embeds (the language model takes the token embeddings with the image features merged in)");
  if (has("input_ids") == has("inputs_embeds")) fail("inputs: must include input_ids or inputs_embeds (one of them)");
  const TakenInputs taken{has("inputs_embeds"), has("attention_mask"), has("position_ids"), has("cache_position")};
  if (taken.inputs_embeds && cache != CacheKind::None && !embeds_only)
    fail("inputs: inputs_embeds is the plain forward's (a decode loop feeds token ids)");
  if (taken.cache_position && cache != CacheKind::Static)
    fail("inputs: cache_position is the static cache's input (--static-cache)");
  if (taken.cache_position && (taken.attention_mask || taken.position_ids))
    fail("inputs: cache_position replaces attention_mask and position_ids (the mask follows from the positions)");
  return taken;
}
}  // namespace

DecoderIO::DecoderIO(ModelBuilder& m, const DecoderVariant& v, int64_t max_positions, const CacheShape& cache,
                     const HiddenShape& hidden)
    : b_(m.b()), variant_(v), cache_(cache), batch_(1), query_(1) {
  Builder& b = b_;
  const bool fixed = v.cache == CacheKind::Static;
  const int64_t max_len = fixed ? v.max_cache_len : max_positions;
  batch_ = fixed ? Dim(v.batch) : m.dim("batch", 1, kMaxBatch);
  if (!v.single_token) query_ = m.dim("sequence", 1, max_len);
  const TakenInputs taken = taken_inputs(m.config().inputs, v.cache, v.inputs_embeds);
  if (v.position_rows && fixed)
    fail("generation: --static-cache is not supported with multimodal RoPE (its [", v.position_rows,
         ", batch, sequence] positions are not the cache slots); export the dynamic cache");
  if (v.position_rows && !taken.position_ids)
    fail("inputs: must include position_ids (multimodal RoPE's [", v.position_rows, ", batch, sequence] positions, "
         "which the caller computes as get_rope_index does)");
  if (taken.inputs_embeds) inputs_embeds_ = b.input("inputs_embeds", hidden.dtype, {batch_, query_, Dim(hidden.size)});
  else input_ids_ = b.input("input_ids", DType::I64, {batch_, query_});
  if (taken.cache_position) {
    cache_position_inputs(v.max_cache_len);
    return;
  }
  if (v.cache == CacheKind::None && !taken.attention_mask) {
    attention_mask_ = nullptr;  // every token attends (causally)
  } else if (fixed) {
    total_ = m.dim("cache", 1, v.max_cache_len);
    attention_mask_ = b.input("attention_mask", DType::Bool, {batch_, Dim(1), query_, *total_});
  } else if (v.has_past) {
    past_ = m.dim("past_sequence", 0, max_positions - 1);
    total_ = m.dim("total_sequence", 1, max_positions);
    if (v.attention_mask) {
      attention_mask_ = b.input("attention_mask", DType::I64, {batch_, *total_});
    } else {
      attention_mask_ = nullptr;
      first_state_ = b.declare_state({"past_key_values.0" + std::string(v.cache_group) + ".key", StateKind::KeyValue,
                                      StateUpdatePolicy::Append, cache.dtype,
                                      {batch_, Dim(cache.kv_heads), *past_, Dim(cache.head_dim)}});
      first_read_ = b.state_read(*first_state_);
    }
  } else if (!v.attention_mask) {
    attention_mask_ = nullptr;
  } else {
    attention_mask_ = b.input("attention_mask", DType::I64, {batch_, query_});
  }
  if (v.image_blocks) token_type_ids_ = b.input("token_type_ids", DType::I64, {batch_, query_});
  if (v.position_rows) {  // the caller's rows (Qwen2-VL's get_rope_index); they feed only the RoPE
    position_ids_ = b.input("position_ids", DType::I64, {Dim(v.position_rows), batch_, query_});
    return;
  }
  const bool derive_positions = v.cache == CacheKind::None && !taken.position_ids;
  if (v.positions_from_past && v.cache == CacheKind::Dynamic) position_ids_ = positions_after_past();
  else position_ids_ = derive_positions ? arange_positions() : b.input("position_ids", DType::I64, {batch_, query_});
}

// [batch, query] of this call's tokens, given as ids or as embeddings.
Value* DecoderIO::tokens_shape() {
  if (input_ids_) return b_.shape_of(input_ids_);
  return b_.gather(b_.shape_of(inputs_embeds_), b_.const_i64({0, 1}, {2}), 0);
}

// The static cache's other form: cache_position [query], the slots of this call's tokens, as
// ExecuTorch's LLM runner passes input_pos (and transformers its cache_position). Every row has
// those positions, and each query sees the slots up to its own: the mask is built here over a
// cache of the full length.
void DecoderIO::cache_position_inputs(int64_t max_cache_len) {
  total_ = Dim(max_cache_len);
  Value* cache_position = b_.input("cache_position", DType::I64, {query_});
  position_ids_ = b_.expand(b_.unsqueeze(cache_position, {0}), tokens_shape(), {batch_, query_});
  positions_only_ = true;
  Value* slots = b_.range(b_.const_i64({0}), b_.const_i64({max_cache_len}), b_.const_i64({1}), *total_);
  attention_mask_ = b_.compare(OpKind::LessOrEqual, b_.unsqueeze(slots, {0, 1, 2}), b_.unsqueeze(position_ids_, {1, 3}));
}

// What the model's forward uses without position_ids: 0..query-1 in every row (it does not look at
// the mask; generate derives positions from it instead, and passes them).
Value* DecoderIO::arange_positions() {
  Value* queries = b_.gather(tokens_shape(), b_.const_i64({1}), 0);
  Value* row = b_.unsqueeze(b_.range(b_.const_i64({0}), queries, b_.const_i64({1}), query_), {0});
  return b_.expand(row, tokens_shape(), {batch_, query_});
}

// The keys this call's queries see ([1] int64): the mask's length, or without one the cached
// length plus this call's (this call's alone without a past). `one` is the caller's [1] constant;
// `queries`, this call's length, is made when needed and not given.
Value* DecoderIO::key_count(Value* one, Value* queries) {
  if (attention_mask_) return b_.gather(b_.shape_of(attention_mask_), one, 0);
  if (!queries) queries = b_.gather(tokens_shape(), one, 0);
  if (first_read_) return b_.add(b_.gather(b_.shape_of(first_read_), b_.const_i64({2}), 0), queries);
  return queries;
}

// past..past+query-1 in every row, past being the keys less this call's (0 without a past).
Value* DecoderIO::positions_after_past() {
  if (!variant_.has_past) return arange_positions();
  Value* one = b_.const_i64({1});
  Value* queries = b_.gather(tokens_shape(), one, 0);
  Value* keys = key_count(one, queries);
  return b_.expand(b_.unsqueeze(b_.range(b_.sub(keys, queries), keys, one, query_), {0}), tokens_shape(),
                   {batch_, query_});
}

Value* DecoderIO::mask(const MaskPattern& pattern) {
  Value*& cached = masks_[pattern];
  if (!cached) {
    const std::string scope = b_.scope();
    b_.set_scope(pattern.bidirectional ? (pattern.window ? "mask.bidirectional_sliding" : "mask.bidirectional")
                                       : (pattern.window ? "mask.sliding" : "mask.causal"));
    if (variant_.cache == CacheKind::None) {
      cached = computed_mask(pattern);
    } else {
      HFX_CHECK(!pattern.bidirectional, "internal error: a bidirectional mask over a cache");
      cached = variant_.cache == CacheKind::Static ? static_mask(pattern.window) : computed_mask(pattern);
    }
    b_.set_scope(scope);
  }
  return cached;
}

// Query i sits at cache slot past + i, past = keys - queries; key j is kept when j <= past + i,
// attention_mask[b, j] is set, and (with a window) past + i - j < window. Bidirectional (no
// cache): j is kept when |i - j| < the window, or the key count without one (every key).
Value* DecoderIO::computed_mask(const MaskPattern& pattern) {
  Value* zero = b_.const_i64({0});
  Value* one = b_.const_i64({1});
  Value* queries = b_.gather(tokens_shape(), one, 0);
  Value* keys = key_count(one, queries);
  Value* rows = b_.unsqueeze(b_.range(b_.sub(keys, queries), keys, one, query_), {1});
  Value* cols = b_.unsqueeze(b_.range(zero, keys, one, total_ ? *total_ : query_), {0});
  const std::optional<int64_t> window = pattern.window;
  Value* keep = nullptr;
  if (pattern.bidirectional) {
    Value* reach = window ? b_.const_i64({*window}) : keys;
    keep = b_.logical_and(b_.compare(OpKind::Greater, cols, b_.sub(rows, reach)),
                          b_.compare(OpKind::Less, cols, b_.add(rows, reach)));
  } else {
    keep = b_.compare(OpKind::LessOrEqual, cols, rows);
    if (token_type_ids_) {
      keep = b_.logical_or(b_.unsqueeze(keep, {0, 1}), image_block_mask(b_.expand(b_.reshape(rows, {Dim(int64_t{1}), query_}),
                                                                                  tokens_shape(), {batch_, query_}), cols));
      if (window) keep = b_.logical_and(keep, b_.unsqueeze(b_.compare(OpKind::Greater, cols, b_.sub(rows, b_.const_i64({*window}))), {0, 1}));
      return attention_mask_ ? b_.logical_and(keep, b_.unsqueeze(b_.compare(OpKind::Greater, attention_mask_, zero), {1, 2})) : keep;
    }
    if (window) keep = b_.logical_and(keep, b_.compare(OpKind::Greater, cols, b_.sub(rows, b_.const_i64({*window}))));
  }
  if (!attention_mask_) return b_.unsqueeze(keep, {0, 1});
  Value* padding = b_.unsqueeze(b_.compare(OpKind::Greater, attention_mask_, zero), {1, 2});
  return b_.logical_and(b_.unsqueeze(keep, {0, 1}), padding);
}

// The caller's mask says which slots each query sees; a sliding layer also drops slots more than
// `window` positions behind the query (slots are positions in the static cache).
Value* DecoderIO::static_mask(std::optional<int64_t> window) {
  if (!window && !token_type_ids_) return attention_mask_;
  Value* slots_count = b_.gather(b_.shape_of(attention_mask_), b_.const_i64({3}), 0);
  Value* slot_range = b_.range(b_.const_i64({0}), slots_count, b_.const_i64({1}), *total_);
  Value* mask = attention_mask_;
  if (token_type_ids_) mask = b_.logical_or(mask, image_block_mask(position_ids_, b_.unsqueeze(slot_range, {0})));
  if (!window) return mask;
  Value* slots = b_.unsqueeze(slot_range, {0, 1, 2});
  Value* query_pos = b_.unsqueeze(position_ids_, {1, 3});
  Value* in_window = b_.compare(OpKind::Greater, slots, b_.sub(query_pos, b_.const_i64({*window})));
  return b_.logical_and(mask, in_window);
}

// [batch, 1, query, keys]: query i sees key column c when the token at c is one of this call's
// image tokens in i's run of image tokens (i an image token too). `key_positions` [batch, query]
// is the column each query's own token occupies, `key_columns` [1, keys] every column. Image
// tokens with the same count of text tokens before them form one run (one image), as
// transformers' block ids do.
Value* DecoderIO::image_block_mask(Value* key_positions, Value* key_columns) {
  if (image_blocks_) return image_blocks_;
  Value* one = b_.const_i64({1});
  Value* image = b_.compare(OpKind::Equal, token_type_ids_, one);
  Value* text_before = b_.cumsum(b_.sub(one, b_.cast(image, DType::I64)), 1);
  Value* block = b_.where(image, text_before, b_.const_i64({-1}));  // [batch, query]
  Value* same = b_.logical_and(b_.compare(OpKind::Equal, b_.unsqueeze(block, {2}), b_.unsqueeze(block, {1})),
                               b_.unsqueeze(image, {2}));
  Value* at_column = b_.compare(OpKind::Equal, b_.unsqueeze(key_positions, {2}), b_.unsqueeze(key_columns, {0}));
  Value* reach = b_.matmul(b_.cast(same, DType::F32), b_.cast(at_column, DType::F32));  // [batch, query, keys]
  image_blocks_ = b_.unsqueeze(b_.compare(OpKind::Greater, reach, b_.scalar(0.0, DType::F32)), {1});
  return image_blocks_;
}

// Declares the layer's cache as graph state and updates it with this call's rows; a backend's
// state pass decides how the state reaches the runtime.
Value* DecoderIO::update_one(const std::string& name, Value* fresh) {
  const Dim kv(cache_.kv_heads), head(cache_.head_dim);
  switch (variant_.cache) {
    case CacheKind::None:
      return fresh;
    case CacheKind::Dynamic: {
      const Dim past = variant_.has_past ? *past_ : Dim(int64_t{0});
      const bool read_up_front = first_state_ && b_.graph().states.at(static_cast<size_t>(*first_state_)).name == name;
      const int64_t state = read_up_front ? *first_state_
                                          : b_.declare_state({name, StateKind::KeyValue, StateUpdatePolicy::Append,
                                                              cache_.dtype, {batch_, kv, past, head}});
      if (!variant_.has_past) return b_.state_update(state, nullptr, fresh, nullptr, fresh->shape);
      Value* current = read_up_front ? first_read_ : b_.state_read(state);
      return b_.state_update(state, current, fresh, nullptr, {batch_, kv, *total_, head});
    }
    case CacheKind::Static: {
      // Rows go to the slots their positions name; the buffer keeps its shape, so a runtime can
      // bind the state's input and output to the same memory.
      const int64_t state = b_.declare_state({name, StateKind::KeyValue, StateUpdatePolicy::Slots, cache_.dtype,
                                              {batch_, kv, *total_, head}});
      Value* buffer = b_.state_read(state);
      return b_.state_update(state, buffer, fresh, position_ids_, buffer->shape);
    }
  }
  fail("internal error: cache kind");
}

std::pair<Value*, Value*> DecoderIO::update_cache(int64_t layer, Value* k, Value* v) {
  const std::string base = "past_key_values." + std::to_string(layer) + variant_.cache_group;
  return {update_one(base + ".key", k), update_one(base + ".value", v)};
}

Value* DecoderIO::real_tokens(DType dtype) {
  if (!attention_mask_ || positions_only_) return nullptr;  // every token is real
  if (variant_.cache == CacheKind::Static) {  // [batch, 1, query, slots]: a pad query sees no slot
    return b_.reduce(OpKind::ReduceMax, b_.cast(attention_mask_, dtype), {1, 3}, false);
  }
  if (!total_) return b_.cast(attention_mask_, dtype);  // the mask covers this call only
  Value* total = b_.gather(b_.shape_of(attention_mask_), b_.const_i64({1}), 0);
  Value* query = b_.gather(tokens_shape(), b_.const_i64({1}), 0);
  Value* columns = b_.range(b_.sub(total, query), total, b_.const_i64({1}), query_);
  return b_.cast(b_.gather(attention_mask_, columns, 1), dtype);
}

Value* DecoderIO::continues_sequence() {
  if (!continues_) {
    Value* at_start = b_.cast(b_.compare(OpKind::Equal, position_ids_, b_.const_i64({0})), DType::F32);
    continues_ = b_.compare(OpKind::Less, b_.reduce(OpKind::ReduceMax, at_start, {0, 1}, false), b_.scalar(0.5, DType::F32));
  }
  return continues_;
}

Value* DecoderIO::single_step() {
  if (variant_.cache == CacheKind::None || !variant_.has_past) return nullptr;
  Value* one_token = b_.compare(OpKind::Equal, b_.gather(tokens_shape(), b_.const_i64({1}), 0), b_.const_i64({1}));
  return b_.logical_and(one_token, continues_sequence());
}

Value* DecoderIO::causal_conv(int64_t layer, Value* u, Value* weight, Value* bias) {
  const Dim channels = u->shape[2];
  const int64_t kernel = weight->shape[2].value();
  const Dim held(kernel - 1);
  const std::string name = "past_conv." + std::to_string(layer);
  Value* zeros = nullptr;
  if (variant_.cache == CacheKind::None || !variant_.has_past) zeros = zero_state({channels.value(), kernel - 1}, u->dtype);
  if (variant_.cache == CacheKind::None) return b_.causal_conv(u, weight, zeros, bias).first;
  const int64_t state = b_.declare_state({name, StateKind::Convolution, StateUpdatePolicy::Replace, cache_.dtype,
                                          {batch_, channels, held}});
  Value* current = variant_.has_past ? b_.state_read(state) : nullptr;
  Value* before = current ? b_.cast(current, u->dtype) : zeros;
  // A static cache's buffers outlive a sequence (a runtime's method buffers): a call at position 0
  // starts a new one, whose convolution sees zeros before it.
  if (variant_.cache == CacheKind::Static) before = b_.mul(before, b_.cast(continues_sequence(), before->dtype));
  auto [y, kept] = b_.causal_conv(u, weight, before, bias);
  b_.state_update(state, current, b_.cast(kept, cache_.dtype), nullptr, {batch_, channels, held});
  return y;
}

Value* DecoderIO::zero_state(const std::vector<int64_t>& dims, DType dtype) {
  std::vector<Value*> parts{b_.gather(tokens_shape(), b_.const_i64({0}, {1}), 0)};
  Shape shape{batch_};
  for (int64_t d : dims) {
    parts.push_back(b_.const_i64({d}, {1}));
    shape.push_back(Dim(d));
  }
  return b_.expand(b_.cast(b_.scalar(0.0, DType::F32), dtype), b_.concat(parts, 0), shape);
}

Value* DecoderIO::recurrent_state(int64_t layer, const std::vector<int64_t>& dims) {
  HFX_CHECK(!recurrent_.contains(layer), "recurrent state of layer ", layer, " read twice");
  Shape shape{batch_};
  for (int64_t d : dims) shape.push_back(Dim(d));
  if (variant_.cache == CacheKind::None) return zero_state(dims, DType::F32);
  const int64_t state = b_.declare_state({"past_ssm." + std::to_string(layer), StateKind::Recurrent,
                                          StateUpdatePolicy::Replace, DType::F32, shape});
  Value* current = variant_.has_past ? b_.state_read(state) : nullptr;
  recurrent_[layer] = {state, current, shape};
  if (!current) return zero_state(dims, DType::F32);
  // A static cache's buffers outlive a sequence: a call at position 0 starts from zeros.
  if (variant_.cache == CacheKind::Static) return b_.mul(current, b_.cast(continues_sequence(), DType::F32));
  return current;
}

void DecoderIO::update_recurrent_state(int64_t layer, Value* final_state) {
  if (variant_.cache == CacheKind::None) return;
  const auto it = recurrent_.find(layer);
  HFX_CHECK(it != recurrent_.end(), "recurrent state of layer ", layer, " updated before it was read");
  b_.state_update(it->second.index, it->second.current, b_.cast(final_state, DType::F32), nullptr, it->second.shape);
}

void DecoderIO::finish(Value* logits) { b_.output(logits, "logits"); }

}  // namespace hfx
