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
#include "io/safetensors.h"

namespace hfx {

enum class OpKind : uint8_t {
#define X(name, high_level) name,
#include "ir/ops.def"
#undef X
};

std::string_view op_name(OpKind op);
bool op_is_high_level(OpKind op);

using Attr = std::variant<int64_t, double, std::vector<int64_t>, std::string>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, Attr>> init) : map_(init) {}
  void set(const std::string& key, Attr value) { map_[key] = std::move(value); }
  bool has(const std::string& key) const { return map_.count(key) != 0; }
  int64_t i(const std::string& key) const;
  double f(const std::string& key) const;
  const std::vector<int64_t>& ints(const std::string& key) const;
  const std::string& s(const std::string& key) const;
  int64_t i(const std::string& key, int64_t fallback) const { return has(key) ? i(key) : fallback; }
  double f(const std::string& key, double fallback) const { return has(key) ? f(key) : fallback; }
  const std::map<std::string, Attr>& all() const { return map_; }

 private:
  std::map<std::string, Attr> map_;
};

// Bytes behind a constant: lazy views into checkpoint tensors (one, or several of the same dtype
// stacked along axis 0, e.g. packed q/k/v projections), or a small owned buffer. Materialised
// (converted to the value's dtype, optionally transposed) only by a backend writer.
struct ConstantData {
  DType src_dtype = DType::F32;
  std::vector<int64_t> src_shape;
  std::vector<const TensorInfo*> parts;  // checkpoint views, empty when `owned` holds the bytes
  std::vector<std::byte> owned;
  // Set when the stored bytes are derived from the parts' [N, K] matrix at write time: the codes
  // ([N, K/group, group*bits/8] uint8) or the scales ([N, K/group]) of its blockwise quantization.
  struct Quantized {
    WeightQuantization scheme;
    bool scales = false;
  };
  std::optional<Quantized> quantized;

  bool from_checkpoint() const { return !parts.empty(); }
  size_t nbytes() const;
  // The bytes of an owned or single-part constant (a stacked one has no contiguous bytes).
  const std::byte* bytes() const;
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
  Attrs attrs;
  std::string name;  // scope of the HF module that produced it, e.g. model.layers.3.self_attn
};

// A cache tensor carried from one run to the next: read from `input`, written to `output`.
// Backends lower the pair (ONNX: past/present or in-place input/output pair, OpenVINO:
// ReadValue/Assign, ...).
struct StatePair {
  std::string name;  // e.g. past_key_values.0.key
  Value* input;
  Value* output;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const Symbol* symbol(const std::string& name, int64_t min, int64_t max);
  Value* new_value(DType dtype, Shape shape, std::string name = {});
  Node* new_node(OpKind op, std::vector<Value*> inputs, Attrs attrs, std::string name);

  std::vector<Value*> inputs;
  std::vector<Value*> outputs;
  std::vector<Node*> order;  // topological
  std::vector<StatePair> states;
  const std::deque<Symbol>& symbols() const { return symbols_; }
  std::vector<Value*> constants() const;  // every constant used by a node in `order`

 private:
  std::deque<Symbol> symbols_;
  std::deque<Value> values_;
  std::deque<Node> nodes_;
};

// Checks every invariant the backends rely on; throws Error naming the first broken one.
void verify(const Graph& graph);

}  // namespace hfx
