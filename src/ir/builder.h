// Appends ops to a Graph, inferring each result's dtype and symbolic shape. Shape errors here
// are bugs in a frontend or pass, so they report as internal errors with the node's scope.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hfx {

class Builder {
 public:
  explicit Builder(Graph& graph) : g_(graph), sink_(&graph.order) {}

  Graph& graph() { return g_; }
  // Nodes are appended to `sink` (a pass rebuilding the order points it at its new list).
  void set_sink(std::vector<Node*>* sink) { sink_ = sink; }
  void set_scope(std::string scope) { scope_ = std::move(scope); }
  const std::string& scope() const { return scope_; }

  Value* input(const std::string& name, DType dtype, Shape shape);
  void output(Value* v, const std::string& name);
  // A source tensor as a constant; `owner` keeps it alive when the checkpoint does not.
  Value* weight(const TensorView& tensor, DType dtype, std::shared_ptr<const void> owner = nullptr);
  // A constant Value over a weight expression (ConstantData), stored as `dtype`.
  Value* weight_expr(std::shared_ptr<const ConstantData> expr, DType dtype, const std::string& name);
  // A declared weight the checkpoint lacks (or holds mis-shaped): shape only, no bytes. The
  // frontend reports it before the graph reaches a backend.
  Value* missing_weight(const std::string& name, const std::vector<int64_t>& shape, DType dtype);
  Value* constant(std::vector<std::byte> bytes, DType dtype, std::vector<int64_t> shape,
                  const std::string& hint);
  Value* const_i64(const std::vector<int64_t>& data, std::vector<int64_t> shape = {});
  Value* const_f32(const std::vector<float>& data, std::vector<int64_t> shape = {});
  Value* scalar(double v, DType dtype);
  Value* u8_scalar(uint8_t v);

  Value* binary(OpKind op, Value* a, Value* b);
  Value* add(Value* a, Value* b) { return binary(OpKind::Add, a, b); }
  Value* sub(Value* a, Value* b) { return binary(OpKind::Sub, a, b); }
  Value* mul(Value* a, Value* b) { return binary(OpKind::Mul, a, b); }
  Value* div(Value* a, Value* b) { return binary(OpKind::Div, a, b); }
  Value* pow(Value* a, Value* b) { return binary(OpKind::Pow, a, b); }
  Value* mod(Value* a, Value* b) { return binary(OpKind::Mod, a, b); }
  Value* max(Value* a, Value* b) { return binary(OpKind::Max, a, b); }
  Value* min(Value* a, Value* b) { return binary(OpKind::Min, a, b); }
  Value* top_k(Value* x, int64_t k, bool indices) { return emit(OpKind::TopK, {x}, TopKAttrs{k, indices}); }
  Value* compare(OpKind op, Value* a, Value* b);  // Equal, Less, LessOrEqual, Greater -> bool
  Value* logical_and(Value* a, Value* b);
  Value* logical_not(Value* x);
  // a or b, as not(not a and not b): the IR has no Or op, so no backend needs one.
  Value* logical_or(Value* a, Value* b);
  Value* unary(OpKind op, Value* x);
  Value* matmul(Value* a, Value* b);
  Value* softmax(Value* x, int64_t axis);
  Value* cumsum(Value* x, int64_t axis);
  // Constant padding of `begin` / `end` elements per axis.
  Value* pad(Value* x, std::vector<int64_t> begin, std::vector<int64_t> end, double value = 0);
  // Convolution over x's axes after [batch, channels]; per spatial axis: stride, padding at both
  // ends, dilation.
  Value* conv(Value* x, Value* weight, Value* bias, std::vector<int64_t> strides, std::vector<int64_t> pads,
              std::vector<int64_t> dilations, int64_t group = 1);
  Value* reduce(OpKind op, Value* x, std::vector<int64_t> axes, bool keepdims);
  Value* cast(Value* x, DType dtype);
  Value* reshape(Value* x, Shape shape);
  Value* transpose(Value* x, std::vector<int64_t> perm);
  Value* slice(Value* x, int64_t axis, int64_t start, int64_t end);
  // A symbolic concat axis needs the result's dim from the caller (e.g. past + new = total).
  Value* concat(const std::vector<Value*>& xs, int64_t axis, std::optional<Dim> axis_dim = std::nullopt);
  Value* gather(Value* data, Value* indices, int64_t axis);
  Value* unsqueeze(Value* x, std::vector<int64_t> axes);
  Value* where(Value* cond, Value* a, Value* b);
  Value* range(Value* start, Value* limit, Value* delta, Dim length);
  Value* shape_of(Value* x);
  Value* expand(Value* x, Value* shape_tensor, Shape shape);
  Value* scatter_elements(Value* data, Value* indices, Value* updates, int64_t axis);
  Value* gather_elements(Value* data, Value* indices, int64_t axis);

  Value* linear(Value* x, Value* weight, Value* bias = nullptr);
  Value* embedding(Value* weight, Value* ids);
  Value* rms_norm(Value* x, Value* weight, double epsilon);
  // `selection_bias` [E]: added to the routing scores for choosing the experts only (optional).
  Value* moe(Value* x, Value* logits, Value* gate_up, Value* down, Value* gate_up_bias, Value* down_bias,
             const MoEAttrs& attrs, Value* selection_bias = nullptr) {
    std::vector<Value*> in{x, logits, gate_up, down, gate_up_bias, down_bias};
    if (selection_bias) in.push_back(selection_bias);
    return emit(OpKind::MoE, std::move(in), attrs);
  }
  Value* layer_norm(Value* x, Value* weight, Value* bias, double epsilon);
  Value* rope(Value* x, Value* cos, Value* sin, bool interleaved);
  Value* rope_table(Value* positions, Value* inv_freq, double scaling, bool sine);
  Value* attention(Value* q, Value* k, Value* v, Value* mask, const AttentionAttrs& attrs, Value* sinks = nullptr,
                   Value* bias = nullptr);
  Value* kv_append(Value* past, Value* fresh, Dim total);
  // Declares state in the graph; returns its index for state_read / state_update.
  int64_t declare_state(StateDecl decl);
  // The state as this call finds it (its declared type).
  Value* state_read(int64_t state);
  // The state after this call writes `fresh` into `current` (null: the call starts the state) by the
  // state's update policy; `positions` for policies that write at positions. Typed `dtype shape`.
  Value* state_update(int64_t state, Value* current, Value* fresh, Value* positions, Shape shape);
  Value* silu(Value* x);
  Value* gelu(Value* x, GeluApproximation approximate);
  // out[h] = x[group of h] along `axis`: head h reads row h / (heads / groups), as repeat_interleave
  // does (Mamba2's B and C groups, a gated DeltaNet's q/k heads serving several value heads).
  Value* groups_to_heads(Value* x, int64_t groups, int64_t heads, int64_t axis);
  // CausalConv (ops.def): the call's outputs y and the state after it; `bias` may be null.
  std::pair<Value*, Value*> causal_conv(Value* x, Value* weight, Value* state, Value* bias);
  // StateSpaceScan (ops.def): the call's outputs y and the state after it.
  std::pair<Value*, Value*> state_space_scan(Value* x, Value* dt, Value* a, Value* b, Value* c, Value* state);
  // GatedDeltaRule (ops.def): the call's outputs o and the state after it.
  std::pair<Value*, Value*> gated_delta_rule(Value* q, Value* k, Value* v, Value* decay, Value* beta, Value* state,
                                             int64_t doublings);

  // Appends a node; its results' types come from the op's shape rule (ir/ops.cpp).
  Value* emit(OpKind op, std::vector<Value*> inputs, OpAttrs attrs = NoAttrs{});
  std::vector<Value*> emit_all(OpKind op, std::vector<Value*> inputs, OpAttrs attrs = NoAttrs{});

 private:
  Graph& g_;
  std::vector<Node*>* sink_;
  std::string scope_;
};

Shape broadcast_shapes(const Shape& a, const Shape& b);
// The target a runtime's Reshape takes (ONNX, OpenVINO special_zero): static dims as numbers, a
// symbolic dim equal to the input's at the same index as 0 (copy), one other symbolic dim as -1.
std::vector<int64_t> reshape_target(const Shape& in, const Shape& out);
int64_t normalize_axis(int64_t axis, size_t rank);

}  // namespace hfx
