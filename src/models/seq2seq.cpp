#include "models/seq2seq.h"

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

Value* encoder_padding(Builder& b, Value* encoder_attention_mask) {
  return b.unsqueeze(b.compare(OpKind::Greater, encoder_attention_mask, b.const_i64({0})), {1, 2});
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
