// Lowers graph state to graph inputs and outputs, for runtimes whose caller carries the state
// between calls (ONNX; OpenVINO's writer then turns the pairs into ReadValue/Assign variables):
// - Append: StateRead -> input past_key_values.{i}.*, StateUpdate -> KVAppend, output present.{i}.*
//   (a call that starts the state outputs its fresh rows: prefill);
// - Slots: StateRead -> input input.<name>, StateUpdate -> ScatterElements at the positions,
//   output output.<name> of the same shape, so the caller can bind both to one buffer.
#include <map>

#include "core/error.h"
#include "ir/builder.h"
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace hfx {
namespace {

// "past_key_values.0.key" -> "present.0.key", the common dynamic-cache output name.
std::string present_name(const std::string& state) {
  const size_t dot = state.find('.');
  return dot == std::string::npos ? "present." + state : "present" + state.substr(dot);
}

struct Lowered {
  Value* input = nullptr;
  Value* output = nullptr;
};

}  // namespace

void lower_state_as_io(Graph& graph) {
  if (graph.states.empty()) return;
  std::vector<Lowered> lowered(graph.states.size());
  rewrite_nodes(graph, [&](Node& n, Builder& b) {
    if (!op_is_state(n.op)) return Rewrite::keep();
    const StateAttrs& attrs = n.attrs_as<StateAttrs>();
    const auto index = static_cast<size_t>(attrs.state);
    const StateDecl& state = graph.states.at(index);
    const bool slots = state.update == StateUpdatePolicy::Slots;
    if (state.update != StateUpdatePolicy::Append && !slots)
      fail("internal error: state '", state.name, "': this backend lowers only append and slot updates");
    Value* out = n.outputs[0];
    if (n.op == OpKind::StateRead) {  // the read becomes a graph input
      out->producer = nullptr;
      out->name = slots ? "input." + state.name : state.name;
      graph.inputs.push_back(out);
      lowered[index].input = out;
      return Rewrite::drop();
    }
    Value* current = n.input(0);
    Value* fresh = n.inputs[1];
    if (!current) {  // the call starts the state: its rows are the state (and get its output name)
      HFX_CHECK(!slots, "slot state '", state.name, "' updated without a buffer");
      HFX_CHECK(fresh->producer != nullptr, "state '", state.name, "' started from a graph input or constant");
      lowered[index].output = fresh;
      return Rewrite::replace(fresh);
    }
    if (!slots) {  // append in place: the node becomes KVAppend, its result unchanged
      const Dim total = attrs.shape[2];
      n.op = OpKind::KVAppend;
      n.inputs = {current, fresh};
      n.attrs = KVAppendAttrs{total};
      lowered[index].output = out;
      return Rewrite::keep();
    }
    Value* at = b.expand(b.unsqueeze(n.inputs[2], {1, 3}), b.shape_of(fresh), fresh->shape);
    Value* written = b.scatter_elements(current, at, fresh, 2);
    lowered[index].output = written;
    return Rewrite::replace(written);
  });
  Builder b(graph);
  for (size_t i = 0; i < lowered.size(); ++i) {
    const StateDecl& state = graph.states[i];
    HFX_CHECK(lowered[i].output != nullptr, "state '", state.name, "' is never updated");
    const bool slots = state.update == StateUpdatePolicy::Slots;
    b.output(lowered[i].output, slots ? "output." + state.name : present_name(state.name));
    graph.state_pairs.push_back({state.name, lowered[i].input, lowered[i].output});
  }
}

}  // namespace hfx
