// The IR's ops as ATen calls, built once for the backends that run ATen (.pt2, ExecuTorch): each
// rule (ops.cpp, HFX_ATEN_OP) returns the functional overload a traced torch program would call
// and the arguments it passes, by their schema names; where the IR (ONNX semantics) and ATen
// differ, the rule says how once. .pt2 serialises the call as it is; ExecuTorch turns it into its
// out variant (executorch/out_variants.cpp) with every argument by position. A backend lowers a
// primitive by this table unless it has a rule of its own, and a high-level op only where it says
// so (its own rule, or a registration naming this one).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/aten/schema.h"
#include "ir/graph.h"

namespace hfx {

// One argument, in backend-neutral terms (each backend encodes it: a .pt2 argument, an EValue).
struct AtenArg {
  enum class Kind {
    Tensor,           // values[0]
    Tensors,          // values
    OptionalTensors,  // values, null for None
    Int,              // ints[0]
    Ints,             // ints
    SymInts,          // dims: each static or a symbolic dim of the graph
    ShapeInt,         // values[0]: int64 shape arithmetic of one element (a SymInt at run time)
    Float,
    Bool,
    String,
    None,
    ScalarType,
  };
  Kind kind = Kind::None;
  std::vector<const Value*> values;
  std::vector<int64_t> ints;
  Shape dims;
  double number = 0;
  bool flag = false;
  std::string text;
  DType dtype = DType::F32;
};

AtenArg aten_tensor(const Value* v);
AtenArg aten_tensors(std::vector<const Value*> vs);
AtenArg aten_optional_tensors(std::vector<const Value*> vs);  // null entries: None
AtenArg aten_int(int64_t v);
AtenArg aten_ints(std::vector<int64_t> v);
AtenArg aten_sym_ints(Shape dims);
AtenArg aten_shape_int(const Value* v);
AtenArg aten_float(double v);
AtenArg aten_bool(bool v);
AtenArg aten_string(std::string v);
AtenArg aten_none();
AtenArg aten_scalar_type(DType t);

// `schema(args)`: the args given, by the schema's argument names (others take their defaults).
struct AtenCall {
  const AtenSchema* schema = nullptr;
  std::vector<std::pair<std::string, AtenArg>> args;
  std::vector<DType> results;  // a schema's several results (topk: values, indices); empty: one, the node's
  size_t result = 0;           // which of them is the node's
  const AtenArg* arg(std::string_view name) const;
};
// A call of `qualified` ("add.Tensor"); checks each arg name against the schema, in its order.
AtenCall aten_call(std::string_view qualified, std::vector<std::pair<std::string, AtenArg>> args);

using AtenRule = AtenCall (*)(const Node& n);
// The op's ATen call rule, or null where the table has none.
AtenRule aten_rule(OpKind op);
bool register_aten_rule(OpKind op, AtenRule rule);

#define HFX_ATEN_OP(Op)                                                                                 \
  static AtenCall aten_lower_##Op(const Node& n);                                                       \
  [[maybe_unused]] static const bool aten_registered_##Op = register_aten_rule(OpKind::Op, aten_lower_##Op); \
  static AtenCall aten_lower_##Op([[maybe_unused]] const Node& n)

}  // namespace hfx
