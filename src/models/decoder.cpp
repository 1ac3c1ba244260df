#include "models/decoder.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.h"
#include "io/manifest.h"

namespace hfx {
namespace {

using LayerWindows = std::vector<std::optional<int64_t>>;

// qwen2 / qwen3: the window applies only with use_sliding_window, on the layers layer_types
// marks (4.x configs: the layers from max_window_layers on).
LayerWindows windows_from_layer_types(const JsonConfig& c, int64_t layers) {
  std::optional<int64_t> window;
  if (c.boolean("use_sliding_window", false) && c.has("sliding_window")) window = c.positive("sliding_window");
  LayerWindows out(static_cast<size_t>(layers));
  if (const auto sliding = sliding_layers(c, layers)) {
    for (size_t i = 0; i < sliding->size(); ++i)
      if ((*sliding)[i]) out[i] = window;
    return out;
  }
  const int64_t first_sliding = c.integer("max_window_layers", 28);
  for (int64_t i = first_sliding; i < layers; ++i) out[static_cast<size_t>(i)] = window;
  return out;
}

LayerWindows sliding_windows(const JsonConfig& c, WindowRule rule, int64_t layers) {
  switch (rule) {
    case WindowRule::None:
      return LayerWindows(static_cast<size_t>(layers));
    case WindowRule::AllLayers: {
      std::optional<int64_t> window;
      if (c.has("sliding_window")) window = c.positive("sliding_window");
      return LayerWindows(static_cast<size_t>(layers), window);
    }
    case WindowRule::LayerTypes:
      return windows_from_layer_types(c, layers);
  }
  fail("internal error: window rule");
}

AttentionSpec parse_attention(const JsonConfig& c, const DecoderDefaults& d, int64_t hidden, double eps) {
  AttentionSpec a;
  a.hidden = hidden;
  a.heads = c.positive("num_attention_heads");
  a.kv_heads = d.grouped_kv ? c.positive("num_key_value_heads", d.num_key_value_heads.value_or(a.heads)) : a.heads;
  if (a.heads % a.kv_heads != 0)
    c.invalid("num_key_value_heads", str("must divide num_attention_heads (", a.heads, ")"));
  a.head_dim = c.positive("head_dim", d.head_dim.value_or(hidden / a.heads));
  if (!c.has("head_dim") && !d.head_dim && hidden % a.heads != 0)
    c.invalid("hidden_size", str("must be a multiple of num_attention_heads (", a.heads, ") when head_dim is unset"));
  a.norm_epsilon = eps;
  switch (d.attention_bias) {
    case AttentionBias::FromConfig: a.qkv_bias = a.o_bias = c.boolean("attention_bias", false); break;
    case AttentionBias::QkvAlways: a.qkv_bias = true; break;
    case AttentionBias::None: break;
  }
  a.qk_norm = d.qk_norm;
  return a;
}

// The graph variants to export: the plain forward, or the components a decode loop needs.
std::vector<std::pair<Role, DecoderVariant>> components_for(const GenerationConfig& gen) {
  if (!gen.enabled) return {{Role::Forward, {}}};
  if (gen.static_cache())
    return {{Role::Decode, {CacheKind::Static, true, false, gen.batch_size, gen.max_cache_len}}};
  if (gen.multi_token_decode) {
    DecoderVariant decode{CacheKind::Dynamic, true, false};
    decode.last_logits = gen.last_logits_only;
    return {{Role::Decode, decode}};
  }
  DecoderVariant prefill{CacheKind::Dynamic, false, false};
  prefill.last_logits = true;
  return {{Role::Prefill, prefill}, {Role::Decode, {CacheKind::Dynamic, true, true}}};
}

// inputs_embeds with image_features [features, hidden] (an input) at the image tokens, in order
// over the rows: feature i goes to the i-th image token of the batch; image tokens past the last
// feature keep their embedding (a decode step's, fed no features). Indices past the features read
// a zero row after them, which keeps the gather in range.
Value* merge_image_features(ModelBuilder& m, Value* ids, Value* embeds, int64_t image_token, int64_t max_features) {
  Builder& b = m.b();
  b.set_scope("merge_image_features");
  const Dim hidden = embeds->shape.back();
  const Dim count = m.dim("image_features", 0, max_features);
  Value* features = b.input("image_features", embeds->dtype, {count, hidden});
  Value* is_image = b.compare(OpKind::Equal, ids, b.const_i64({image_token}));
  Value* ones = b.cast(is_image, DType::I64);
  Value* per_row = b.reduce(OpKind::ReduceSum, ones, {1}, false);
  Value* before_row = b.sub(b.cumsum(per_row, 0), per_row);
  Value* index = b.add(b.unsqueeze(before_row, {1}), b.sub(b.cumsum(ones, 1), b.const_i64({1})));
  Value* padded = b.concat({features, b.cast(b.const_f32(std::vector<float>(static_cast<size_t>(hidden.value()), 0.0f),
                                                         {1, hidden.value()}), embeds->dtype)},
                           0, m.graph().dim(dim_plus(count, 1)));
  Value* rows = b.gather(b.shape_of(features), b.const_i64({0}), 0);
  Value* gathered = b.gather(padded, b.min(b.max(index, b.const_i64({0})), rows), 0);  // past the end: the zero row
  Value* available = b.compare(OpKind::Less, index, rows);
  return b.where(b.unsqueeze(b.logical_and(is_image, available), {2}), gathered, embeds);
}

// Qwen3-VL's deepstack inputs (DecoderConfig::deepstack_layers): visual_pos_masks and
// deepstack_visual_embeds, and each token's index into the features: a marked token's order among
// the call's marked tokens, the zero row past the features for the others. The mask is read
// flattened, token t of the call at row t / query, column t % query of the states, whatever its own
// [rows, columns] (OpenVINO GenAI's paged pipeline feeds it [1, tokens] for states [tokens, 1]).
struct DeepstackInputs {
  Value* padded;  // [layers, features + 1, hidden]: the features and a zero row
  Value* index;   // [batch, query] int64
};

DeepstackInputs deepstack_inputs(ModelBuilder& m, const DecoderConfig& cfg, Value* inputs_embeds, DType dtype) {
  Builder& b = m.b();
  const Shape& tokens = inputs_embeds->shape;
  Value* marked = b.input("visual_pos_masks", DType::Bool, {tokens[0], tokens[1]});
  const Dim count = m.dim("deepstack_features", 0, cfg.max_positions);
  Value* embeds = b.input("deepstack_visual_embeds", dtype, {Dim(cfg.deepstack_layers), count, Dim(cfg.hidden)});
  b.set_scope("deepstack");
  const Dim flat = m.graph().dim(dim_times(tokens[0], tokens[1]));
  Value* flat_marked = b.reshape(marked, {flat});
  Value* order = b.sub(b.cumsum(b.cast(flat_marked, DType::I64), 0), b.const_i64({1}));
  Value* rows = b.gather(b.shape_of(embeds), b.const_i64({1}), 0);
  Value* flat_index = b.where(flat_marked, b.min(order, rows), rows);  // past the features: the zero row
  // Token t = row * query + column of the states.
  auto extent = [&](int64_t axis) { return b.gather(b.shape_of(inputs_embeds), b.const_i64({axis}), 0); };
  Value* query = extent(1);
  Value* row_starts = b.mul(b.range(b.const_i64({0}), extent(0), b.const_i64({1}), tokens[0]), query);
  Value* columns = b.range(b.const_i64({0}), query, b.const_i64({1}), tokens[1]);
  Value* token = b.add(b.unsqueeze(row_starts, {1}), b.unsqueeze(columns, {0}));
  Value* zero = b.cast(b.const_f32(std::vector<float>(static_cast<size_t>(cfg.deepstack_layers * cfg.hidden), 0.0f),
                                   {cfg.deepstack_layers, 1, cfg.hidden}), dtype);
  return {b.concat({embeds, zero}, 1, m.graph().dim(dim_plus(count, 1))), b.gather(flat_index, token, 0)};
}

// The states after layer `layer` plus that layer's deepstack features at the marked tokens.
Value* add_deepstack(Builder& b, const DeepstackInputs& in, int64_t layer, Value* x) {
  b.set_scope("deepstack." + std::to_string(layer));
  Value* features = b.gather(in.padded, b.const_i64({layer}, {}), 0);  // [features + 1, hidden]
  return b.add(x, b.gather(features, in.index, 0));
}

// The decoders other models embed, by model_type. Function-local: registrations run in other
// files' static initialisers.
std::map<std::string, DecoderFactory>& decoder_factories() {
  static std::map<std::string, DecoderFactory> registry;
  return registry;
}

}  // namespace

bool register_decoder(const std::string& model_type, DecoderFactory factory) {
  HFX_CHECK(decoder_factories().emplace(model_type, factory).second, "decoder '", model_type, "' registered twice");
  return true;
}

std::unique_ptr<Decoder> make_decoder(const std::string& model_type, const std::string& where) {
  if (const auto it = decoder_factories().find(model_type); it != decoder_factories().end()) return it->second();
  std::string list;
  for (const auto& [type, factory] : decoder_factories()) list += (list.empty() ? "" : ", ") + type;
  fail(where, ": model_type '", model_type, "' is not a supported language model (supported: ", list, ")");
}

std::vector<std::string> architectures(const JsonConfig& c) {
  std::vector<std::string> out;
  if (c.has("architectures") && c.at("architectures").is_array())
    for (const auto& a : c.at("architectures"))
      if (a.is_string()) out.push_back(a.get<std::string>());
  return out;
}

std::optional<std::vector<std::string>> listed_layer_types(const JsonConfig& c, int64_t layers,
                                                          const std::vector<std::string>& allowed) {
  if (!c.has("layer_types")) return std::nullopt;
  const auto& types = c.at("layer_types");
  if (!types.is_array() || static_cast<int64_t>(types.size()) != layers)
    c.invalid("layer_types", str("must list one type for each of the ", layers, " layers"));
  std::vector<std::string> out;
  for (const auto& type : types) {
    const std::string t = type.is_string() ? type.get<std::string>() : "";
    if (std::find(allowed.begin(), allowed.end(), t) == allowed.end()) {
      std::string choices;
      for (size_t i = 0; i < allowed.size(); ++i)
        choices += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + ("\"" + allowed[i] + "\"");
      c.invalid("layer_types", "entries must be " + choices);
    }
    out.push_back(t);
  }
  return out;
}

std::optional<std::vector<bool>> sliding_layers(const JsonConfig& c, int64_t layers) {
  const auto types = listed_layer_types(c, layers, {"full_attention", "sliding_attention"});
  if (!types) return std::nullopt;
  std::vector<bool> out;
  for (const std::string& t : *types) out.push_back(t == "sliding_attention");
  return out;
}

std::vector<bool> patterned_windows(const JsonConfig& c, DecoderConfig& cfg, int64_t fallback, int64_t pattern) {
  std::optional<int64_t> window;
  if (!(c.json().contains("sliding_window") && c.json().at("sliding_window").is_null()))
    window = c.positive("sliding_window", fallback);
  std::vector<bool> sliding(static_cast<size_t>(cfg.layers));
  for (size_t i = 0; i < sliding.size(); ++i) sliding[i] = (static_cast<int64_t>(i) + 1) % pattern != 0;
  if (const auto marked = sliding_layers(c, cfg.layers)) sliding = *marked;
  for (size_t i = 0; i < sliding.size(); ++i) cfg.layer_window[i] = sliding[i] ? window : std::nullopt;
  return sliding;
}

DecoderConfig parse_decoder_config(const JsonConfig& c, const DecoderDefaults& d) {
  DecoderConfig cfg;
  cfg.model_type = c.string("model_type", "");
  cfg.architectures = architectures(c);
  cfg.vocab = c.positive("vocab_size");
  cfg.hidden = c.positive("hidden_size");
  cfg.intermediate = c.positive("intermediate_size");
  cfg.layers = c.positive("num_hidden_layers");
  cfg.max_positions = c.positive("max_position_embeddings", d.max_position_embeddings);
  cfg.norm = d.norm;
  cfg.norm_eps = c.number(d.norm_eps_key, d.norm_eps);
  if (cfg.norm_eps < 0) c.invalid(d.norm_eps_key, "must not be negative");
  cfg.tied = c.boolean("tie_word_embeddings", d.tie_word_embeddings);
  cfg.attention = parse_attention(c, d, cfg.hidden, cfg.norm_eps);
  cfg.mlp = {cfg.hidden, cfg.intermediate, d.mlp_bias && c.boolean("mlp_bias", false),
             c.string(d.activation_key, d.activation)};
  check_activation(c, d.activation_key, cfg.mlp.activation);
  const RopeDefaults rope{cfg.attention.head_dim, cfg.max_positions, d.partial_rotary, d.partial_rotary_factor, d.rope_theta};
  cfg.ropes = {d.rope_params ? parse_rope(c, rope, d.rope_params(c)) : parse_rope(c, rope)};
  cfg.layer_rope.assign(static_cast<size_t>(cfg.layers), 0);
  cfg.layer_window = sliding_windows(c, d.window, cfg.layers);
  if (const auto q = c.object("quantization_config")) {
    const std::string method = q->string("quant_method", "");
    if (!d.quant_method || method != d.quant_method)
      c.invalid("quantization_config", str("pre-quantized checkpoints (quant_method \"", method,
                                           "\") are not supported for ", cfg.model_type, "; export the float checkpoint"));
  }
  return cfg;
}

Value* Decoder::norm(DecoderGraph& g, const std::string& module, Value* x) const {
  Builder& b = g.b();
  const DecoderConfig& cfg = g.cfg;
  b.set_scope(module);
  const std::vector<int64_t> shape{x->shape.back().value()};
  switch (cfg.norm) {
    case NormKind::RMS:
      return b.rms_norm(x, g.m.weight(module + ".weight", shape), cfg.norm_eps);
    case NormKind::RMSOnePlus:
      return b.rms_norm(x, g.m.plus(g.m.weight(module + ".weight", shape), 1.0), cfg.norm_eps);
    case NormKind::LayerNorm: {
      Value* bias = g.m.weight(module + ".bias", shape);
      return b.layer_norm(x, g.m.weight(module + ".weight", shape), bias, cfg.norm_eps);
    }
  }
  fail("internal error: norm kind");
}

Value* Decoder::embed_tokens(DecoderGraph& g, Value* input_ids) const {
  const std::string module = g.cfg.prefix + defaults_.names.embed;
  g.b().set_scope(module);
  Value* x = g.b().embedding(g.m.weight(module + ".weight", {g.cfg.vocab, g.cfg.hidden}), input_ids);
  return scaled(g.b(), x, g.cfg.embedding_scale);
}

Value* Decoder::embed(DecoderGraph& g, Value* x) const {
  g.b().set_scope(g.cfg.prefix + defaults_.names.embed);
  return scaled(g.b(), x, g.cfg.embeds_multiplier);
}

Value* Decoder::attention(DecoderGraph& g, int64_t i, const std::string& prefix, Value* x) const {
  const DecoderConfig& cfg = g.cfg;
  const auto layer = static_cast<size_t>(i);
  const int table = cfg.layer_rope[layer];
  const auto [cos, sin] = table < 0 ? std::pair<Value*, Value*>{nullptr, nullptr} : g.rope_tables[static_cast<size_t>(table)];
  DecoderIO& io = *g.io;
  const AttentionContext ctx{cos, sin, io.mask(cfg.layer_mask(i)),
                             [&io, i](Value* k, Value* v) { return io.update_cache(i, k, v); },
                             !cfg.bidirectional && !io.has_image_blocks()};
  if (cfg.layer_attention_scale.empty()) return attention_block(g.m, prefix, cfg.attention, x, ctx);
  AttentionSpec spec = cfg.attention;
  spec.scale = cfg.layer_attention_scale[layer];
  return attention_block(g.m, prefix, spec, x, ctx);
}

Value* Decoder::mlp(DecoderGraph& g, int64_t i, const std::string& prefix, Value* x) const {
  const DecoderConfig& cfg = g.cfg;
  if (!cfg.moe || !cfg.layer_moe[static_cast<size_t>(i)]) return gated_mlp(g.m, prefix, cfg.mlp, x);
  MoeSpec spec = *cfg.moe;
  // Per-expert tensors (the Hub's, and what transformers saves) or fused ones
  // (save_pretrained(save_original_format=False)), by what the checkpoint holds.
  const bool per_expert = g.m.has(prefix + "experts.0." + spec.gate + ".weight");
  if (spec.layout == MoeSpec::Layout::PerExpert && !per_expert && g.m.has(prefix + "experts.gate_up_proj"))
    spec.layout = MoeSpec::Layout::FusedConcat;
  if (spec.layout == MoeSpec::Layout::FusedInterleavedIn && g.m.has(prefix + "experts.gate_up_proj_blocks"))
    spec.layout = MoeSpec::Layout::Mxfp4;  // gpt-oss as the Hub ships it
  return moe_block(g.m, prefix, spec, x);
}

Value* Decoder::layer(DecoderGraph& g, int64_t i, Value* x) const {
  Builder& b = g.b();
  const DecoderNames& names = defaults_.names;
  const std::string p = layer_prefix(g, i);
  g.io->mask(g.cfg.layer_mask(i));  // built (once) ahead of the layer: a stable node order
  auto normed = [&](const char* name, Value* v) { return *name ? norm(g, p + name, v) : v; };
  // One residual branch: its block between the optional pre- and post-norms.
  auto branch = [&](const char* pre, const char* post, Value* in, auto&& block) {
    return scaled(b, normed(post, block(normed(pre, in))), g.cfg.residual_scale);
  };
  auto attend = [&](Value* h) { return attention(g, i, p + names.attention + ".", h); };
  auto feed_forward = [&](Value* h) { return mlp(g, i, p + names.mlp + ".", h); };
  Value* a = branch(names.attention_norm, names.attention_post_norm, x, attend);
  if (g.cfg.parallel_residual) {
    Value* f = branch(names.mlp_norm, names.mlp_post_norm, x, feed_forward);
    return b.add(b.add(f, a), x);  // HF's order: mlp + attention + residual
  }
  x = b.add(x, a);
  return b.add(x, branch(names.mlp_norm, names.mlp_post_norm, x, feed_forward));
}

Value* Decoder::final_norm(DecoderGraph& g, Value* x) const {
  return norm(g, g.cfg.prefix + defaults_.names.final_norm, x);
}

Value* Decoder::head(DecoderGraph& g, Value* x) const {
  Builder& b = g.b();
  const std::string head = g.cfg.head + ".weight";
  b.set_scope(g.cfg.head);
  if (g.cfg.tied) g.m.tolerate(head);  // some tied checkpoints still carry the copy
  const std::string name = g.cfg.tied ? g.cfg.prefix + defaults_.names.embed + ".weight" : head;
  Value* logits = b.linear(x, g.m.weight(name, {g.cfg.vocab, g.cfg.hidden}));
  logits = scaled(b, logits, g.cfg.logits_multiplier);
  if (g.cfg.logits_divisor != 1.0) logits = b.div(logits, b.scalar(g.cfg.logits_divisor, logits->dtype));
  if (const double cap = g.cfg.final_softcap; cap > 0) {
    Value* c = b.scalar(cap, logits->dtype);
    logits = b.mul(b.unary(OpKind::Tanh, b.div(logits, c)), c);
  }
  return logits;
}

// The task's head over the final hidden states: the LM head's logits (float32), or the hidden
// states themselves (the base model; a causal LM checkpoint's head weights go unused).
void Decoder::finish_task(DecoderGraph& g, Task task, const SentencePooling* pooling, Value* hidden) const {
  switch (task) {
    case Task::TextGeneration: return g.io->finish(g.b().cast(head(g, hidden), DType::F32));
    case Task::FeatureExtraction:
      g.m.tolerate(g.cfg.head + ".weight");
      g.b().output(hidden, "last_hidden_state");
      return;
    case Task::SentenceSimilarity:  // Qwen3-Embedding: the last token's hidden state, normalised
      g.m.tolerate(g.cfg.head + ".weight");
      g.b().output(hidden, "last_hidden_state");
      g.b().set_scope("pooling");
      g.b().output(sentence_embedding(g.b(), *pooling, hidden, g.io->attention_mask()), "sentence_embedding");
      return;
    default: fail("internal error: decoder task ", task_name(task), " was not refused");
  }
}

std::unique_ptr<Graph> Decoder::build_graph(const Checkpoint& ckpt, const ExportConfig& config,
                                            const DecoderConfig& cfg, const DecoderVariant& base_variant,
                                            std::set<std::string>& dims) const {
  ModelBuilder m(ckpt, config);
  if (const auto [fragment, legacy] = defaults_.names.legacy; fragment) m.accept_legacy_name(fragment, legacy);
  Builder& b = m.b();
  DecoderVariant variant = base_variant;
  if (!cfg.ropes.empty() && !cfg.ropes.front().mrope_section.empty()) variant.position_rows = 3;
  // Dynamic NTK exists to run past max_position_embeddings; the bound says how far it stretches.
  int64_t max_sequence = cfg.max_positions;
  for (const RopeConfig& rope : cfg.ropes) {
    if (rope.type != "dynamic") continue;
    const double stretched = static_cast<double>(cfg.max_positions) * std::max(1.0, rope.factor);
    HFX_CHECK(stretched <= 2147483648.0, "config.json: rope_scaling.factor ", rope.factor,
              " stretches max_position_embeddings ", cfg.max_positions, " past 2^31 positions");
    max_sequence = std::max(max_sequence, static_cast<int64_t>(stretched));
  }
  b.set_scope("inputs");
  DecoderIO io(m, variant, max_sequence, {cfg.layers, cfg.attention.kv_heads, cfg.attention.head_dim, config.dtype},
               {cfg.hidden, config.dtype});
  b.set_scope("model.rotary_emb");
  DecoderGraph g{m, &io, cfg, {}};
  for (const RopeConfig& rope : cfg.ropes) g.rope_tables.push_back(rope_cos_sin(b, rope, io.position_ids()));

  // Given inputs_embeds, the embedding table is read only by a tied head.
  if (io.inputs_embeds()) m.tolerate(cfg.prefix + defaults_.names.embed + ".weight");
  Value* x = embed(g, io.inputs_embeds() ? io.inputs_embeds() : embed_tokens(g, io.input_ids()));
  std::optional<DeepstackInputs> deepstack;
  if (cfg.deepstack_layers > 0 && io.inputs_embeds()) {
    b.set_scope("inputs");
    deepstack = deepstack_inputs(m, cfg, io.inputs_embeds(), config.dtype);
  }
  for (int64_t i = 0; i < cfg.layers; ++i) {
    x = layer(g, i, x);
    if (deepstack && i < cfg.deepstack_layers) x = add_deepstack(b, *deepstack, i, x);
  }
  b.set_scope("model.norm");
  // With left padding the last column is every row's last real token.
  if (variant.last_logits) x = b.slice(x, 1, -1, INT64_MAX);
  x = final_norm(g, x);
  finish_task(g, variant.task, variant.pooling, x);
  if (cfg.part_of_checkpoint) m.tolerate_outside({cfg.prefix, cfg.head + "."});
  dims.insert(m.dim_names().begin(), m.dim_names().end());
  return m.finish();
}

namespace {

// Whether two stored tensors hold the same dtype, shape and bytes.
bool same_values(const TensorView& a, const TensorView& b) {
  if (a.dtype != b.dtype || a.shape != b.shape || a.nbytes != b.nbytes) return false;
  const bool same = a.nbytes == 0 || std::memcmp(a.data, b.data, a.nbytes) == 0;
  a.release();
  b.release();
  return same;
}

}  // namespace

ExportModel Decoder::build(const Checkpoint& ckpt, const ExportConfig& config) const {
  DecoderConfig cfg = parse(ckpt.config());
  // A checkpoint saved without the base model's prefix (the Hub's gpt2: "wte.weight", "h.0...").
  cfg.prefix = defaults_.names.model;
  cfg.head = defaults_.names.head;
  const std::string embed = std::string(defaults_.names.embed) + ".weight";
  if (!cfg.prefix.empty() && !ckpt.find(cfg.prefix + embed) && ckpt.find(embed)) cfg.prefix.clear();
  // A vision-language checkpoint whose language model transformers' causal LM class loads alone,
  // dropping "language_model." (Qwen3.5 on the Hub: model.language_model.* beside model.visual.*).
  if (const std::string nested = cfg.prefix + "language_model.";
      !cfg.prefix.empty() && !ckpt.find(cfg.prefix + embed) && ckpt.find(nested + embed)) {
    cfg.prefix = nested;
    cfg.part_of_checkpoint = true;
  }
  // transformers ties the head to the embeddings only where the checkpoint holds no different
  // lm_head.weight (it then warns and keeps both).
  if (cfg.tied) {
    const TensorView* head = ckpt.find(cfg.head + ".weight");
    const TensorView* embeddings = ckpt.find(cfg.prefix + embed);
    if (head && embeddings && !same_values(*head, *embeddings)) cfg.tied = false;
  }
  ExportModel out{cfg.model_type, cfg.architectures, {}, {}};
  // longrope's factors switch once positions pass the original length: a cache built before
  // that holds keys rotated with the short factors (transformers rebuilds it there).
  for (const RopeConfig& rope : cfg.ropes)
    if (rope.type == "longrope") out.rebuild_cache_at_length = rope.original_max_position_embeddings + 1;
  // A sentence-transformers checkpoint (Qwen3-Embedding) pools its hidden states by default.
  const std::optional<SentencePooling> pooling = read_sentence_pooling(ckpt);
  out.task = resolve_task_with_pooling(config.task, cfg.architectures, Task::TextGeneration, pooling, ckpt);
  if (out.task != Task::TextGeneration && out.task != Task::FeatureExtraction && out.task != Task::SentenceSimilarity)
    fail("task: ", cfg.model_type, " exports text-generation, feature-extraction or sentence-similarity, not ",
         task_name(out.task), config.task.empty() ? " (from config.json's architectures; give --task)" : "");
  out.sentence_pooling = sentence_pooling_json(pooling);
  if (cfg.bidirectional && config.generation.enabled)
    fail("config.json: use_bidirectional_attention: a bidirectional model has no decode loop (each token attends to "
         "the ones after it); export its forward, without --for-generation");
  if (out.task != Task::TextGeneration && config.generation.enabled)
    fail("task: ", task_name(out.task), " has no decode loop (config.json's architectures name ",
         cfg.architectures.empty() ? "none" : cfg.architectures.front(), "; give --task text-generation)");
  for (auto [role, variant] : components_for(config.generation)) {
    variant.task = out.task;
    variant.pooling = pooling ? &*pooling : nullptr;
    out.components.push_back({role, build_graph(ckpt, config, cfg, variant, out.dims)});
  }
  for (Component& c : out.components) {
    c.graph->output_type = std::string("transformers.modeling_outputs.") +
                           (out.task == Task::TextGeneration ? defaults_.output_type : "BaseModelOutputWithPast");
    c.graph->num_layers = cfg.layers;
  }
  return out;
}

DecoderConfig Decoder::parse_part(const JsonConfig& text_config, std::string prefix, std::string head) const {
  DecoderConfig cfg = parse(text_config);
  cfg.prefix = std::move(prefix);
  cfg.head = std::move(head);
  cfg.part_of_checkpoint = true;
  return cfg;
}

std::unique_ptr<Graph> Decoder::token_embedding_graph(const Checkpoint& ckpt, const ExportConfig& config,
                                                      const DecoderConfig& cfg, std::set<std::string>& dims,
                                                      std::optional<int64_t> image_token) const {
  ModelBuilder m(ckpt, config);
  if (const auto [fragment, legacy] = defaults_.names.legacy; fragment) m.accept_legacy_name(fragment, legacy);
  Builder& b = m.b();
  b.set_scope("inputs");
  // As many tokens as the text decoder takes in one call.
  const int64_t longest = config.generation.static_cache() ? config.generation.max_cache_len : cfg.max_positions;
  Value* ids = b.input("input_ids", DType::I64, {m.dim("batch", 1, 4096), m.dim("sequence", 1, longest)});
  DecoderGraph g{m, nullptr, cfg, {}};
  Value* embeds = embed_tokens(g, ids);
  if (image_token) embeds = merge_image_features(m, ids, embeds, *image_token, cfg.max_positions);
  b.output(embeds, "inputs_embeds");
  for (const TensorView* t : ckpt.tensors())
    if (t->name != cfg.prefix + defaults_.names.embed + ".weight") m.tolerate(t->name);
  dims.insert(m.dim_names().begin(), m.dim_names().end());
  return m.finish();
}

std::unique_ptr<Graph> Decoder::text_decoder_graph(const Checkpoint& ckpt, const ExportConfig& config,
                                                   const DecoderConfig& cfg, std::set<std::string>& dims,
                                                   bool image_blocks) const {
  const GenerationConfig& gen = config.generation;
  DecoderVariant variant;
  if (gen.static_cache()) variant = {CacheKind::Static, true, false, gen.batch_size, gen.max_cache_len};
  else if (gen.enabled) variant = {CacheKind::Dynamic, true, false};
  variant.last_logits = gen.enabled && gen.last_logits_only;
  variant.inputs_embeds = true;
  variant.image_blocks = image_blocks;
  return build_graph(ckpt, config, cfg, variant, dims);
}

}  // namespace hfx
