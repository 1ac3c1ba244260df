// Packs Linear ops that read the same input (q/k/v projections, gate/up) into one Linear over
// their stacked weights, followed by a Slice per original result. One wide MatMul streams the
// same bytes as several narrow ones with fewer kernel launches and thread-pool rounds, which is
// what batch-1 decode is bound by.
#include <map>
#include <tuple>

#include "core/error.h"
#include "passes/passes.h"

namespace hfx {
namespace {

// A Linear whose weight (and bias, if any) are checkpoint tensors read by nothing else.
bool packable(const Node& n, const std::map<const Value*, int>& uses) {
  if (n.op != OpKind::Linear) return false;
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    const Value* c = n.inputs[i];
    if (!c) continue;
    if (!c->is_constant() || !c->constant->from_checkpoint() || uses.at(c) != 1) return false;
  }
  return n.inputs[1]->rank() == 2;
}

// What must agree for weights to stack: the input, the weight's storage and target dtypes, and
// whether there is a bias (and its dtypes).
using PackKey = std::tuple<const Value*, DType, DType, bool, DType, DType>;

PackKey pack_key(const Node& n) {
  const Value* w = n.inputs[1];
  const Value* bias = n.inputs.size() > 2 ? n.inputs[2] : nullptr;
  return {n.inputs[0], w->dtype, w->constant->src_dtype, bias != nullptr, bias ? bias->dtype : DType::F32,
          bias ? bias->constant->src_dtype : DType::F32};
}

// "a.b.q_proj.weight" + "a.b.k_proj.weight" -> "a.b.q_proj+k_proj.weight".
std::string packed_name(const std::vector<const Value*>& parts) {
  const std::string& first = parts.front()->name;
  const size_t module_end = first.rfind('.');
  const size_t module_begin = first.rfind('.', module_end == std::string::npos ? 0 : module_end - 1);
  if (module_end == std::string::npos || module_begin == std::string::npos) {
    std::string joined = first;
    for (size_t i = 1; i < parts.size(); ++i) joined += "+" + parts[i]->name;
    return joined;
  }
  const std::string prefix = first.substr(0, module_begin + 1), suffix = first.substr(module_end);
  std::string name = prefix;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& p = parts[i]->name;
    const bool same_frame = p.size() > prefix.size() + suffix.size() && p.starts_with(prefix) && p.ends_with(suffix);
    name += (i ? "+" : "") + (same_frame ? p.substr(prefix.size(), p.size() - prefix.size() - suffix.size()) : p);
  }
  return name + suffix;
}

// One constant stacking the members' constants along axis 0.
Value* stack(Graph& graph, const std::vector<const Value*>& members) {
  std::vector<std::shared_ptr<const ConstantData>> parts;
  for (const Value* m : members) parts.push_back(m->constant);
  auto data = ConstantData::stack(std::move(parts));
  Shape shape = members.front()->shape;
  shape[0] = Dim(data->src_shape[0]);
  Value* v = graph.new_value(members.front()->dtype, std::move(shape), packed_name(members));
  v->constant = std::move(data);
  return v;
}

// The packed Linear's name: the scope's first is <scope>/PackedLinear, any other (linears of one
// scope reading two inputs, such as DeBERTa's relative projections) gets a count after it.
std::string packed_node_name(const std::string& scope, std::map<std::string, int>& packed_in_scope) {
  const int earlier = packed_in_scope[scope]++;
  return scope + "/PackedLinear" + (earlier ? "_" + std::to_string(earlier) : "");
}

// Rewrites `group` (Linear nodes in graph order) into one packed Linear inserted before the first
// member, and turns each member into a Slice of the packed result, so its output keeps its identity.
Node* pack(Graph& graph, const std::vector<Node*>& group, std::map<std::string, int>& packed_in_scope) {
  std::vector<const Value*> weights, biases;
  for (const Node* n : group) {
    weights.push_back(n->inputs[1]);
    if (n->inputs.size() > 2 && n->inputs[2]) biases.push_back(n->inputs[2]);
  }
  Value* x = group.front()->inputs[0];
  std::vector<Value*> inputs{x, stack(graph, weights)};
  if (!biases.empty()) inputs.push_back(stack(graph, biases));
  const std::string scope = group.front()->name.substr(0, group.front()->name.rfind('/'));
  Node* packed = graph.new_node(OpKind::Linear, std::move(inputs), {}, packed_node_name(scope, packed_in_scope));
  Shape out_shape = x->shape;
  out_shape.back() = packed->inputs[1]->shape[0];
  Value* out = graph.new_value(x->dtype, std::move(out_shape), packed->name);
  out->producer = packed;
  packed->outputs.push_back(out);

  int64_t start = 0;
  const auto last_axis = static_cast<int64_t>(x->rank()) - 1;
  for (Node* n : group) {
    const int64_t width = n->inputs[1]->shape[0].value();
    n->op = OpKind::Slice;
    n->inputs = {out};
    n->attrs = SliceAttrs{last_axis, start, start + width};
    start += width;
  }
  return packed;
}

}  // namespace

void pack_linears(Graph& graph) {
  std::map<const Value*, int> uses;
  for (const Node* n : graph.order)
    for (const Value* in : n->inputs)
      if (in) ++uses[in];
  for (const Value* v : graph.outputs) ++uses[v];

  std::map<PackKey, std::vector<Node*>> groups;
  for (Node* n : graph.order)
    if (packable(*n, uses)) groups[pack_key(*n)].push_back(n);

  std::map<const Node*, Node*> insert_before;  // first member -> its packed Linear
  std::map<std::string, int> packed_in_scope;
  for (auto& [key, group] : groups)
    if (group.size() > 1) insert_before[group.front()] = pack(graph, group, packed_in_scope);
  if (insert_before.empty()) return;
  std::vector<Node*> order;
  for (Node* n : graph.order) {
    if (const auto it = insert_before.find(n); it != insert_before.end()) order.push_back(it->second);
    order.push_back(n);
  }
  graph.order = std::move(order);
}

}  // namespace hfx
