#include "backends/pt2/lowering.h"
#include "backends/rule_table.h"

#include <algorithm>
#include <cstring>

#include "backends/shape_arithmetic.h"
#include "core/error.h"

namespace hfx {

using nlohmann::json;

namespace {

OpRuleTable<Pt2OpRule>& pt2_rules() {
  static OpRuleTable<Pt2OpRule> rules(".pt2");
  return rules;
}

// pytree treespecs as torch.utils._pytree.treespec_dumps writes them (protocol 1).
json leaf_spec() { return {{"type", nullptr}, {"context", nullptr}, {"children_spec", json::array()}}; }
json tuple_spec(json children) {
  return {{"type", "builtins.tuple"}, {"context", "null"}, {"children_spec", std::move(children)}};
}
json dict_spec(const std::vector<std::string>& keys) {
  json children = json::array();
  for (size_t i = 0; i < keys.size(); ++i) children.push_back(leaf_spec());
  return {{"type", "builtins.dict"}, {"context", json(keys).dump()}, {"children_spec", std::move(children)}};
}
std::string dump_spec(const json& spec) { return json::array({1, spec}).dump(); }

// transformers' DynamicCache as transformers.exporters registers it with pytree: its context
// numbers each layer's keys and values among the leaves. Key order matters (the context is
// compared as written when a returned cache is flattened again), hence ordered_json.
json dynamic_cache_spec(size_t layers) {
  using ordered = nlohmann::ordered_json;
  ordered entries = ordered::array();
  json children = json::array();
  for (size_t l = 0; l < layers; ++l) {
    ordered layer = {{"keys", {{"_t", "tensor"}, {"i", 2 * l}}},
                     {"values", {{"_t", "tensor"}, {"i", 2 * l + 1}}},
                     {"is_initialized", true},
                     {"device", {{"_t", "device"}, {"s", "cpu"}}}};
    entries.push_back({{"_t", "obj"}, {"p", "transformers.cache_utils:DynamicLayer"}, {"s", layer}});
    children.push_back(leaf_spec());
    children.push_back(leaf_spec());
  }
  ordered cache = {{"layers", entries}, {"layer_class_to_replicate", nullptr}, {"offloading", false}};
  ordered context = {{"_t", "obj"}, {"p", "transformers.cache_utils:DynamicCache"}, {"s", cache}};
  return {{"type", "transformers.cache_utils:DynamicCache"}, {"context", context.dump()}, {"children_spec", children}};
}

// What transformers' own program returns for the same export: the model's ModelOutput (a pytree
// node whose context is its non-None field names): `logits`, and for a dynamic cache the presents
// as a DynamicCache under `cache` (transformers 5.24's field name). Null when `outputs` (returned
// names, in order) are not logits then each layer's key and value in layer order.
json model_output_spec(const std::string& type, const std::vector<std::string>& outputs) {
  if (type.empty() || outputs.empty() || outputs[0] != "logits" || outputs.size() % 2 != 1) return nullptr;
  const size_t layers = outputs.size() / 2;
  for (size_t l = 0; l < layers; ++l)
    for (const char* kind : {"key", "value"})
      if (const std::string want = "present." + std::to_string(l) + "." + kind, &got = outputs[1 + 2 * l + (kind[0] == 'v')];
          got != want && got != python_identifier(want, false))
        return nullptr;
  std::vector<std::string> fields{"logits"};
  json children = json::array({leaf_spec()});
  if (layers > 0) {
    fields.push_back("cache");
    children.push_back(dynamic_cache_spec(layers));
  }
  return {{"type", type}, {"context", json(fields).dump()}, {"children_spec", children}};
}

// A contiguous tensor's TensorMeta.
json meta_json(DType dtype, const std::vector<SymExpr>& dims) {
  std::vector<SymExpr> strides(dims.size(), SymExpr::constant(1));
  SymExpr stride = SymExpr::constant(1);
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = stride;
    stride = stride * dims[i];
  }
  json sz = json::array(), st = json::array();
  for (const SymExpr& d : dims) sz.push_back(d.to_json());
  for (const SymExpr& s : strides) st.push_back(s.to_json());
  return {{"dtype", scalar_type_code(dtype)}, {"sizes", sz}, {"requires_grad", false},
          {"device", {{"type", "cpu"}, {"index", nullptr}}}, {"strides", st},
          {"storage_offset", {{"as_int", 0}}}, {"layout", 7}};
}

}  // namespace

std::string python_identifier(std::string_view s, bool keep_dots) {
  std::string out;
  for (char c : s) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (keep_dots && c == '.');
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out.insert(out.begin(), '_');
  return out;
}

json SymExpr::to_json() const {
  if (value) return {{"as_int", *value}};
  return {{"as_expr", {{"expr_str", srepr}, {"hint", {{"as_int", hint}}}}}};
}

SymExpr operator+(const SymExpr& a, const SymExpr& b) {
  if (a.value && b.value) return SymExpr::constant(*a.value + *b.value);
  if (a.value == 0) return b;
  if (b.value == 0) return a;
  return {std::nullopt, "Add(" + a.srepr + ", " + b.srepr + ")", a.hint + b.hint};
}
SymExpr operator*(const SymExpr& a, const SymExpr& b) {
  if (a.value && b.value) return SymExpr::constant(*a.value * *b.value);
  if (a.value == 1) return b;
  if (b.value == 1) return a;
  return {std::nullopt, "Mul(" + a.srepr + ", " + b.srepr + ")", a.hint * b.hint};
}
SymExpr operator-(const SymExpr& a) { return SymExpr::constant(-1) * a; }
// torch's FloorDiv (torch.utils._sympy.functions), as its shape expressions spell it.
SymExpr floordiv(const SymExpr& a, const SymExpr& b) {
  if (a.value && b.value) return SymExpr::constant(*a.value >= 0 ? *a.value / *b.value : -((-*a.value + *b.value - 1) / *b.value));
  if (b.value == 1) return a;
  return {std::nullopt, "FloorDiv(" + a.srepr + ", " + b.srepr + ")", b.hint ? a.hint / b.hint : a.hint};
}

json SymInt::arg() const { return name.empty() ? json{{"as_int", *expr.value}} : json{{"as_name", name}}; }

json tensor_arg(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }
json int_arg(int64_t v) { return {{"as_int", v}}; }
json ints_arg(const std::vector<int64_t>& v) { return {{"as_ints", v}}; }
json float_arg(double v) { return {{"as_float", v}}; }
json bool_arg(bool v) { return {{"as_bool", v}}; }
json string_arg(const std::string& v) { return {{"as_string", v}}; }
json none_arg() { return {{"as_none", true}}; }
json scalar_type_arg(DType t) { return {{"as_scalar_type", scalar_type_code(t)}}; }
json sym_int_arg(const SymInt& s) { return s.name.empty() ? int_arg(*s.expr.value) : json{{"as_sym_int", s.arg()}}; }
json sym_ints_arg(const std::vector<SymInt>& s) {
  json list = json::array();
  for (const SymInt& i : s) list.push_back(i.arg());
  return {{"as_sym_ints", list}};
}

// torch._export.serde.schema.ScalarType.
int scalar_type_code(DType t) {
  switch (t) {
    case DType::U8: return 1;
    case DType::I8: return 2;
    case DType::I16: return 3;
    case DType::I32: return 4;
    case DType::I64: return 5;
    case DType::F16: return 6;
    case DType::F32: return 7;
    case DType::F64: return 8;
    case DType::Bool: return 12;
    case DType::BF16: return 13;
  }
  fail("internal error: no torch scalar type for ", dtype_name(t));
}

void pt2_lower_aten(Pt2Lowering& l, const Node& n) { l.aten(n); }

const Pt2OpRule& pt2_rule(OpKind op) {
  static const Pt2OpRule by_aten_table{pt2_lower_aten, nullptr};
  if (const Pt2OpRule* own = pt2_rules().find(op)) return *own;
  return aten_rule(op) && !op_is_high_level(op) ? by_aten_table : pt2_rules().get(op);
}

bool register_pt2_rule(OpKind op, Pt2Rule lower, Pt2Native native) { return pt2_rules().add(op, {lower, native}); }

bool pt2_maps_natively(const Node& n) {
  const Pt2OpRule& r = pt2_rule(n.op);
  return r.lower != nullptr && (r.native == nullptr || r.native(n));
}

Pt2Lowering::Pt2Lowering(const Graph& graph, Pt2Interface interface) : graph_(graph), interface_(std::move(interface)) {
  // Hints are values each symbol may take (torch's ShapeEnv asks for one); distinct and >= 2 so
  // that none reads as a 0/1 specialization or an accidental equality.
  int64_t next_hint = 2;
  for (const Symbol& s : graph.symbols()) {
    if (s.op != Symbol::Op::Free) {  // derived: the expression over its operands (made before it)
      symbols_[&s] = derived_expr(s);
      derived_.insert(&s);
      continue;
    }
    const int64_t hint = std::clamp<int64_t>(next_hint++, s.min, s.max);
    symbols_[&s] = {std::nullopt, "Symbol('" + torch_symbol(s) + "', positive=True, integer=True)", hint};
  }
  plan_derived_dims();
  plan_in_place_updates();
}

SymExpr Pt2Lowering::derived_expr(const Symbol& s) const {
  const SymExpr& a = symbols_.at(s.a);
  const SymExpr other = s.b ? symbols_.at(s.b) : SymExpr::constant(s.k);
  switch (s.op) {
    case Symbol::Op::Add: return a + other;
    case Symbol::Op::Mul: return a * other;
    case Symbol::Op::FloorDiv: return floordiv(a, other);
    case Symbol::Op::Free: break;
  }
  fail("internal error: pt2: ", s.name, " is not derived");
}

// A dynamic cache's total length is the past's plus the query's: written as that sum (as torch
// does for derived dims), so torch's shape checks can prove the cache and the mask agree.
void Pt2Lowering::plan_derived_dims() {
  for (const Node* n : graph_.order) {
    if (n->op != OpKind::KVAppend) continue;
    const Dim total = n->attrs_as<KVAppendAttrs>().total;
    if (total.is_static() || derived_.count(total.symbol())) continue;
    const std::vector<SymExpr> past = sizes(n->inputs[0]->shape), fresh = sizes(n->inputs[1]->shape);
    symbols_[total.symbol()] = past.at(2) + fresh.at(2);
    derived_.insert(total.symbol());
  }
}

// A static cache (input.<name> -> ScatterElements -> output.<name>) is updated in place, as
// transformers' programs do (a user-input mutation): the caller's buffer holds the new rows, and
// the program returns only the logits.
void Pt2Lowering::plan_in_place_updates() {
  for (const StatePair& pair : graph_.state_pairs) {
    if (pair.carried() && pair.update == StateUpdatePolicy::Replace) {  // copied into the caller's tensor
      replaced_.push_back(&pair);
      in_place_outputs_.insert(pair.output);
      continue;
    }
    const Node* update = pair.output ? pair.output->producer : nullptr;
    if (!pair.input || !update || update->op != OpKind::ScatterElements || update->inputs[0] != pair.input) continue;
    for (const Node* n : graph_.order)
      for (const Value* v : n->inputs)
        HFX_CHECK(v != pair.input || n == update || n->op == OpKind::ShapeOf, "pt2: state ", pair.name,
                  " is read by ", n->name, " besides its in-place update");
    in_place_.insert(update);
    in_place_outputs_.insert(pair.output);
  }
}

std::vector<SymExpr> Pt2Lowering::sizes(const Shape& shape) const {
  std::vector<SymExpr> out;
  for (const Dim& d : shape) out.push_back(d.is_static() ? SymExpr::constant(d.value()) : symbols_.at(d.symbol()));
  return out;
}

json Pt2Lowering::tensor_meta(DType dtype, const Shape& shape) const { return meta_json(dtype, sizes(shape)); }

// Inductor tells a symbol's kind by its prefix ("s": a size), so dims are s<N>, numbered after
// the graph's symbols (manifest names stay in export.json's dims), far from torch's own.
std::string Pt2Lowering::torch_symbol(const Symbol& s) const {
  const auto& all = graph_.symbols();
  for (size_t i = 0; i < all.size(); ++i)
    if (&all[i] == &s) return "s" + std::to_string(900 + i);
  fail("internal error: pt2: symbol ", s.name, " is not the graph's");
}

std::string Pt2Lowering::unique_name(std::string_view base) {
  const std::string stem = python_identifier(base, false);
  std::string name = stem;
  for (int i = 1; used_names_.count(name); ++i) name = stem + "_" + std::to_string(i);
  used_names_.insert(name);
  return name;
}

json Pt2Lowering::node_json(std::string_view target, std::vector<Pt2Arg> args, json outputs,
                            const std::string& name) const {
  json inputs = json::array();
  for (Pt2Arg& a : args) inputs.push_back({{"name", a.name}, {"arg", std::move(a.arg)}, {"kind", a.keyword ? 2 : 1}});
  // nn_module_stack lets torch.export.unflatten rebuild the module; stack_trace names the HF module.
  json metadata = {{"stack_trace", "hfexport: " + scope_}, {"nn_module_stack", "L__self__,,hfexport.Model"}};
  return {{"target", target}, {"inputs", std::move(inputs)}, {"outputs", std::move(outputs)},
          {"metadata", std::move(metadata)}, {"is_hop_single_tensor_return", nullptr}, {"name", name}};
}

std::string Pt2Lowering::call(std::string_view target, std::vector<Pt2Arg> args, DType dtype,
                              const std::vector<SymExpr>& shape, std::string_view base) {
  return call_multi(target, std::move(args), {{dtype, shape}}, base).front();
}

std::vector<std::string> Pt2Lowering::call_multi(std::string_view target, std::vector<Pt2Arg> args,
                                                 const std::vector<std::pair<DType, std::vector<SymExpr>>>& results,
                                                 std::string_view base) {
  // One result is the node's own name; several are getitem nodes of their own names.
  const bool single = results.size() == 1;
  const std::string node = single ? std::string() : unique_name(base);
  std::vector<std::string> names;
  json outputs = json::array();
  for (const auto& [dtype, shape] : results) {
    names.push_back(unique_name(single ? std::string(base) : std::string(base) + "_" + std::to_string(names.size())));
    outputs.push_back(tensor_arg(names.back()));
    tensor_values_[names.back()] = meta_json(dtype, shape);
  }
  nodes_.push_back(node_json(target, std::move(args), std::move(outputs), single ? names.front() : node));
  return names;
}

void Pt2Lowering::result(const Node& n, std::string_view target, std::vector<Pt2Arg> args) {
  const Value* y = n.outputs.at(0);
  define(y, call(target, std::move(args), y, y->name));
}

json Pt2Lowering::aten_arg(const AtenArg& a, const Node& n) {
  switch (a.kind) {
    case AtenArg::Kind::Tensor: return tensor_arg(tensor(a.values[0]));
    case AtenArg::Kind::Tensors: {
      json list = json::array();
      for (const Value* v : a.values) list.push_back({{"name", tensor(v)}});
      return {{"as_tensors", list}};
    }
    case AtenArg::Kind::OptionalTensors: {
      json list = json::array();
      for (const Value* v : a.values) list.push_back(v ? tensor_arg(tensor(v)) : none_arg());
      return {{"as_optional_tensors", list}};
    }
    case AtenArg::Kind::Int: return int_arg(a.ints[0]);
    case AtenArg::Kind::Ints: return ints_arg(a.ints);
    case AtenArg::Kind::SymInts: return sym_ints_arg(sym_ints(a.dims));
    case AtenArg::Kind::ShapeInt: {
      const std::vector<SymInt>* s = shape_value(a.values[0]);
      HFX_CHECK(s && s->size() == 1, "pt2: ", op_name(n.op), " takes shape arithmetic; '", a.values[0]->name,
                "' is a computed tensor (", n.name, ")");
      return sym_int_arg(s->front());
    }
    case AtenArg::Kind::Float: return float_arg(a.number);
    case AtenArg::Kind::Bool: return bool_arg(a.flag);
    case AtenArg::Kind::String: return string_arg(a.text);
    case AtenArg::Kind::None: return none_arg();
    case AtenArg::Kind::ScalarType: return scalar_type_arg(a.dtype);
  }
  fail("internal error: pt2: an ATen argument of unknown kind");
}

// torch.export records the arguments the call passes (defaults left out), named by the schema.
void Pt2Lowering::aten(const Node& n, const AtenCall& call) {
  std::vector<Pt2Arg> args;
  for (const auto& [name, a] : call.args) args.push_back({name, aten_arg(a, n), call.schema->arg(name)->keyword});
  const std::string target = "torch.ops.aten." + call.schema->qualified();
  const Value* y = n.outputs.at(0);
  if (call.results.empty()) return define(y, this->call(target, std::move(args), y, y->name));
  std::vector<std::pair<DType, std::vector<SymExpr>>> results;
  for (DType t : call.results) results.emplace_back(t, sizes(y->shape));
  define(y, call_multi(target, std::move(args), results, y->name)[call.result]);
}

SymInt Pt2Lowering::sym_int(const Dim& d) {
  if (d.is_static()) return {SymExpr::constant(d.value()), ""};
  const Symbol* s = d.symbol();
  if (const auto it = symbol_ints_.find(s); it != symbol_ints_.end()) return it->second;
  for (const Value* v : graph_.inputs)
    for (size_t axis = 0; axis < v->shape.size(); ++axis) {
      if (v->shape[axis].symbol() != s) continue;
      const std::string name = unique_name("sym_size_int");
      nodes_.push_back(node_json("torch.ops.aten.sym_size.int",
                                 {{"self", tensor_arg(tensor(v))}, {"dim", int_arg(static_cast<int64_t>(axis))}},
                                 json::array({{{"as_sym_int", {{"as_name", name}}}}}), name));
      sym_int_values_[name] = symbols_.at(s).to_json();
      return symbol_ints_[s] = {symbols_.at(s), name};
    }
  if (s->op != Symbol::Op::Free) {  // computed from the dims it is derived from
    const SymInt a = sym_int(Dim(s->a)), other = s->b ? sym_int(Dim(s->b)) : SymInt{SymExpr::constant(s->k), ""};
    const std::string_view op = s->op == Symbol::Op::Add ? "add" : s->op == Symbol::Op::Mul ? "mul" : "floordiv";
    return symbol_ints_[s] = sym_arith(op, a, other);
  }
  fail("internal error: pt2: dim '", s->name, "' is not a dim of any graph input");
}

std::vector<SymInt> Pt2Lowering::sym_ints(const Shape& shape) {
  std::vector<SymInt> out;
  for (const Dim& d : shape) out.push_back(sym_int(d));
  return out;
}

SymInt Pt2Lowering::sym_arith(std::string_view op, const SymInt& a, const SymInt& b) {
  SymExpr e;
  if (op == "add") e = a.expr + b.expr;
  else if (op == "sub") e = a.expr + -b.expr;
  else if (op == "mul") e = a.expr * b.expr;
  else if (op == "floordiv") e = floordiv(a.expr, b.expr);
  else fail("internal error: pt2: SymInt arithmetic '", op, "'");
  if (e.is_static()) return {e, ""};
  const std::string name = unique_name(op);
  nodes_.push_back(node_json("_operator." + std::string(op), {{"a", sym_int_arg(a)}, {"b", sym_int_arg(b)}},
                             json::array({{{"as_sym_int", {{"as_name", name}}}}}), name));
  sym_int_values_[name] = e.to_json();
  return {e, name};
}

const std::vector<SymInt>* Pt2Lowering::shape_value(const Value* v) {
  if (!v) return nullptr;
  if (const auto it = shape_values_.find(v); it != shape_values_.end()) return &it->second;
  // Small int64 constants take part in shape arithmetic as numbers.
  const std::optional<std::vector<int64_t>> literal = small_int64_constant(v);
  if (!literal) return nullptr;
  std::vector<SymInt> ints;
  for (int64_t x : *literal) ints.push_back({SymExpr::constant(x), ""});
  return &(shape_values_[v] = std::move(ints));
}

// ShapeOf and int64 arithmetic on what it yields (element picks, +, -, *, concatenation) become
// SymInts: torch programs compute shapes as SymInts, and a tensor only where one is consumed.
bool Pt2Lowering::lower_shape_arithmetic(const Node& n) {
  const Value* y = n.outputs.at(0);
  if (n.op == OpKind::ShapeOf) {
    shape_values_[y] = sym_ints(n.inputs[0]->shape);
    return true;
  }
  auto out = fold_shape_arithmetic<SymInt>(
      n, [&](const Value* v) { return shape_value(v); },
      [](const SymInt& i) { return i.name.empty() ? i.expr.value : std::nullopt; },
      [&](std::string_view op, const SymInt& a, const SymInt& b) { return sym_arith(op, a, b); });
  if (!out) return false;
  shape_values_[y] = std::move(*out);
  return true;
}

// A shape value a tensor op consumes: built from its SymInts (a constant when all are known).
std::string Pt2Lowering::materialize(const Value* v, const std::vector<SymInt>& ints) {
  std::vector<std::string> parts;
  for (const SymInt& i : ints)
    parts.push_back(call("torch.ops.aten.scalar_tensor.default",
                         {{"s", i.name.empty() ? int_arg(*i.expr.value) : json{{"as_sym_int", i.arg()}}},
                          {"dtype", scalar_type_arg(DType::I64), true}},
                         DType::I64, {}, v->name + "_element"));
  if (v->rank() == 0) return parts.at(0);
  json list = json::array();
  for (const std::string& p : parts) list.push_back({{"name", p}});
  return call("torch.ops.aten.stack.default", {{"tensors", {{"as_tensors", list}}}, {"dim", int_arg(0)}}, DType::I64,
              {SymExpr::constant(static_cast<int64_t>(parts.size()))}, v->name);
}

std::string Pt2Lowering::placeholder_of(const Value* v) {
  if (const auto it = constant_index_.find(v); it != constant_index_.end()) return constants_[it->second].placeholder;
  const bool parameter = v->constant->from_checkpoint();
  std::string fqn = parameter ? python_identifier(v->name, true) : "lifted_tensor_" + std::to_string(lifted_++);
  for (int i = 1; std::any_of(constants_.begin(), constants_.end(), [&](const Pt2Constant& c) { return c.fqn == fqn; });
       ++i)
    fqn = python_identifier(v->name, true) + "_" + std::to_string(i);
  std::string placeholder = unique_name((parameter ? "p_" : "c_") + fqn);
  tensor_values_[placeholder] = tensor_meta(v->dtype, v->shape);
  constant_index_[v] = constants_.size();
  constants_.push_back({placeholder, fqn, v, parameter});
  return placeholder;
}

std::string Pt2Lowering::tensor(const Value* v) {
  if (const auto it = names_.find(v); it != names_.end()) return it->second;
  if (v->is_constant()) return placeholder_of(v);
  if (const auto it = shape_values_.find(v); it != shape_values_.end()) return names_[v] = materialize(v, it->second);
  fail("internal error: pt2: value '", v->name, "' used before it is computed");
}

void Pt2Lowering::lower_graph() {
  std::set<const Value*> caches;
  for (const StatePair& p : graph_.state_pairs) caches.insert(p.input);
  size_t cache_inputs = 0;
  for (const Value* v : graph_.inputs) {
    const std::string name = unique_name(v->name);
    names_[v] = name;
    tensor_values_[name] = tensor_meta(v->dtype, v->shape);
    user_inputs_.push_back({name, v->name, v->dtype, v->shape});
    if (interface_.cache_lengths && caches.count(v) && ++cache_inputs % 2 == 0) add_cache_length(cache_inputs / 2 - 1);
  }
  for (const Node* n : graph_.order) {
    scope_ = n->name;
    if (lower_shape_arithmetic(*n)) continue;
    const Pt2OpRule& rule = pt2_rule(n->op);
    if (!rule.lower) fail("internal error: pt2: no lowering for ", op_name(n->op), " (", n->name, ")");
    rule.lower(*this, *n);
  }
  scope_.clear();
  // Replaced state: the call's result is copied into the caller's tensor after every read of it.
  for (const StatePair* pair : replaced_)
    call("torch.ops.aten.copy_.default", {{"self", tensor_arg(tensor(pair->input))}, {"src", tensor_arg(tensor(pair->output))}},
         pair->input, pair->name + "_replaced");
  for (const std::string& length : pending_cache_lengths_) {
    const SymInt query = sym_int(graph_.inputs.front()->shape.at(1));
    advanced_lengths_[length] = call("torch.ops.aten.add_.Scalar", {{"self", tensor_arg(length)}, {"other", sym_int_arg(query)}},
                                     DType::I64, {}, length + "_advanced");
  }
  for (const Value* v : graph_.outputs) tensor(v);
}

// transformers' StaticLayer.cumulative_length: the tokens the layer has seen, advanced by the
// query length in place (so the caller's cache reports its length as transformers' does).
void Pt2Lowering::add_cache_length(size_t layer) {
  const std::string name = unique_name("cumulative_length_" + std::to_string(layer));
  tensor_values_[name] = tensor_meta(DType::I64, {});
  user_inputs_.push_back({name, name, DType::I64, {}});
  pending_cache_lengths_.push_back(name);
}

// transformers' static-cache programs also return the cache they were given: its own tensors,
// updated in place (the in-place results, the advanced lengths), under the in_spec's subtree of
// that keyword. Null when the interface has no such cache or its leaves are not these.
std::optional<std::pair<json, std::vector<std::string>>> Pt2Lowering::returned_cache() const {
  if (interface_.in_spec.empty() || !interface_.cache_lengths) return std::nullopt;
  std::map<const Value*, const Value*> updated;  // cache input -> its in-place result
  for (const StatePair& pair : graph_.state_pairs)
    if (pair.input && in_place_outputs_.count(pair.output)) updated[pair.input] = pair.output;
  std::vector<std::string> leaves;
  for (const Pt2Input& in : user_inputs_) {
    if (const auto length = advanced_lengths_.find(in.placeholder); length != advanced_lengths_.end()) {
      leaves.push_back(length->second);
      continue;
    }
    const auto input = std::find_if(graph_.inputs.begin(), graph_.inputs.end(), [&](const Value* v) { return v->name == in.keyword; });
    if (input != graph_.inputs.end() && updated.count(*input)) leaves.push_back(names_.at(updated.at(*input)));
  }
  const json spec = json::parse(interface_.in_spec);  // [1, (args, kwargs)]
  const json& kwargs = spec.at(1).at("children_spec").at(1);
  for (const json& child : kwargs.at("children_spec")) {
    size_t count = 0;  // the child's leaves
    std::vector<const json*> todo{&child};
    while (!todo.empty()) {
      const json* node = todo.back();
      todo.pop_back();
      if (node->at("type").is_null()) ++count;
      for (const json& c : node->at("children_spec")) todo.push_back(&c);
    }
    if (!child.at("type").is_null() && count == leaves.size()) return std::make_pair(child, leaves);
  }
  return std::nullopt;
}

json Pt2Lowering::program() const {
  json inputs = json::array(), input_specs = json::array(), outputs = json::array(), output_specs = json::array();
  for (const bool parameters : {true, false})
    for (const Pt2Constant& c : constants_) {
      if (c.parameter != parameters) continue;
      inputs.push_back(tensor_arg(c.placeholder));
      if (c.parameter)
        input_specs.push_back({{"parameter", {{"arg", {{"name", c.placeholder}}}, {"parameter_name", c.fqn}}}});
      else
        input_specs.push_back({{"tensor_constant", {{"arg", {{"name", c.placeholder}}}, {"tensor_constant_name", c.fqn}}}});
    }
  std::vector<std::string> arg_names;
  for (const Pt2Input& in : user_inputs_) {
    inputs.push_back(tensor_arg(in.placeholder));
    input_specs.push_back({{"user_input", {{"arg", tensor_arg(in.placeholder)}}}});
    arg_names.push_back(in.keyword);
  }
  json out_leaves = json::array();
  std::vector<std::string> returned_names;
  for (const Value* v : graph_.outputs) {
    if (!returned(v)) continue;
    outputs.push_back(tensor_arg(names_.at(v)));
    output_specs.push_back({{"user_output", {{"arg", tensor_arg(names_.at(v))}}}});
    out_leaves.push_back(leaf_spec());
    returned_names.push_back(v->name);
  }
  json out_spec = model_output_spec(graph_.output_type, returned_names);
  if (out_spec.is_null()) out_spec = tuple_spec(out_leaves);
  else if (const auto cache = returned_cache(); cache && returned_names.size() == 1) {
    for (const std::string& name : cache->second) {
      outputs.push_back(tensor_arg(name));
      output_specs.push_back({{"user_output", {{"arg", tensor_arg(name)}}}});
    }
    out_spec["context"] = json({"logits", "cache"}).dump();
    out_spec["children_spec"].push_back(cache->first);
  }
  json range_constraints = json::object();
  for (const Symbol& s : graph_.symbols())
    if (!derived_.count(&s)) range_constraints[torch_symbol(s)] = {{"min_val", s.min},
                                                    {"max_val", s.max == INT64_MAX ? json(nullptr) : json(s.max)}};
  json graph = {{"inputs", inputs}, {"outputs", outputs}, {"nodes", nodes_}, {"tensor_values", tensor_values_},
                {"sym_int_values", sym_int_values_}, {"sym_bool_values", json::object()},
                {"is_single_tensor_return", false}, {"custom_obj_values", json::object()},
                {"sym_float_values", json::object()}};
  // forward(*, input_ids, attention_mask, ...) -> the model's output structure.
  const bool flat = interface_.in_spec.empty();
  json signature = {
      {"inputs", json::array()}, {"outputs", json::array()},
      {"in_spec", flat ? dump_spec(tuple_spec(json::array({tuple_spec(json::array()), dict_spec(arg_names)})))
                       : interface_.in_spec},
      {"out_spec", dump_spec(out_spec)},
      {"forward_arg_names", flat ? arg_names : interface_.forward_arg_names}};
  return {{"graph_module",
           {{"graph", graph},
            {"signature", {{"input_specs", input_specs}, {"output_specs", output_specs}}},
            {"module_call_graph", json::array({{{"fqn", ""}, {"signature", signature}}})},
            {"metadata", json::object()},
            {"treespec_namedtuple_fields", json::object()}}},
          {"opset_version", {{"aten", 10}}},
          {"range_constraints", range_constraints},
          {"schema_version", {{"major", 8}, {"minor", 20}}},
          {"verifiers", json::array({"TRAINING"})},
          {"torch_version", "2.13.0+cpu"},
          {"guards_code", json::array()}};
}

}  // namespace hfx
