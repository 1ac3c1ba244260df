// Lowering of IR graphs to torch.export programs (the models/<name>.json of a .pt2): ATen
// overloads with the argument names and kinds their schemas declare, symbolic dims as SymInts.
// Each op's lowering is a small function registered in ops.cpp (HFX_PT2_OP); Pt2Lowering holds
// what they share: names, placeholders, SymInts, and the int64 shape arithmetic (ShapeOf,
// Gather, Sub, ... on shapes), which becomes SymInt arithmetic instead of tensors.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "backends/aten/dialect.h"
#include "ir/graph.h"
#include "io/json_config.h"

namespace hfx {

// A symbolic integer as torch's ShapeEnv reads it: a constant, or a sympy expression (srepr)
// over the program's symbols with a hint (a value it may take).
struct SymExpr {
  std::optional<int64_t> value;
  std::string srepr;
  int64_t hint = 0;

  static SymExpr constant(int64_t v) { return {v, "Integer(" + std::to_string(v) + ")", v}; }
  bool is_static() const { return value.has_value(); }
  nlohmann::json to_json() const;  // a SymInt: {"as_int": n} or {"as_expr": {...}}
};
SymExpr operator+(const SymExpr& a, const SymExpr& b);
SymExpr operator*(const SymExpr& a, const SymExpr& b);
SymExpr operator-(const SymExpr& a);
SymExpr floordiv(const SymExpr& a, const SymExpr& b);

// A SymInt argument: a constant, or a SymInt value the program computes (named).
struct SymInt {
  SymExpr expr;
  std::string name;  // empty for a constant
  nlohmann::json arg() const;  // {"as_int": n} or {"as_name": name} (inside as_sym_int(s))
};

struct Pt2Arg {
  std::string name;  // the schema's argument name
  nlohmann::json arg;
  bool keyword = false;  // a keyword-only argument (after `*` in the schema)
};

nlohmann::json tensor_arg(const std::string& name);
nlohmann::json int_arg(int64_t v);
nlohmann::json ints_arg(const std::vector<int64_t>& v);
nlohmann::json float_arg(double v);
nlohmann::json bool_arg(bool v);
nlohmann::json string_arg(const std::string& v);
nlohmann::json none_arg();
nlohmann::json scalar_type_arg(DType t);
nlohmann::json sym_int_arg(const SymInt& s);
nlohmann::json sym_ints_arg(const std::vector<SymInt>& s);
int scalar_type_code(DType t);
// `s` as a Python identifier (FX names, keyword arguments): other characters become '_'; dots
// are kept where asked (state-dict paths).
std::string python_identifier(std::string_view s, bool keep_dots = false);

class Pt2Lowering;
using Pt2Rule = void (*)(Pt2Lowering& l, const Node& n);
using Pt2Native = bool (*)(const Node& n);
struct Pt2OpRule {
  Pt2Rule lower = nullptr;
  Pt2Native native = nullptr;
};
// The op's rule: its own, else the ATen table's (backends/aten) for a primitive.
const Pt2OpRule& pt2_rule(OpKind op);
bool register_pt2_rule(OpKind op, Pt2Rule lower, Pt2Native native = nullptr);
// Lowers n as the ATen table's call (what a high-level op registers to keep it).
void pt2_lower_aten(Pt2Lowering& l, const Node& n);
// Whether the pt2 backend lowers this high-level node itself (else it is decomposed first).
bool pt2_maps_natively(const Node& n);

#define HFX_PT2_OP_NATIVE(Op, native)                                                                 \
  static void pt2_lower_##Op(Pt2Lowering& l, const Node& n);                                          \
  [[maybe_unused]] static const bool pt2_registered_##Op = register_pt2_rule(OpKind::Op, pt2_lower_##Op, native); \
  static void pt2_lower_##Op([[maybe_unused]] Pt2Lowering& l, [[maybe_unused]] const Node& n)
#define HFX_PT2_OP(Op) HFX_PT2_OP_NATIVE(Op, nullptr)
// A high-level op this backend keeps, lowered by the ATen table.
#define HFX_PT2_ATEN_OP(Op) \
  [[maybe_unused]] static const bool pt2_registered_##Op = register_pt2_rule(OpKind::Op, pt2_lower_aten)

// A placeholder for a constant: a parameter (checkpoint weight) or a lifted tensor constant.
struct Pt2Constant {
  std::string placeholder;  // p_<fqn> or c_lifted_tensor_<i>
  std::string fqn;          // the state-dict name (HF's, for weights)
  const Value* value;
  bool parameter;
};

// How a program is called, when the caller's pytree is not the flat keyword arguments of the
// graph inputs (transformers' StaticCache: its leaves are every layer's keys, values and
// cumulative_length, in that order).
struct Pt2Interface {
  std::string in_spec;                     // torch pytree spec of (args, kwargs); empty: flat kwargs
  std::vector<std::string> forward_arg_names;
  bool cache_lengths = false;  // an int64 cumulative_length input after each layer's value cache, advanced in place
};

// A user input of the program, in call order.
struct Pt2Input {
  std::string placeholder, keyword;
  DType dtype;
  Shape shape;
};

class Pt2Lowering {
 public:
  explicit Pt2Lowering(const Graph& graph, Pt2Interface interface = {});

  // Lowers every node; then program() is the ExportedProgram's JSON (without the weights).
  void lower_graph();
  nlohmann::json program() const;
  const std::vector<Pt2Constant>& constants() const { return constants_; }
  const std::vector<Pt2Input>& user_inputs() const { return user_inputs_; }
  // The tensor meta of a value as stored (weights config entries).
  nlohmann::json tensor_meta(DType dtype, const Shape& shape) const;

  // What the op rules build with.
  // The tensor name of node input i (a placeholder for constants, a tensor for shape values).
  std::string in(const Node& n, size_t i) { return tensor(n.inputs.at(i)); }
  std::string tensor(const Value* v);
  // Emits `target(args)`; its result is a new tensor of `dtype` and `shape`, named after `base`.
  std::string call(std::string_view target, std::vector<Pt2Arg> args, DType dtype, const std::vector<SymExpr>& shape,
                   std::string_view base);
  std::string call(std::string_view target, std::vector<Pt2Arg> args, const Value* like, std::string_view base) {
    return call(target, std::move(args), like->dtype, sizes(like->shape), base);
  }
  // Emits `target(args)` as n's result.
  void result(const Node& n, std::string_view target, std::vector<Pt2Arg> args);
  // Emits the ATen table's call for n (backends/aten) as n's result.
  void aten(const Node& n) { aten(n, aten_rule(n.op)(n)); }
  void aten(const Node& n, const AtenCall& call);
  void define(const Value* v, const std::string& name) { names_[v] = name; }
  // Several results (e.g. topk's values and indices), each typed; returns their names.
  std::vector<std::string> call_multi(std::string_view target, std::vector<Pt2Arg> args,
                                      const std::vector<std::pair<DType, std::vector<SymExpr>>>& results,
                                      std::string_view base);
  std::vector<SymExpr> sizes(const Shape& shape) const;
  SymInt sym_int(const Dim& d);
  std::vector<SymInt> sym_ints(const Shape& shape);
  // Shape arithmetic: the SymInts of an int64 value computed from shapes (null if it is a tensor).
  const std::vector<SymInt>* shape_value(const Value* v);
  // A SymInt `a op b` (op: add, sub, mul), folded when both are constants.
  SymInt sym_arith(std::string_view op, const SymInt& a, const SymInt& b);
  // A static cache's update: written in place into the caller's tensor (no program output).
  bool updates_in_place(const Node& n) const { return in_place_.count(&n) != 0; }
  // Graph outputs the program returns (a state updated in place is not one of them).
  bool returned(const Value* output) const { return !in_place_outputs_.count(output); }

 private:
  void plan_derived_dims();
  void plan_in_place_updates();
  SymExpr derived_expr(const Symbol& s) const;
  bool lower_shape_arithmetic(const Node& n);
  std::string unique_name(std::string_view base);
  std::string torch_symbol(const Symbol& s) const;
  std::string materialize(const Value* v, const std::vector<SymInt>& ints);
  nlohmann::json aten_arg(const AtenArg& a, const Node& n);
  std::string placeholder_of(const Value* constant);
  nlohmann::json node_json(std::string_view target, std::vector<Pt2Arg> args, nlohmann::json outputs,
                           const std::string& name) const;

  void add_cache_length(size_t layer);
  // The StaticCache subtree of the interface's in_spec and the tensors a call returns for it.
  std::optional<std::pair<nlohmann::json, std::vector<std::string>>> returned_cache() const;

  const Graph& graph_;
  Pt2Interface interface_;
  std::vector<Pt2Input> user_inputs_;
  std::vector<std::string> pending_cache_lengths_;
  std::map<std::string, std::string> advanced_lengths_;  // a cumulative_length input -> its add_ result
  std::map<const Symbol*, SymExpr> symbols_;
  std::map<const Symbol*, SymInt> symbol_ints_;
  std::map<const Value*, std::string> names_;
  std::map<const Value*, std::vector<SymInt>> shape_values_;
  std::set<std::string> used_names_;
  std::vector<Pt2Constant> constants_;
  std::map<const Value*, size_t> constant_index_;
  std::set<const Node*> in_place_;
  std::set<const Value*> in_place_outputs_;
  std::vector<const StatePair*> replaced_;  // Replace state: copied into the caller's tensor at the end
  std::set<const Symbol*> derived_;  // dims the program computes from others (past + query = total)
  std::string scope_;  // the HF module of the node being lowered (node metadata)
  nlohmann::json nodes_ = nlohmann::json::array();
  nlohmann::json tensor_values_ = nlohmann::json::object();
  nlohmann::json sym_int_values_ = nlohmann::json::object();
  int lifted_ = 0;
};

}  // namespace hfx
