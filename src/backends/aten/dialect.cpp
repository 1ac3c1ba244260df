#include "backends/aten/dialect.h"

#include <algorithm>

#include "backends/rule_table.h"
#include "core/error.h"

namespace hfx {
namespace {

OpRuleTable<AtenRule>& aten_rules() {
  static OpRuleTable<AtenRule> rules("ATen");
  return rules;
}

AtenArg make(AtenArg::Kind kind) {
  AtenArg a;
  a.kind = kind;
  return a;
}

}  // namespace

AtenArg aten_tensor(const Value* v) {
  AtenArg a = make(AtenArg::Kind::Tensor);
  a.values = {v};
  return a;
}
AtenArg aten_tensors(std::vector<const Value*> vs) {
  AtenArg a = make(AtenArg::Kind::Tensors);
  a.values = std::move(vs);
  return a;
}
AtenArg aten_optional_tensors(std::vector<const Value*> vs) {
  AtenArg a = make(AtenArg::Kind::OptionalTensors);
  a.values = std::move(vs);
  return a;
}
AtenArg aten_int(int64_t v) {
  AtenArg a = make(AtenArg::Kind::Int);
  a.ints = {v};
  return a;
}
AtenArg aten_ints(std::vector<int64_t> v) {
  AtenArg a = make(AtenArg::Kind::Ints);
  a.ints = std::move(v);
  return a;
}
AtenArg aten_sym_ints(Shape dims) {
  AtenArg a = make(AtenArg::Kind::SymInts);
  a.dims = std::move(dims);
  return a;
}
AtenArg aten_shape_int(const Value* v) {
  AtenArg a = make(AtenArg::Kind::ShapeInt);
  a.values = {v};
  return a;
}
AtenArg aten_float(double v) {
  AtenArg a = make(AtenArg::Kind::Float);
  a.number = v;
  return a;
}
AtenArg aten_bool(bool v) {
  AtenArg a = make(AtenArg::Kind::Bool);
  a.flag = v;
  return a;
}
AtenArg aten_string(std::string v) {
  AtenArg a = make(AtenArg::Kind::String);
  a.text = std::move(v);
  return a;
}
AtenArg aten_none() { return make(AtenArg::Kind::None); }
AtenArg aten_scalar_type(DType t) {
  AtenArg a = make(AtenArg::Kind::ScalarType);
  a.dtype = t;
  return a;
}

const AtenArg* AtenCall::arg(std::string_view name) const {
  for (const auto& [n, a] : args)
    if (n == name) return &a;
  return nullptr;
}

AtenCall aten_call(std::string_view qualified, std::vector<std::pair<std::string, AtenArg>> args) {
  AtenCall call{&aten_schema(qualified), std::move(args), {}, 0};
  size_t next = 0;  // the given args follow the schema's order
  for (const auto& [name, arg] : call.args) {
    while (next < call.schema->args.size() && call.schema->args[next].name != name) ++next;
    HFX_CHECK(next < call.schema->args.size(), "internal error: ATen ", qualified, " has no argument '", name,
              "' (or it is out of order)");
    ++next;
  }
  // An argument without a default must be given (a rule that forgets one would serialise a call
  // the runtime refuses when it loads, or worse, reads garbage).
  for (const AtenSchemaArg& a : call.schema->args) {
    if (a.has_default() || a.out) continue;
    const bool given = std::any_of(call.args.begin(), call.args.end(), [&](const auto& g) { return g.first == a.name; });
    HFX_CHECK(given, "internal error: ATen ", qualified, " needs argument '", a.name, "'");
  }
  return call;
}

AtenRule aten_rule(OpKind op) { return aten_rules().get(op); }

bool register_aten_rule(OpKind op, AtenRule rule) { return aten_rules().add(op, rule); }

}  // namespace hfx
