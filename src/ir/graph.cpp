#include "ir/graph.h"

#include <set>

#include "core/error.h"

namespace hfx {

void Node::fail_attrs() const { fail("internal error: ", op_name(op), " node '", name, "' read with another op's attributes"); }

size_t ConstantData::nbytes() const {
  if (parts.empty()) return owned.size();
  size_t n = 0;
  for (const TensorInfo* t : parts) n += t->nbytes;
  return n;
}

const std::byte* ConstantData::bytes() const {
  if (parts.empty()) return owned.data();
  HFX_CHECK(parts.size() == 1, "contiguous bytes of a constant stacked from ", parts.size(), " tensors");
  return parts.front()->data;
}

const Symbol* Graph::symbol(const std::string& name, int64_t min, int64_t max) {
  for (const auto& s : symbols_)
    if (s.name == name) return &s;
  symbols_.push_back(Symbol{name, min, max});
  return &symbols_.back();
}

Value* Graph::new_value(DType dtype, Shape shape, std::string name) {
  values_.emplace_back();
  Value* v = &values_.back();
  v->id = static_cast<int>(values_.size());
  v->dtype = dtype;
  v->shape = std::move(shape);
  v->name = name.empty() ? "v" + std::to_string(v->id) : std::move(name);
  return v;
}

Node* Graph::new_node(OpKind op, std::vector<Value*> inputs, OpAttrs attrs, std::string name) {
  nodes_.push_back(Node{op, std::move(inputs), {}, std::move(attrs), std::move(name)});
  return &nodes_.back();
}

std::vector<Value*> Graph::constants() const {
  std::vector<Value*> out;
  std::set<const Value*> seen;
  for (const Node* n : order)
    for (Value* v : n->inputs)
      if (v && v->is_constant() && seen.insert(v).second) out.push_back(v);
  return out;
}

void verify(const Graph& graph) {
  std::set<const Value*> defined;
  std::set<std::string> names;  // graph inputs and node outputs share one namespace
  for (const Value* v : graph.inputs) {
    if (!defined.insert(v).second) fail("IR verifier: input '", v->name, "' listed twice");
    if (v->producer) fail("IR verifier: input '", v->name, "' has a producer");
    if (!names.insert(v->name).second) fail("IR verifier: duplicate input name '", v->name, "'");
  }
  for (const Node* n : graph.order) {
    const std::string at = str("IR verifier: ", op_name(n->op), " node '", n->name, "'");
    for (const Value* in : n->inputs) {
      if (!in) continue;
      if (in->is_constant()) {
        const auto& c = *in->constant;
        int64_t numel = 1;
        for (int64_t d : c.src_shape) numel *= d;
        if (c.nbytes() != static_cast<size_t>(numel) * dtype_size(c.src_dtype))
          fail(at, ": constant '", in->name, "' holds ", c.nbytes(), " bytes for shape ",
               shape_string(c.src_shape));
        continue;
      }
      if (!defined.count(in)) fail(at, ": uses '", in->name, "' before it is defined");
    }
    if (n->outputs.empty()) fail(at, ": has no outputs");
    std::vector<ValueType> types;
    try {
      types = infer_types(n->op, n->inputs, n->attrs);
    } catch (const Error& e) {
      fail(at, ": ", e.what());
    }
    if (types.size() != n->outputs.size())
      fail(at, ": has ", n->outputs.size(), " outputs, the op ", types.size());
    for (size_t i = 0; i < types.size(); ++i) {
      const Value* out = n->outputs[i];
      if (out->dtype != types[i].dtype || !(out->shape == types[i].shape))
        fail(at, ": output '", out->name, "' is ", dtype_name(out->dtype), " ", shape_string(out->shape), ", the op gives ",
             dtype_name(types[i].dtype), " ", shape_string(types[i].shape));
    }
    for (const Value* out : n->outputs) {
      if (out->producer != n) fail(at, ": output '", out->name, "' names another producer");
      if (!defined.insert(out).second) fail(at, ": redefines '", out->name, "'");
      if (!names.insert(out->name).second) fail(at, ": duplicate value name '", out->name, "'");
      for (const Dim& d : out->shape)
        if (d.is_static() && d.value() < 0) fail(at, ": output '", out->name, "' has a negative dim");
    }
  }
  for (const Value* v : graph.outputs)
    if (!defined.count(v) && !v->is_constant())
      fail("IR verifier: output '", v->name, "' is never produced");
}

}  // namespace hfx
