// The shape of every node-by-node rewrite: visit each node of graph.order in turn and keep it,
// drop it, or replace its result with a value emitted through a builder (which appends to the
// new order in place of the node). Later nodes, graph outputs and state pairs then read the
// replacement, and a graph output keeps its name.
#pragma once
#include <functional>

#include "ir/builder.h"
#include "ir/graph.h"

namespace hfx {

struct Rewrite {
  enum class Kind { Keep, Drop, Replace } kind = Kind::Keep;
  std::vector<Value*> with;  // Replace: the node's results are now these values, in order

  static Rewrite keep() { return {}; }
  static Rewrite drop() { return {Kind::Drop, {}}; }
  static Rewrite replace(Value* v) { return {Kind::Replace, {v}}; }
  static Rewrite replace(std::vector<Value*> values) { return {Kind::Replace, std::move(values)}; }
};

// `visit(node, b)`: the node's inputs already read earlier replacements; b's scope is the node's.
void rewrite_nodes(Graph& graph, const std::function<Rewrite(Node& node, Builder& b)>& visit);

}  // namespace hfx
