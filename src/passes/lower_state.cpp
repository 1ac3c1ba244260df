// Lowers graph state to graph inputs and outputs, the form every backend starts from (ONNX keeps
// it; OpenVINO's writer turns the pairs into ReadValue/Assign variables; the .pt2 and ExecuTorch
// lowerings make in-place pairs mutations of the caller's tensor or of a method buffer). By policy:
// - Append: StateRead -> input past_key_values.{i}.*, StateUpdate -> KVAppend, output present.{i}.*
//   (a call that starts the state outputs its fresh rows: prefill);
// - Slots: StateRead -> input input.<name>, StateUpdate -> ScatterElements at the positions,
//   output output.<name> of the same shape, so the caller can bind both to one buffer;
// - Ring: as Slots, at position mod window (a call writes at most `window` rows);
// - Replace: StateRead -> input <name>, the update's fresh value -> output present<...> (same shape);
// - WriteOnce: the component that computes it outputs present<...>; one that only reads it takes
//   input <name> and returns nothing for it.
#include <algorithm>
#include <map>

#include "core/error.h"
#include "ir/builder.h"
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace hfx {
namespace {

// The output name of a state the caller carries: "past_key_values.0.key" -> "present.0.key"
// (transformers' dynamic-cache names), "past_conv.0" -> "present_conv.0" (transformers.js's
// names for recurrent state), anything else -> "present.<name>".
std::string present_name(const std::string& state) {
  constexpr std::string_view kPastKeyValues = "past_key_values", kPast = "past_";
  if (state.starts_with(kPastKeyValues)) return "present" + state.substr(kPastKeyValues.size());
  if (state.starts_with(kPast)) return "present_" + state.substr(kPast.size());
  return "present." + state;
}

bool in_place(StateUpdatePolicy p) { return p == StateUpdatePolicy::Slots || p == StateUpdatePolicy::Ring; }

std::string input_name(const StateDecl& state) { return in_place(state.update) ? "input." + state.name : state.name; }
std::string output_name(const StateDecl& state) {
  return in_place(state.update) ? "output." + state.name : present_name(state.name);
}

struct Lowered {
  Value* input = nullptr;
  Value* output = nullptr;
};

// The rows' slots written at `positions` ([batch, query]), as ScatterElements indices over the
// state's length axis (2).
Value* slot_indices(Builder& b, const StateDecl& state, Value* positions, Value* fresh) {
  Value* slots = positions;
  if (state.update == StateUpdatePolicy::Ring) {
    HFX_CHECK(state.window > 0, "ring state '", state.name, "' has no window");
    slots = b.mod(positions, b.const_i64({state.window}, {}));
  }
  return b.expand(b.unsqueeze(slots, {1, 3}), b.shape_of(fresh), fresh->shape);
}

}  // namespace

void lower_state_as_io(Graph& graph) {
  if (graph.states.empty()) return;
  std::vector<Lowered> lowered(graph.states.size());
  rewrite_nodes(graph, [&](Node& n, Builder& b) {
    if (!op_is_state(n.op)) return Rewrite::keep();
    const StateAttrs& attrs = n.attrs_as<StateAttrs>();
    const auto index = static_cast<size_t>(attrs.state);
    const StateDecl& state = graph.states.at(index);
    Value* out = n.outputs[0];
    if (n.op == OpKind::StateRead) {  // the read becomes a graph input
      out->producer = nullptr;
      out->name = input_name(state);
      graph.inputs.push_back(out);
      lowered[index].input = out;
      return Rewrite::drop();
    }
    Value* current = n.input(0);
    Value* fresh = n.inputs[1];
    const StateUpdatePolicy policy = state.update;
    if (!current || policy == StateUpdatePolicy::Replace || policy == StateUpdatePolicy::WriteOnce) {
      // The fresh value is the state from here on (a call that starts it: prefill, an encoder).
      HFX_CHECK(!in_place(policy), "slot state '", state.name, "' updated without a buffer");
      HFX_CHECK(policy != StateUpdatePolicy::WriteOnce || !current, "write-once state '", state.name,
                "' updated by a component that reads it");
      HFX_CHECK(fresh->producer != nullptr, "state '", state.name, "' set from a graph input or constant");
      HFX_CHECK(policy == StateUpdatePolicy::Append || (fresh->dtype == attrs.dtype && fresh->shape == attrs.shape),
                "state '", state.name, "' set to a ", shape_string(fresh->shape), " value; it is ", shape_string(attrs.shape));
      lowered[index].output = fresh;
      return Rewrite::replace(fresh);
    }
    if (policy == StateUpdatePolicy::Append) {  // in place: the node becomes KVAppend, its result unchanged
      const Dim total = attrs.shape[2];
      n.op = OpKind::KVAppend;
      n.inputs = {current, fresh};
      n.attrs = KVAppendAttrs{total};
      lowered[index].output = out;
      return Rewrite::keep();
    }
    if (policy == StateUpdatePolicy::Ring) {  // two rows at one slot would leave the slot undefined
      const Dim rows = fresh->shape.at(2);
      HFX_CHECK((rows.is_static() ? rows.value() : rows.symbol()->max) <= state.window, "ring state '", state.name,
                "' takes up to ", state.window, " rows a call; this call writes up to ", rows.to_string());
    }
    Value* written = b.scatter_elements(current, slot_indices(b, state, n.inputs[2], fresh), fresh, 2);
    lowered[index].output = written;
    return Rewrite::replace(written);
  });
  Builder b(graph);
  for (size_t i = 0; i < lowered.size(); ++i) {
    const StateDecl& state = graph.states[i];
    const bool read_only = state.update == StateUpdatePolicy::WriteOnce && lowered[i].input;
    HFX_CHECK(lowered[i].output != nullptr || read_only, "state '", state.name, "' is never updated");
    if (Value* out = lowered[i].output) {
      // A value the model also returns keeps its own output: the state's is a copy under its name.
      if (std::find(graph.outputs.begin(), graph.outputs.end(), out) != graph.outputs.end())
        out = lowered[i].output = b.emit(OpKind::Cast, {out}, CastAttrs{out->dtype});
      b.output(out, output_name(state));
    }
    graph.state_pairs.push_back({state.name, lowered[i].input, lowered[i].output, state.update});
  }
}

}  // namespace hfx
