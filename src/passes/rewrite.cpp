#include "passes/rewrite.h"

#include <map>

namespace hfx {

void rewrite_nodes(Graph& graph, const std::function<Rewrite(Node&, Builder&)>& visit) {
  std::vector<Node*> order;
  std::map<Value*, Value*> replaced;
  Builder b(graph);
  b.set_sink(&order);
  auto remap = [&](Value* v) {
    const auto it = replaced.find(v);
    return it == replaced.end() ? v : it->second;
  };
  for (Node* n : graph.order) {
    for (Value*& in : n->inputs)
      if (in) in = remap(in);
    b.set_scope(n->name.substr(0, n->name.rfind('/')));
    // Nodes the visit emits go before (in place of) the node they rewrite.
    const Rewrite r = visit(*n, b);
    if (r.kind == Rewrite::Kind::Keep) order.push_back(n);
    if (r.kind == Rewrite::Kind::Replace)
      for (size_t i = 0; i < r.with.size(); ++i) replaced[n->outputs[i]] = r.with[i];
  }
  for (Value*& out : graph.outputs) {
    Value* r = remap(out);
    if (r != out) r->name = out->name;
    out = r;
  }
  for (StatePair& state : graph.state_pairs) state.output = remap(state.output);
  graph.order = std::move(order);
}

}  // namespace hfx
