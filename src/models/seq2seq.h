// What the encoder-decoder families (whisper.cpp, t5.cpp, bart.cpp) share around their two
// generation components: the cross-attention state the `encoder` writes once and the `decoder`
// reads every step (past_key_values.{i}.encoder.key|value: optimum's names), the encoder's padding
// over the decoder's queries, and handing a finished component graph over.
#pragma once
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "core/export_config.h"
#include "ir/builder.h"
#include "models/blocks.h"
#include "models/decoder_io.h"
#include "models/model_builder.h"
#include "models/registry.h"

namespace hfx {

// The shape of one layer's cross-attention keys (or values): [batch, heads, encoder length, head_dim].
struct CrossStateShape {
  Dim batch, length;
  int64_t heads, head_dim;
  DType dtype;
};

// Encoder side: declares decoder layer `layer`'s cross-attention state and writes `keys` / `values` into it.
void write_cross_state(Builder& b, int64_t layer, const CrossStateShape& shape, Value* keys, Value* values);
// Decoder side: declares the same state and reads it (keys, values).
std::pair<Value*, Value*> read_cross_state(Builder& b, int64_t layer, const CrossStateShape& shape);

// Whether the encoder component computes the decoder's cross-attention state (else the decoder
// does, from encoder_hidden_states: generation.cross_state).
bool encoder_writes_cross_state(const GenerationConfig& generation);
// The decoder's encoder_hidden_states input [batch, encoder length, hidden] when it projects the
// cross-attention state itself; null for a decoder that reads the encoder's state.
Value* first_step_hidden_states(Builder& b, const GenerationConfig& generation, Dim batch, Dim length, int64_t hidden,
                                DType dtype);
// A decoder's layer `layer` cross-attention keys and values: read from the encoder's state, or,
// given `encoder_hidden_states`, projected from them (`module` + spec's k / v) and written as that
// state (a first step returns it; a stateful decoder keeps it, projected on its first call only).
std::pair<Value*, Value*> decoder_cross_state(ModelBuilder& m, int64_t layer, const CrossStateShape& shape,
                                              Value* encoder_hidden_states, const std::string& module,
                                              const AttentionSpec& spec);

// An encoder-decoder's generation components from its two builders: [encoder, decoder], or with
// generation.cross_state FirstDecoderStep [encoder, prefill (the decoder's first step), decoder].
using ComponentBuilder = std::function<std::unique_ptr<Graph>(const ExportConfig&)>;
void add_generation_components(ExportModel& out, const ExportConfig& config, const ComponentBuilder& encoder,
                               const ComponentBuilder& decoder);

// Whether checkpoint tensor `name` is a decoder layer's cross-attention key or value projection
// (`module` + spec.k / spec.v, e.g. ".encoder_attn.k_proj."): the encoder component reads those.
bool is_cross_key_value(const std::string& name, const std::string& module, const AttentionSpec& spec);

// [batch, 1, 1, encoder length] bool, true = attend: the encoder's attention_mask [batch, length].
Value* encoder_padding(Builder& b, Value* encoder_attention_mask);

// The decoder component's cache: dynamic (past -> present, from empty: one graph for the prompt and
// the steps; none for a first step, which returns a fresh one) or static (in place, --static-cache),
// under optimum's past_key_values.{i}.decoder.* names.
DecoderVariant decoder_variant(const GenerationConfig& generation);

// This call's decoder positions and the keys attention sees: query i sits at cache position
// past + i (dynamic: past = the mask's length less this call's, as transformers counts them; a
// [1, query] row) or at its position_ids (static: [batch, query] slots); `keys` is the mask's key
// count (a 0-d int64), `total` its dim.
struct QueryPositions {
  Value* positions;
  Value* keys;
  Dim total;
};
QueryPositions decoder_positions(Builder& b, DecoderIO& io, const DecoderVariant& variant, Value* input_ids);

// The graph `m` built, with the transformers output class and layer count the backends report.
std::unique_ptr<Graph> finish_component(ModelBuilder& m, const char* output_type, int64_t layers,
                                        std::set<std::string>& dims);

}  // namespace hfx
