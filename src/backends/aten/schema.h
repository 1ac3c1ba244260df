// ATen operator schemas, written as PyTorch's native_functions.yaml spells them and parsed once:
// the argument names, kinds, defaults and keyword-only marks that .pt2 nodes name and ExecuTorch
// kernels take by position. Only the schemas the backends call are listed (schema.cpp).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace hfx {

struct AtenSchemaArg {
  std::string type;     // as declared: "Tensor", "int[]", "Scalar", "ScalarType?", "Tensor(a!)"
  std::string name;
  std::string default_value;  // as declared ("1", "False", "None", "'none'"); empty: none
  bool keyword = false;  // after `*`: keyword-only
  bool out = false;      // an out argument (`Tensor(a!)`)
  bool has_default() const { return !default_value.empty(); }
  // dtype / layout / device / pin_memory: what an out variant takes from its out tensor instead.
  bool tensor_option() const;
};

struct AtenSchema {
  std::string op;        // "add"
  std::string overload;  // "Tensor"; "default" where the yaml names none
  std::vector<AtenSchemaArg> args;
  std::string qualified() const { return op + "." + overload; }
  const AtenSchemaArg* arg(std::string_view name) const;
  bool is_out_variant() const;  // it writes out arguments
};

// The schema of `op.overload` ("add.Tensor", "topk.values"); an internal error if unlisted.
const AtenSchema& aten_schema(std::string_view qualified);
// Every listed schema.
std::vector<const AtenSchema*> aten_schemas();
// Parses one schema line (exposed for the unit test).
AtenSchema parse_aten_schema(std::string_view text);

}  // namespace hfx
