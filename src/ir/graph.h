// The IR: a graph of values (typed, with symbolic shapes) and ops from ops.def.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/quantize.h"
#include "core/shape.h"
#include "ir/attrs.h"
#include "core/tensor_view.h"

namespace hfx {

enum class OpKind : uint8_t {
#define X(name, cls, inputs, attrs) name,
#include "ir/ops.def"
#undef X
};

struct Value;
struct ValueType {
  DType dtype;
  Shape shape;
};

// One input slot of an op, as ops.def spells it.
struct InputSpec {
  std::string name;
  bool optional = false;  // may be null
  bool variadic = false;  // takes one or more values (the last slot)
};

enum class OpClass { Primitive, HighLevel, State };

// Everything the op table says about an op.
struct OpInfo {
  std::string_view name;
  OpClass cls;
  std::vector<InputSpec> inputs;
  size_t attrs_index;  // the OpAttrs alternative the op carries
  // The results' types (shape rule); throws Error("internal error: ...") for inputs or
  // attributes the op does not accept.
  std::vector<ValueType> (*infer)(const std::vector<Value*>& inputs, const OpAttrs& attrs);
};

const OpInfo& op_info(OpKind op);
std::string_view op_name(OpKind op);
bool op_is_high_level(OpKind op);
bool op_is_state(OpKind op);
inline constexpr size_t kOpCount = 0
#define X(name, cls, inputs, attrs) +1
#include "ir/ops.def"
#undef X
    ;
// Checks arity and the attribute struct against the table, then applies the shape rule.
std::vector<ValueType> infer_types(OpKind op, const std::vector<Value*>& inputs, const OpAttrs& attrs);

// A constant's bytes as a lazy expression over source tensors (checkpoint files or a caller's
// buffers): evaluated band by band only when a backend writes it, so no transform — stacking
// packed projections, slicing a fused qkv, transposing a Conv1D weight, Gemma's 1 + w,
// quantization — materialises a whole weight. src_dtype / src_shape describe what it yields; the
// Value's dtype is what the backend stores (a cast on write).
struct ConstantData {
  enum class Op {
    Tensor,     // a source tensor
    Owned,      // small bytes the graph owns (tables, shapes)
    Stack,      // args stacked along axis 0 (packed projections)
    SliceRows,  // rows [begin, end) of args[0] (one projection of a fused weight)
    Transpose,  // args[0] ([R, C]) as [C, R] (GPT-2's Conv1D weights are stored [in, out])
    AddScalar,  // args[0] + scalar, in float32 (Gemma's RMSNorm scales 1 + w)
    View,       // args[0]'s bytes under another shape (regrouped rows: [E * R, C] as [E, R, C])
    InterleaveRows,  // rows args[0][0], args[1][0], args[0][1], ... (MoE gate / up rows interleaved)
    StridedRows,     // rows begin, begin + end, begin + 2 end, ... of args[0] (`end` is the stride: de-interleaving)
    Mxfp4,      // MXFP4 blocks args[0] ([R, G * 16] u8) with E8M0 scales args[1] ([R, G] u8) as float32 [R, G * 32]
    Quantize,   // the codes ([N, K/g, g*bits/8] uint8) or scales ([N, K/g]) of args[0]'s [N, K]
                // blockwise quantization (core/quantize.h)
  };
  struct Quantized {
    WeightQuantization scheme;
    bool scales = false;
  };

  Op op = Op::Owned;
  DType src_dtype = DType::F32;
  std::vector<int64_t> src_shape;
  const TensorView* tensor = nullptr;  // Tensor
  std::vector<std::byte> owned;        // Owned
  std::vector<std::shared_ptr<const ConstantData>> args;
  int64_t begin = 0, end = 0;          // SliceRows
  double scalar = 0;                   // AddScalar
  std::optional<Quantized> quantized;  // Quantize
  // What keeps `tensor` alive when the checkpoint does not own it (a sentence-transformers
  // module's own weights file): held for as long as the graph's constants read it.
  std::shared_ptr<const void> owner;

  static std::shared_ptr<ConstantData> of_tensor(const TensorView& t, std::shared_ptr<const void> owner = nullptr);
  static std::shared_ptr<ConstantData> of_bytes(std::vector<std::byte> bytes, DType dtype, std::vector<int64_t> shape);
  // Expression nodes; each checks its operands (an error here is a frontend or pass bug).
  static std::shared_ptr<ConstantData> stack(std::vector<std::shared_ptr<const ConstantData>> parts);
  static std::shared_ptr<ConstantData> slice_rows(std::shared_ptr<const ConstantData> x, int64_t begin, int64_t end);
  static std::shared_ptr<ConstantData> transpose(std::shared_ptr<const ConstantData> x);
  static std::shared_ptr<ConstantData> add_scalar(std::shared_ptr<const ConstantData> x, double scalar);
  static std::shared_ptr<ConstantData> view(std::shared_ptr<const ConstantData> x, std::vector<int64_t> shape);
  static std::shared_ptr<ConstantData> interleave_rows(std::shared_ptr<const ConstantData> a,
                                                       std::shared_ptr<const ConstantData> b);
  static std::shared_ptr<ConstantData> strided_rows(std::shared_ptr<const ConstantData> x, int64_t offset,
                                                    int64_t stride);
  static std::shared_ptr<ConstantData> mxfp4(std::shared_ptr<const ConstantData> blocks,
                                             std::shared_ptr<const ConstantData> scales);
  static std::shared_ptr<ConstantData> quantize(std::shared_ptr<const ConstantData> x, const WeightQuantization& q,
                                                bool scales);

  // Whether it reads a source tensor (else it is the graph's own small bytes).
  bool from_checkpoint() const;
  size_t nbytes() const;  // of what it yields
  // Whether a leaf's bytes match its dtype and shape (verify() checks every constant).
  bool consistent() const;
  // The contiguous bytes of an Owned or Tensor constant (an expression has none).
  const std::byte* bytes() const;
  // Rows (the product of the dims after the first) and row length of what it yields.
  size_t rows() const { return src_shape.empty() ? 1 : static_cast<size_t>(src_shape[0]); }
  size_t row_elems() const;
  // Structural identity: equal for two expressions of the same transforms over the same source
  // tensors (so components reading one weight share its stored bytes).
  std::string key() const;
};

struct Node;

struct Value {
  int id = 0;
  std::string name;  // graph inputs/outputs/constants carry names; others get one from the node
  DType dtype = DType::F32;
  Shape shape;
  Node* producer = nullptr;
  std::shared_ptr<const ConstantData> constant;  // set for constants (weights and small tables)

  bool is_constant() const { return constant != nullptr; }
  size_t rank() const { return shape.size(); }
};

struct Node {
  OpKind op;
  std::vector<Value*> inputs;  // null entries are absent optional inputs
  std::vector<Value*> outputs;
  OpAttrs attrs;
  std::string name;  // scope of the HF module that produced it, e.g. model.layers.3.self_attn

  // The op's typed attributes; asking for another struct than ops.def gives the op is a bug.
  template <class A>
  const A& attrs_as() const {
    const A* a = std::get_if<A>(&attrs);
    if (!a) fail_attrs();
    return *a;
  }
  // Input i, or null when the node has fewer inputs (absent optional ones).
  Value* input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }

 private:
  [[noreturn]] void fail_attrs() const;
};

// State a graph carries from one call to the next, declared by the frontend and read / updated by
// StateRead / StateUpdate ops. How it reaches the runtime is each backend's state pass: graph
// inputs and outputs (ONNX past/present, or in-place input./output. pairs), ReadValue/Assign
// variables (OpenVINO), mutable buffers (ExecuTorch, .pt2).
enum class StateKind {
  KeyValue,       // self-attention keys or values, [batch, kv_heads, length, head_dim]
  CrossKeyValue,  // cross-attention keys or values, computed once from the encoder
  Recurrent,      // a recurrent / linear-attention state (SSMs, hybrid models)
  Convolution,    // the last inputs of a causal convolution
};
enum class StateUpdatePolicy {
  Append,     // the fresh rows are appended: the length grows by the query length
  Slots,      // fixed length; rows are written at the slots their positions name
  Ring,       // fixed `window` slots; rows are written at position mod window (sliding windows)
  WriteOnce,  // written by the first call, read unchanged by later ones (cross-attention)
  Replace,    // each call's result replaces the state (recurrent, convolution)
};
// export.json's names: "key_value", "cross_key_value", "recurrent", "convolution"; "append",
// "slots", "ring", "write_once", "replace".
std::string_view state_kind_name(StateKind kind);
std::string_view state_policy_name(StateUpdatePolicy policy);

struct StateDecl {
  std::string name;  // e.g. past_key_values.0.key
  StateKind kind = StateKind::KeyValue;
  StateUpdatePolicy update = StateUpdatePolicy::Append;
  DType dtype = DType::F32;
  Shape shape;         // as a call reads it (e.g. [batch, kv_heads, past_sequence, head_dim])
  int64_t window = 0;  // Ring: the number of slots
};

// Where a lowered state enters and leaves the graph (after a backend's state pass).
struct StatePair {
  std::string name;  // the state's name
  Value* input;      // null when the graph starts the state (prefill, an encoder writing it once)
  Value* output;     // null when the graph only reads it (write-once state another component wrote)
  StateUpdatePolicy update = StateUpdatePolicy::Append;
  // The runtime can keep it between calls (a variable, a method buffer, the caller's tensor
  // updated in place): the graph both reads and writes it, and it is not computed once elsewhere.
  bool carried() const { return input && output && update != StateUpdatePolicy::WriteOnce; }
  // Written once by the graph that reads it: the runtime keeps what the first call wrote (a
  // stateful decoder's cross-attention state, projected from the encoder's output on its first call).
  bool self_initialised() const { return input && output && update == StateUpdatePolicy::WriteOnce; }
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const Symbol* symbol(const std::string& name, int64_t min, int64_t max);
  // The dim of an expression (core/shape.h: dim_plus, dim_times, dim_floordiv): a derived symbol,
  // made once per expression, with the bounds its operands give.
  Dim dim(const DimExpr& e);
  Value* new_value(DType dtype, Shape shape, std::string name = {});
  Node* new_node(OpKind op, std::vector<Value*> inputs, OpAttrs attrs, std::string name);

  std::vector<Value*> inputs;
  std::vector<Value*> outputs;
  std::vector<Node*> order;  // topological
  std::vector<StateDecl> states;       // declared by the frontend
  std::vector<StatePair> state_pairs;  // filled by a backend's state pass
  // The Python class the model's forward returns its outputs in (a transformers ModelOutput, by
  // module path), for formats whose programs return that structure (.pt2); empty: a plain tuple.
  std::string output_type;
  // The model's layer count (config.json's num_hidden_layers), for runtimes that ask the program
  // (ExecuTorch's get_n_layers); 0 when the frontend has none to give.
  int64_t num_layers = 0;
  const std::deque<Symbol>& symbols() const { return symbols_; }
  std::vector<Value*> constants() const;  // every constant used by a node in `order`

 private:
  std::deque<Symbol> symbols_;
  std::deque<Value> values_;
  std::deque<Node> nodes_;
};

// Checks every invariant the backends rely on (definitions before use, unique names, each node's
// arity, attributes and result types against the op table); throws Error naming the first broken one.
void verify(const Graph& graph);

}  // namespace hfx
