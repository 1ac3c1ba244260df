// The BART family's text-to-text generation (bart, mbart, marian), exported with --for-generation:
// the `encoder` (input_ids, attention_mask -> last_hidden_state, and every decoder layer's
// cross-attention keys and values, written once) and the `decoder` (its self-attention cache, the
// encoder's state under encoder_attention_mask -> logits). Token embeddings times
// sqrt(d_model) with scale_embedding, plus positions (learned with an offset of 2 in bart / mbart;
// sinusoidal in marian, from the checkpoint or computed as transformers does), a LayerNorm over
// them (bart, mbart); layers of attention (biases everywhere, 1/sqrt(head_dim)), cross-attention in
// the decoder, and a feed-forward, each added to the residual then normed (bart, marian) or normed
// first (mbart, whose stacks end with a LayerNorm); the LM head over the shared embeddings plus
// final_logits_bias. Positions count the cache (past + i), as transformers does.
#include <cmath>
#include <set>

#include "core/error.h"
#include "models/blocks.h"
#include "models/decoder.h"
#include "models/decoder_io.h"
#include "models/encoder.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/seq2seq.h"

namespace hfx {
namespace {

constexpr int64_t kMaxBatch = 4096;

// What differs between the family's model types.
struct BartVariant {
  bool pre_norm = false;             // mbart: norm before each sub-layer, a LayerNorm closing each stack
  bool sinusoidal = false;           // marian: fixed sinusoidal positions, no offset
  bool layernorm_embedding = true;   // a LayerNorm over embeddings + positions
  int64_t position_offset = 2;       // learned positions are looked up at position + 2
};

struct BartConfig {
  std::vector<std::string> architectures;
  std::string prefix;  // "model." (the conditional-generation class) or "" (BartModel)
  int64_t vocab = 0, hidden = 0, positions = 0;
  int64_t encoder_layers = 0, encoder_heads = 0, encoder_ffn = 0;
  int64_t decoder_layers = 0, decoder_heads = 0, decoder_ffn = 0;
  double embed_scale = 1.0;
  std::string activation;
};

BartConfig parse_bart(const JsonConfig& c, const Checkpoint& ckpt) {
  BartConfig cfg;
  cfg.architectures = architectures(c);
  cfg.prefix = ckpt.find("model.shared.weight") || ckpt.find("model.encoder.embed_tokens.weight") ? "model." : "";
  cfg.vocab = c.positive("vocab_size", 50265);
  cfg.hidden = c.positive("d_model", 1024);
  cfg.positions = c.positive("max_position_embeddings", 1024);
  cfg.encoder_layers = c.positive("encoder_layers", 12);
  cfg.encoder_heads = c.positive("encoder_attention_heads", 16);
  cfg.encoder_ffn = c.positive("encoder_ffn_dim", 4096);
  cfg.decoder_layers = c.positive("decoder_layers", 12);
  cfg.decoder_heads = c.positive("decoder_attention_heads", 16);
  cfg.decoder_ffn = c.positive("decoder_ffn_dim", 4096);
  for (const char* key : {"encoder_attention_heads", "decoder_attention_heads"})
    if (cfg.hidden % c.positive(key, 16) != 0) c.invalid(key, "must divide d_model");
  cfg.embed_scale = c.boolean("scale_embedding", false) ? std::sqrt(static_cast<double>(cfg.hidden)) : 1.0;
  cfg.activation = c.string("activation_function", "gelu");
  check_activation(c, "activation_function", cfg.activation);
  if (c.has("decoder_vocab_size") && c.positive("decoder_vocab_size", cfg.vocab) != cfg.vocab)
    c.invalid("decoder_vocab_size", "a decoder vocabulary other than the encoder's is not supported");
  return cfg;
}

// The task: text2text-generation, a decode loop (--for-generation); the only one exported.
Task bart_task(const std::string& model_type, const ExportConfig& config) {
  if (!config.task.empty() && config.task != task_name(Task::Text2TextGeneration))
    fail("task: ", model_type, " exports text2text-generation (--for-generation), not ", config.task);
  if (!config.generation.enabled)
    fail("task: ", model_type, "'s text2text-generation is a decode loop: export it with --for-generation (the "
         "encoder and the decoder with its caches)");
  return Task::Text2TextGeneration;
}

constexpr double kLayerNormEps = 1e-5;  // nn.LayerNorm's default: the configs have no key for it

// marian's table: sin of pos / 10000^(2k / dim) in the first half of the features, cos in the
// second (computed in float64, stored as float32, as transformers does).
std::vector<float> sinusoidal_table(int64_t positions, int64_t dim) {
  const int64_t sines = (dim + 1) / 2;
  std::vector<float> table(static_cast<size_t>(positions * dim));
  for (int64_t pos = 0; pos < positions; ++pos)
    for (int64_t j = 0; j < dim; ++j) {
      const bool sine = j < sines;
      const int64_t k = sine ? j : j - sines;
      const double angle = static_cast<double>(pos) / std::pow(10000.0, 2.0 * static_cast<double>(k) / static_cast<double>(dim));
      table[static_cast<size_t>(pos * dim + j)] = static_cast<float>(sine ? std::sin(angle) : std::cos(angle));
    }
  return table;
}

class BartBuilder {
 public:
  BartBuilder(const Checkpoint& ckpt, const BartConfig& cfg, const BartVariant& v) : ckpt_(ckpt), cfg_(cfg), v_(v) {}

  std::unique_ptr<Graph> encoder(const ExportConfig& config, std::set<std::string>& dims) const;
  std::unique_ptr<Graph> decoder(const ExportConfig& config, std::set<std::string>& dims) const;

 private:
  std::string stack(const char* which) const { return cfg_.prefix + which + "."; }
  Value* norm(ModelBuilder& m, const std::string& module, Value* x) const {
    return encoder_layer_norm(m, module, x, kLayerNormEps);
  }
  // Token embeddings times the scale, plus the positions [batch or 1, S] of this call, normed.
  Value* embed(ModelBuilder& m, const std::string& p, Value* ids, Value* positions) const;
  // A sub-layer with its residual: post-norm (bart, marian) or pre-norm (mbart) around `body`.
  template <class Body>
  Value* residual(ModelBuilder& m, const std::string& norm_module, Value* x, Body body) const {
    if (v_.pre_norm) return m.b().add(x, body(norm(m, norm_module, x)));
    return norm(m, norm_module, m.b().add(x, body(x)));
  }
  Value* feed_forward(ModelBuilder& m, const std::string& p, int64_t ffn, Value* x) const;
  AttentionSpec attention(int64_t heads) const {
    AttentionSpec a{.hidden = cfg_.hidden, .heads = heads, .kv_heads = heads, .head_dim = cfg_.hidden / heads};
    a.o = "out_proj";
    a.qkv_bias = a.o_bias = true;
    return a;
  }
  // The table of the embedding module under `p` (the stack's own copy of the shared embeddings if stored).
  Value* token_table(ModelBuilder& m, const std::string& p) const {
    const std::string own = p + "embed_tokens.weight";
    return m.weight(m.has(own) ? own : cfg_.prefix + "shared.weight", {cfg_.vocab, cfg_.hidden});
  }

  const Checkpoint& ckpt_;
  const BartConfig& cfg_;
  const BartVariant& v_;
};

Value* BartBuilder::embed(ModelBuilder& m, const std::string& p, Value* ids, Value* positions) const {
  Builder& b = m.b();
  b.set_scope(p + "embed_tokens");
  Value* x = b.embedding(token_table(m, p), ids);
  if (cfg_.embed_scale != 1.0) x = b.mul(x, b.scalar(cfg_.embed_scale, m.config().dtype));
  b.set_scope(p + "embed_positions");
  const std::string name = p + "embed_positions.weight";
  const int64_t rows = cfg_.positions + (v_.sinusoidal ? 0 : v_.position_offset);
  Value* table = nullptr;
  if (v_.sinusoidal && !m.has(name)) {  // transformers computes it when the checkpoint leaves it out
    const std::vector<float> values = sinusoidal_table(rows, cfg_.hidden);
    table = b.cast(b.const_f32(values, {rows, cfg_.hidden}), m.config().dtype);
  } else {
    table = m.weight(name, {rows, cfg_.hidden});
  }
  if (!v_.sinusoidal) positions = b.add(positions, b.const_i64({v_.position_offset}));
  x = b.add(x, b.embedding(table, positions));
  return v_.layernorm_embedding ? norm(m, p + "layernorm_embedding", x) : x;
}

Value* BartBuilder::feed_forward(ModelBuilder& m, const std::string& p, int64_t ffn, Value* x) const {
  MlpSpec mlp{.hidden = cfg_.hidden, .intermediate = ffn, .bias = true, .activation = cfg_.activation, .gated = false};
  mlp.up = "fc1", mlp.down = "fc2";
  return residual(m, p + "final_layer_norm", x, [&](Value* y) { return gated_mlp(m, p, mlp, y); });
}

// [S] 0..S-1 of input_ids [batch, S], as [1, S].
Value* token_positions(Builder& b, Value* ids) { return b.unsqueeze(arange_tokens(b, ids), {0}); }

std::unique_ptr<Graph> BartBuilder::encoder(const ExportConfig& config, std::set<std::string>& dims) const {
  ModelBuilder m(ckpt_, config);
  Builder& b = m.b();
  b.set_scope("inputs");
  const Dim batch = m.dim("batch", 1, kMaxBatch), sequence = m.dim("encoder_sequence", 1, cfg_.positions);
  Value* ids = b.input("input_ids", DType::I64, {batch, sequence});
  Value* attention_mask = b.input("attention_mask", DType::I64, {batch, sequence});
  Value* mask = padding_mask(b, ids, attention_mask);
  const std::string p = stack("encoder");
  Value* x = embed(m, p, ids, token_positions(b, ids));
  const AttentionSpec spec = attention(cfg_.encoder_heads);
  const AttentionContext ctx{nullptr, nullptr, mask, [](Value* k, Value* v) { return std::pair{k, v}; }, false};
  for (int64_t i = 0; i < cfg_.encoder_layers; ++i) {
    const std::string lp = p + "layers." + std::to_string(i) + ".";
    x = residual(m, lp + "self_attn_layer_norm", x,
                 [&](Value* y) { return attention_block(m, lp + "self_attn.", spec, y, ctx); });
    x = feed_forward(m, lp, cfg_.encoder_ffn, x);
  }
  if (v_.pre_norm) x = norm(m, p + "layer_norm", x);
  b.output(x, "last_hidden_state");
  const AttentionSpec cross = attention(cfg_.decoder_heads);
  const bool writes = encoder_writes_cross_state(config.generation);
  for (int64_t i = 0; writes && i < cfg_.decoder_layers; ++i) {
    const auto [k, v] = cross_keys_values(m, stack("decoder") + "layers." + std::to_string(i) + ".encoder_attn.", cross, x);
    write_cross_state(b, i, {batch, sequence, cfg_.decoder_heads, cfg_.hidden / cfg_.decoder_heads, config.dtype}, k, v);
  }
  for (const TensorView* t : ckpt_.tensors())
    if (!t->name.starts_with(p) && !(writes && is_cross_key_value(t->name, ".encoder_attn.", cross))) m.tolerate(t->name);
  return finish_component(m, "BaseModelOutput", cfg_.encoder_layers, dims);
}

std::unique_ptr<Graph> BartBuilder::decoder(const ExportConfig& config, std::set<std::string>& dims) const {
  ModelBuilder m(ckpt_, config);
  Builder& b = m.b();
  const DecoderVariant variant = decoder_variant(config.generation);
  const int64_t head_dim = cfg_.hidden / cfg_.decoder_heads;
  b.set_scope("inputs");
  DecoderIO io(m, variant, cfg_.positions, {cfg_.decoder_layers, cfg_.decoder_heads, head_dim, config.dtype},
               {cfg_.hidden, config.dtype});
  Value* ids = io.input_ids();
  if (!ids) fail("inputs: the decoder takes input_ids");
  const Dim batch = ids->shape[0], encoder_sequence = m.dim("encoder_sequence", 1, cfg_.positions);
  Value* cross_mask = encoder_padding(b, b.input("encoder_attention_mask", DType::I64, {batch, encoder_sequence}));
  Value* encoder_hidden_states =
      first_step_hidden_states(b, config.generation, batch, encoder_sequence, cfg_.hidden, config.dtype);
  const std::string p = stack("decoder");
  Value* x = embed(m, p, ids, decoder_positions(b, io, variant, ids).positions);
  Value* mask = io.mask({});
  const AttentionSpec spec = attention(cfg_.decoder_heads);
  const CrossStateShape cross_shape{batch, encoder_sequence, cfg_.decoder_heads, head_dim, config.dtype};
  for (int64_t i = 0; i < cfg_.decoder_layers; ++i) {
    const std::string lp = p + "layers." + std::to_string(i) + ".";
    const AttentionContext ctx{nullptr, nullptr, mask, [&](Value* k, Value* v) { return io.update_cache(i, k, v); }, true};
    x = residual(m, lp + "self_attn_layer_norm", x,
                 [&](Value* y) { return attention_block(m, lp + "self_attn.", spec, y, ctx); });
    const std::pair<Value*, Value*> cross =
        decoder_cross_state(m, i, cross_shape, encoder_hidden_states, lp + "encoder_attn.", spec);
    x = residual(m, lp + "encoder_attn_layer_norm", x, [&](Value* y) {
      return cross_attention_block(m, lp + "encoder_attn.", spec, y, cross.first, cross.second, cross_mask);
    });
    x = feed_forward(m, lp, cfg_.decoder_ffn, x);
  }
  // A loop needs only the last position's logits (the backend asks when one graph serves prompt and steps).
  if (config.generation.last_logits_only) x = b.slice(x, 1, -1, INT64_MAX);
  if (v_.pre_norm) x = norm(m, p + "layer_norm", x);
  b.set_scope("lm_head");
  const std::string head = m.has("lm_head.weight") ? "lm_head.weight" : cfg_.prefix + "shared.weight";
  Value* logits = b.linear(x, m.weight(head, {cfg_.vocab, cfg_.hidden}));
  // A buffer transformers zeroes when the checkpoint leaves it out.
  if (m.has("final_logits_bias")) logits = b.add(logits, m.weight("final_logits_bias", {1, cfg_.vocab}));
  io.finish(b.cast(logits, DType::F32));
  for (const TensorView* t : ckpt_.tensors())
    if (!t->name.starts_with(p) || is_cross_key_value(t->name, ".encoder_attn.", spec)) m.tolerate(t->name);
  return finish_component(m, "Seq2SeqLMOutput", cfg_.decoder_layers, dims);
}

ExportModel build_bart(const Checkpoint& ckpt, const ExportConfig& config, const BartVariant& variant) {
  const std::string model_type = ckpt.config().string("model_type", "bart");
  const BartConfig cfg = parse_bart(ckpt.config(), ckpt);
  ExportModel out{model_type, cfg.architectures, {}, {}};
  out.task = bart_task(model_type, config);
  if (cfg.prefix.empty())
    fail("task: ", model_type, " checkpoint without an LM head (", cfg.architectures.empty() ? "no architectures" : cfg.architectures.front(),
         "): text2text-generation needs the conditional-generation class's weights");
  const BartBuilder builder(ckpt, cfg, variant);
  add_generation_components(
      out, config, [&](const ExportConfig& c) { return builder.encoder(c, out.dims); },
      [&](const ExportConfig& c) { return builder.decoder(c, out.dims); });
  return out;
}

}  // namespace

HFX_REGISTER_ARCH("bart", [](const Checkpoint& c, const ExportConfig& x) { return build_bart(c, x, {}); })
HFX_REGISTER_ARCH("mbart", [](const Checkpoint& c, const ExportConfig& x) {
  return build_bart(c, x, {.pre_norm = true});
})
HFX_REGISTER_ARCH("marian", [](const Checkpoint& c, const ExportConfig& x) {
  return build_bart(c, x, {.sinusoidal = true, .layernorm_embedding = false, .position_offset = 0});
})

}  // namespace hfx
