// Graph passes. Each is a small rewrite; run verify() between them in debug builds.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hfx {

class Builder;
// An op's reference decomposition: emits primitives computing `n`'s results, returns them in order.
using Decomposition = std::vector<Value*> (*)(Builder& b, const Node& n);
// Null for primitives; every high-level op has one (tested).
Decomposition reference_decomposition(OpKind op);

// Replaces every high-level op the backend cannot map natively with its reference decomposition.
void decompose(Graph& graph, const std::function<bool(const Node&)>& backend_maps_natively);

// Packs Linear ops that read the same input into one over their stacked checkpoint weights, each
// original result becoming a Slice of the packed one (q/k/v, gate/up: fewer, wider MatMuls).
void pack_linears(Graph& graph);

struct QuantizeReport {
  int quantized = 0;
  std::vector<std::string> kept_float;  // weights whose input size is not a multiple of the group size
  std::vector<std::string> embeddings;  // embedding tables read from a quantized lm_head's codes (tied)
  bool int8_compute = false;
};
// Turns every Linear over a checkpoint weight into a QuantizedLinear (codes and scales derived
// from the weight when written); Linears whose input size the group size does not divide stay.
// An Embedding over a weight some Linear quantized (tied embeddings) becomes a QuantizedEmbedding
// over the same codes and scales.
QuantizeReport quantize_linears(Graph& graph, const WeightQuantization& q);

// Lowers graph state (StateRead / StateUpdate) to graph inputs and outputs, by update policy:
// append to past/present + KVAppend, slots and ring to in-place input./output. pairs +
// ScatterElements (ring at position mod window), replace to a past/present pair of one shape,
// write-once to an output where it is computed and an input where it is read; fills
// graph.state_pairs.
void lower_state_as_io(Graph& graph);

// Drops nodes whose results nothing uses.
void eliminate_dead_code(Graph& graph);

}  // namespace hfx
