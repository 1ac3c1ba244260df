#include "models/seq2seq.h"

#include <tuple>

#include "core/error.h"

namespace hfx {
namespace {

StateDecl cross_state(int64_t layer, const char* which, const CrossStateShape& s) {
  return {"past_key_values." + std::to_string(layer) + ".encoder." + which, StateKind::CrossKeyValue,
          StateUpdatePolicy::WriteOnce, s.dtype, {s.batch, Dim(s.heads), s.length, Dim(s.head_dim)}};
}

}  // namespace

void write_cross_state(Builder& b, int64_t layer, const CrossStateShape& shape, Value* keys, Value* values) {
  for (auto [which, value] : {std::pair{"key", keys}, std::pair{"value", values}}) {
    const int64_t state = b.declare_state(cross_state(layer, which, shape));
    b.state_update(state, nullptr, value, nullptr, value->shape);
  }
}

std::pair<Value*, Value*> read_cross_state(Builder& b, int64_t layer, const CrossStateShape& shape) {
  Value* keys = b.state_read(b.declare_state(cross_state(layer, "key", shape)));
  return {keys, b.state_read(b.declare_state(cross_state(layer, "value", shape)))};
}

bool encoder_writes_cross_state(const GenerationConfig& g) { return g.cross_state == GenerationConfig::CrossState::Encoder; }

Value* first_step_hidden_states(Builder& b, const GenerationConfig& g, Dim batch, Dim length, int64_t hidden,
                                DType dtype) {
  if (!g.decoder_first_step && g.cross_state != GenerationConfig::CrossState::DecoderVariable) return nullptr;
  return b.input("encoder_hidden_states", dtype, {batch, length, Dim(hidden)});
}

std::pair<Value*, Value*> decoder_cross_state(ModelBuilder& m, int64_t layer, const CrossStateShape& shape,
                                              Value* encoder_hidden_states, const std::string& module,
                                              const AttentionSpec& spec) {
  if (!encoder_hidden_states) return read_cross_state(m.b(), layer, shape);
  Builder& b = m.b();
  const auto [keys, values] = cross_keys_values(m, module, spec, encoder_hidden_states);
  if (m.config().generation.cross_state != GenerationConfig::CrossState::DecoderVariable) {
    write_cross_state(b, layer, shape, keys, values);  // the first step returns it
    return {keys, values};
  }
  // Projected into the state on the first call, read from it after (the backend initialises the
  // variable from the projection only while it is empty).
  std::pair<Value*, Value*> read;
  for (auto [which, value, into] : {std::tuple{"key", keys, &read.first}, std::tuple{"value", values, &read.second}}) {
    const int64_t state = b.declare_state(cross_state(layer, which, shape));
    b.state_update(state, nullptr, value, nullptr, value->shape);
    *into = b.state_read(state);
  }
  return read;
}

void add_generation_components(ExportModel& out, const ExportConfig& config, const ComponentBuilder& encoder,
                               const ComponentBuilder& decoder) {
  out.components.push_back({Role::Encoder, encoder(config)});
  if (config.generation.cross_state == GenerationConfig::CrossState::FirstDecoderStep) {
    ExportConfig first = config;
    first.generation.decoder_first_step = true;
    out.components.push_back({Role::Prefill, decoder(first)});
  }
  out.components.push_back({Role::Decoder, decoder(config)});
}

bool is_cross_key_value(const std::string& name, const std::string& module, const AttentionSpec& spec) {
  return name.find(module + spec.k + ".") != std::string::npos || name.find(module + spec.v + ".") != std::string::npos;
}

Value* encoder_padding(Builder& b, Value* encoder_attention_mask) {
  return b.unsqueeze(b.compare(OpKind::Greater, encoder_attention_mask, b.const_i64({0})), {1, 2});
}

DecoderVariant decoder_variant(const GenerationConfig& g) {
  DecoderVariant v = g.static_cache() ? DecoderVariant{CacheKind::Static, true, false, g.batch_size, g.max_cache_len}
                                      : DecoderVariant{CacheKind::Dynamic, !g.decoder_first_step, false};
  v.cache_group = ".decoder";
  v.positions_from_past = g.cross_state != GenerationConfig::CrossState::Encoder || !g.decoder_mask;
  v.attention_mask = g.decoder_mask;
  return v;
}

QueryPositions decoder_positions(Builder& b, DecoderIO& io, const DecoderVariant& variant, Value* input_ids) {
  if (variant.cache == CacheKind::Static) {
    Value* mask = io.mask({});  // [batch, 1, query, cache]: the caller's
    return {io.position_ids(), b.gather(b.shape_of(mask), b.const_i64({3}), 0), mask->shape[3]};
  }
  Value* one = b.const_i64({1});
  Value* keys = io.key_count(one);
  Value* past = b.sub(keys, b.gather(b.shape_of(input_ids), one, 0));
  return {b.unsqueeze(b.range(past, keys, one, input_ids->shape[1]), {0}), keys, io.key_dim()};
}

std::unique_ptr<Graph> finish_component(ModelBuilder& m, const char* output_type, int64_t layers,
                                        std::set<std::string>& dims) {
  std::unique_ptr<Graph> graph = m.finish();
  graph->output_type = std::string("transformers.modeling_outputs.") + output_type;
  graph->num_layers = layers;
  dims.insert(m.dim_names().begin(), m.dim_names().end());
  return graph;
}

}  // namespace hfx
