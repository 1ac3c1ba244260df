#include "backends/executorch/lowering.h"
#include "backends/executorch/out_variants.h"
#include "backends/rule_table.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "backends/executorch/xnnpack.h"
#include "backends/executorch/xnnpack_lowering.h"
#include "backends/shape_arithmetic.h"
#include "core/error.h"

namespace hfx {
namespace {

OpRuleTable<EtOpRule>& et_rules() {
  static OpRuleTable<EtOpRule> rules("ExecuTorch");
  return rules;
}

etfb::ScalarType scalar_type(DType t) {
  switch (t) {
    case DType::U8: return etfb::ScalarType::BYTE;
    case DType::I8: return etfb::ScalarType::CHAR;
    case DType::I16: return etfb::ScalarType::SHORT;
    case DType::I32: return etfb::ScalarType::INT;
    case DType::I64: return etfb::ScalarType::LONG;
    case DType::F16: return etfb::ScalarType::HALF;
    case DType::F32: return etfb::ScalarType::FLOAT;
    case DType::F64: return etfb::ScalarType::DOUBLE;
    case DType::Bool: return etfb::ScalarType::BOOL;
    case DType::BF16: return etfb::ScalarType::BFLOAT16;
  }
  fail("internal error: no ExecuTorch scalar type for ", dtype_name(t));
}

std::unique_ptr<etfb::TensorT> tensor_of(DType dtype, const std::vector<int64_t>& sizes, bool dynamic) {
  auto t = std::make_unique<etfb::TensorT>();
  t->scalar_type = scalar_type(dtype);
  for (size_t i = 0; i < sizes.size(); ++i) {
    HFX_CHECK(sizes[i] <= INT32_MAX, "executorch: a dim of ", sizes[i], " exceeds the format's int32 sizes");
    t->sizes.push_back(static_cast<int32_t>(sizes[i]));
    t->dim_order.push_back(static_cast<uint8_t>(i));
  }
  t->shape_dynamism = dynamic ? etfb::TensorShapeDynamism::DYNAMIC_BOUND : etfb::TensorShapeDynamism::STATIC;
  return t;
}

// pytree treespecs (protocol 1) of a flat tuple; the Python runtime reads them, C++ ignores them.
std::string flat_tuple_spec(size_t leaves, bool wrap_in_args) {
  std::string children;
  for (size_t i = 0; i < leaves; ++i)
    children += std::string(i ? ", " : "") + R"({"type": null, "context": null, "children_spec": []})";
  const std::string tuple = R"({"type": "builtins.tuple", "context": "null", "children_spec": [)" + children + "]}";
  if (!wrap_in_args) return "[1, " + tuple + "]";
  return R"([1, {"type": "builtins.tuple", "context": "null", "children_spec": [)" + tuple +
         R"(, {"type": "builtins.dict", "context": "[]", "children_spec": []}]}])";
}

constexpr uint64_t kPlanAlignment = 64;  // planned tensors start on cache lines (SIMD kernels)

}  // namespace

etfb::KernelTypesUnion et_int(int64_t v) {
  etfb::IntT t;
  t.int_val = v;
  etfb::KernelTypesUnion u;
  u.Set(std::move(t));
  return u;
}

etfb::KernelTypesUnion et_bool(bool v) {
  etfb::BoolT t;
  t.bool_val = v;
  etfb::KernelTypesUnion u;
  u.Set(std::move(t));
  return u;
}

uint32_t EtConstants::add(const Value* v, uint64_t bytes) {
  const auto key = std::make_pair(v->constant->key(), v->dtype);
  if (const auto it = index.find(key); it != index.end()) return it->second;
  constexpr uint64_t kConstantAlignment = 16;  // the runtime's tensor alignment (exir ALIGNMENT)
  const uint64_t offset = (end + kConstantAlignment - 1) / kConstantAlignment * kConstantAlignment;
  entries.push_back({v, offset, bytes});
  end = offset + bytes;
  return index[key] = static_cast<uint32_t>(entries.size() - 1);
}

uint32_t EtConstants::add_payload(std::string bytes) {
  const uint64_t size = bytes.size();
  segments.push_back({std::move(bytes), nullptr, size});
  return static_cast<uint32_t>(segments.size());
}

const std::string& EtConstants::add_named(const Value* v, uint64_t bytes) {
  const auto key = std::make_pair(v->constant->key(), v->dtype);
  if (const auto it = named_key.find(key); it != named_key.end()) return it->second;
  segments.push_back({{}, v, bytes});
  // Keys are unique: constants the export makes (all named "scalar") share a name.
  std::string name = v->name + "." + std::string(dtype_name(v->dtype));
  for (int i = 1; !named_names.insert(name).second; ++i)
    name = v->name + "." + std::to_string(i) + "." + std::string(dtype_name(v->dtype));
  named.emplace_back(name, static_cast<uint32_t>(segments.size()));
  return named_key[key] = name;
}

const std::string& EtConstants::add_named_bytes(std::string bytes) {
  if (const auto it = made_key.find(bytes); it != made_key.end()) return it->second;
  const uint64_t size = bytes.size();
  segments.push_back({bytes, nullptr, size});
  std::string name = "hfexport.constant." + std::to_string(made_key.size());
  named_names.insert(name);
  named.emplace_back(name, static_cast<uint32_t>(segments.size()));
  return made_key[std::move(bytes)] = name;
}

void et_lower_aten(EtLowering& l, const Node& n) { l.aten(n); }

const EtOpRule& et_rule(OpKind op) {
  static const EtOpRule by_aten_table{et_lower_aten, nullptr};
  if (const EtOpRule* own = et_rules().find(op)) return *own;
  return aten_rule(op) && !op_is_high_level(op) ? by_aten_table : et_rules().get(op);
}

bool register_et_rule(OpKind op, EtRule lower, EtNative native) { return et_rules().add(op, {lower, native}); }

bool et_maps_natively(const Node& n) {
  const EtOpRule& r = et_rule(n.op);
  return r.lower != nullptr && (r.native == nullptr || r.native(n));
}

EtLowering::EtLowering(const Graph& graph, std::string method, EtConstants& constants,
                       uint64_t (*bytes_of)(const Value&), bool xnnpack, bool planned_io, bool hfexport_kernels,
                       bool static_cache)
    : graph_(graph),
      constants_(constants),
      bytes_of_(bytes_of),
      xnnpack_(xnnpack),
      planned_io_(planned_io),
      hfexport_kernels_(hfexport_kernels),
      static_cache_(static_cache),
      plan_(std::make_unique<etfb::ExecutionPlanT>()) {
  plan_->name = std::move(method);
  plan_in_place_updates();
}

// The update's index is the positions, unsqueezed and expanded over heads and head dims (see
// lower_state_as_io): index_put_ takes the positions themselves.
void EtLowering::plan_in_place_updates() {
  // Replaced state (convolution, recurrent) stays in the method with a static cache; with a
  // dynamic one (KV pairs passed in and out, or none: a pure state-space model) it is passed in and
  // out like them.
  for (const StatePair& pair : graph_.state_pairs) {
    if (pair.carried() && pair.update == StateUpdatePolicy::Replace) {
      if (static_cache_) plan_replaced_state(pair);
      continue;
    }
    const Node* update = pair.output ? pair.output->producer : nullptr;
    if (!pair.input || !update || update->op != OpKind::ScatterElements || update->inputs[0] != pair.input) continue;
    const Node* expand = update->inputs[1]->producer;
    const Node* unsqueeze = expand && expand->op == OpKind::Expand ? expand->inputs[0]->producer : nullptr;
    HFX_CHECK(unsqueeze && unsqueeze->op == OpKind::Unsqueeze && update->attrs_as<AxisAttrs>().axis == 2,
              "internal error: executorch: state ", pair.name, " is not updated at its positions");
    HFX_CHECK(pair.input->shape.at(0) == Dim(1), "executorch: the static cache ", pair.name,
              " has batch ", pair.input->shape.at(0).to_string(), "; a .pte's in-place cache takes batch 1 (--batch-size 1)");
    for (const Node* n : graph_.order)
      for (const Value* v : n->inputs)
        HFX_CHECK(v != pair.input || n == update || n->op == OpKind::ShapeOf, "executorch: state ", pair.name,
                  " is read by ", n->name, " besides its in-place update");
    in_place_[update] = unsqueeze->inputs[0];
    if (planned_io_) buffers_[pair.input] = -1;
    in_place_outputs_.insert(pair.output);
  }
  for (const Value* v : graph_.inputs)
    for (const StatePair& pair : graph_.state_pairs)
      if (pair.input == v && in_place_outputs_.count(pair.output)) cache_inputs_.push_back(v);
  plan_filled_slot_reads();
}

// Replaced state (recurrent, convolution) is a buffer too, which the call's result is copied into
// at the end of the method (aten::copy_), after every read of the old value.
void EtLowering::plan_replaced_state(const StatePair& pair) {
  HFX_CHECK(pair.input->shape.at(0) == Dim(1), "executorch: the state ", pair.name, " has batch ",
            pair.input->shape.at(0).to_string(), "; a .pte's in-place state takes batch 1");
  for (const Dim& d : pair.input->shape)
    HFX_CHECK(d.is_static(), "internal error: executorch: replaced state ", pair.name, " has a dynamic shape");
  if (planned_io_) buffers_[pair.input] = -1;
  in_place_outputs_.insert(pair.output);
  replaced_.push_back(&pair);
}

// Caches read up to their filled slots: mutable buffers written at the position_ids themselves,
// so that slots past the last position written are ones no query may see (the caller's mask is
// causal), and read only as the keys and values of XNNPACK attention whose keys and values are
// both such caches.
void EtLowering::plan_filled_slot_reads() {
  if (!planned_io_ || !xnnpack_) return;
  std::set<const Value*>& candidates = filled_slot_reads_;  // updates' results, narrowed below
  for (const auto& [update, positions] : in_place_)
    if (std::find(graph_.inputs.begin(), graph_.inputs.end(), positions) != graph_.inputs.end())
      candidates.insert(update->outputs[0]);
  auto attends_candidates = [&](const Node& n) {
    const Value *k = n.input(1), *v = n.input(2), *mask = n.input(3);
    return n.op == OpKind::Attention && xnn_rule(n) && !runs_hfexport_attention(n) && mask && k != v && candidates.count(k) && candidates.count(v) &&
           mask->shape.back() == k->shape[2];
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (const Node* n : graph_.order)
      for (size_t i = 0; i < n->inputs.size(); ++i)
        if (candidates.count(n->inputs[i]) && n->op != OpKind::ShapeOf && !((i == 1 || i == 2) && attends_candidates(*n)))
          changed = candidates.erase(n->inputs[i]) > 0 || changed;
  }
}

bool EtLowering::runs_hfexport_attention(const Node& n) const {
  if (!hfexport_kernels_ || n.op != OpKind::Attention || n.input(4)) return false;
  const Value *q = n.inputs[0], *k = n.inputs[1], *v = n.inputs[2], *mask = n.input(3);
  const bool float32 = q->dtype == DType::F32 && k->dtype == DType::F32 && v->dtype == DType::F32 &&
                       n.outputs[0]->dtype == DType::F32;
  return float32 && q->rank() == 4 && k->rank() == 4 && v->rank() == 4 &&
         (!mask || (mask->dtype == DType::Bool && mask->rank() == 4 && mask->shape[1] == Dim(1)));
}

// The nodes the method runs: what the returned outputs and the cache updates need (an in-place
// update needs its positions and rows, not the expanded index).
std::set<const Node*> EtLowering::needed_nodes() const {
  std::set<const Node*> needed;
  std::vector<const Node*> stack;
  auto want = [&](const Value* v) {
    if (v && v->producer && needed.insert(v->producer).second) stack.push_back(v->producer);
  };
  for (const Value* v : graph_.outputs) want(v);
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (const auto it = in_place_.find(n); it != in_place_.end()) {
      want(it->second);
      want(n->inputs[2]);
      continue;
    }
    for (const Value* v : n->inputs) want(v);
  }
  return needed;
}

std::vector<int64_t> EtLowering::upper_dims(const Value* v) const {
  std::vector<int64_t> dims;
  for (const EtInt& d : bounds(v->shape)) dims.push_back(d.upper);
  return dims;
}

void EtLowering::emit_delegate(uint32_t segment, std::vector<int> args) {
  auto delegate = std::make_unique<etfb::BackendDelegateT>();
  delegate->id = "XnnpackBackend";
  delegate->processed = std::make_unique<etfb::BackendDelegateDataReferenceT>();
  delegate->processed->location = etfb::DataLocation::SEGMENT;
  delegate->processed->index = segment;
  plan_->delegates.push_back(std::move(delegate));
  etfb::DelegateCallT call;
  call.delegate_index = static_cast<int>(plan_->delegates.size() - 1);
  call.args = std::move(args);
  auto ins = std::make_unique<etfb::InstructionT>();
  ins->instr_args.Set(std::move(call));
  instructions_.push_back(std::move(ins));
}

// y = the XnnpackBackend payload in `segment` applied to x (its one input and output).
void EtLowering::emit_xnnpack(uint32_t segment, const Value* x, const Value* y) {
  const int out = new_tensor(y->dtype, bounds(y->shape));
  emit_delegate(segment, {tensor(x), out});
  define(y, out);
}

bool EtLowering::delegates(const Node& n) const {
  if (!xnnpack_ || n.op != OpKind::Linear) return false;
  // XNNPACK's fully connected layer runs float32 and float16; bfloat16 stays on the kernels.
  const DType t = n.inputs[0]->dtype;
  const Value* bias = n.input(2);
  return (t == DType::F32 || t == DType::F16) && n.inputs[1]->is_constant() && n.inputs[1]->dtype == t &&
         n.outputs[0]->dtype == t && (!bias || (bias->is_constant() && bias->dtype == t));
}

// An XnnpackBackend payload per linear: its input and output are the delegate's external values,
// its weight (and bias) named data, prepacked by XNNPACK when the method loads.
void EtLowering::delegate_linear(const Node& n) {
  const Value* x = n.inputs[0];
  const Value* y = n.outputs[0];
  const XnnWeight weight = named_weight(n.inputs[1]);
  const std::optional<XnnWeight> bias = n.input(2) ? std::optional(named_weight(n.input(2))) : std::nullopt;
  const XnnFloat type = x->dtype == DType::F16 ? XnnFloat::F16 : XnnFloat::F32;
  const uint32_t segment = constants_.add_payload(
      xnnpack_fully_connected(upper_dims(x), upper_dims(y), weight, bias ? &*bias : nullptr, type));
  emit_xnnpack(segment, x, y);
}

XnnWeight EtLowering::named_floats(const std::vector<float>& data, const std::vector<int64_t>& dims) {
  std::string bytes(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  const uint64_t size = bytes.size();
  return {constants_.add_named_bytes(std::move(bytes)), dims, size};
}

// 8da4w / 8da8w: the activations quantized to int8 per token inside the delegate, the weight's
// codes as they are (the IR's 4-bit layout is XNNPACK's qbint4; 8-bit ones are signed, per
// channel: qcint8), its scales positive by the scheme the backend asked for, stored as bfloat16
// (4-bit) or float32 (8-bit, one per output channel).
XnnQuantizedWeights EtLowering::quantized_weights(const Node& n) {
  const QuantizedLinearAttrs& a = n.attrs_as<QuantizedLinearAttrs>();
  const Value* x = n.inputs[0];
  const Value* codes = n.inputs[1];
  const Value* scales = n.inputs[2];
  HFX_CHECK((a.bits == 4 || a.bits == 8) && codes->is_constant() && scales->is_constant(), "internal error: "
            "executorch: ", n.name, " is not a 4- or 8-bit linear over constants");
  const int64_t rows = codes->shape.at(0).value(), cols = x->shape.back().value();
  HFX_CHECK(a.bits == 4 || a.group_size == cols, "internal error: executorch: 8-bit ", n.name, " is not per channel");
  XnnQuantizedWeights w;
  w.bits = a.bits;
  w.group_size = a.group_size;
  w.codes = {constants_.add_named(codes, bytes_of_(*codes)), {rows, cols}, bytes_of_(*codes)};
  const Value* stored_scales = scales;
  if (a.bits == 4) {
    Value& bf16 = constants_.converted.emplace_back(*scales);
    bf16.dtype = DType::BF16;
    bf16.producer = nullptr;
    stored_scales = &bf16;
  }
  w.scales = {constants_.add_named(stored_scales, bytes_of_(*stored_scales)), {rows}, bytes_of_(*stored_scales)};
  if (const Value* b = n.input(3)) {
    HFX_CHECK(b->is_constant() && b->dtype == DType::F32, "internal error: executorch: bias of ", n.name);
    w.bias = named_weight(b);
  }
  return w;
}

XnnWeight EtLowering::named_weight(const Value* v) {
  XnnWeight w{constants_.add_named(v, bytes_of_(*v)), {}, bytes_of_(*v)};
  for (const Dim& d : v->shape) w.dims.push_back(d.value());
  return w;
}

void EtLowering::update_in_place(const Node& n) {
  const Value* positions = in_place_.at(&n);
  const Value* fresh = n.inputs[2];
  // [1, S] -> [S]: one index tensor, as the in-place index_put_ kernel requires.
  const Dim query = positions->shape.at(1);
  const int at = view(tensor(positions), {sym_int(query)}, DType::I64);
  const int buffer = tensor(n.inputs[0]);
  kernel_in_place("aten::index_put_", "", {buffer, optional_tensor_list({-1, -1, at}), tensor(fresh), bool_value(false)});
  if (!reads_filled_slots(n.outputs[0])) return define(n.outputs[0], buffer);
  // The slots up to the last position written, [1, Hkv, filled, D]: one copy per kv head.
  const std::vector<EtInt> c = sym_ints(n.inputs[0]->shape);
  const EtInt filled = filled_slots(positions, c[2].upper);
  define(n.outputs[0], call("aten::slice_copy", "Tensor_out",
                            {buffer, int_value(2), int_value(0), int_value(filled), int_value(1)}, fresh->dtype,
                            {c[0], c[1], filled, c[3]}));
}

// The largest of this call's positions + 1, as an Int (made once per call).
EtInt EtLowering::filled_slots(const Value* positions, int64_t slots) {
  if (filled_slots_) return *filled_slots_;
  const int largest = call("aten::amax", "out",
                           {tensor(positions), int_list(std::vector<int64_t>{0, 1}), bool_value(false)}, DType::I64, {});
  const int last = add_value(et_int(0));
  kernel("aten::_local_scalar_dense", "", {largest}, {last});
  return *(filled_slots_ = arith("add", EtInt{std::nullopt, last, slots - 1}, EtInt::of(1)));
}

int EtLowering::filled_slots_mask(const Value* mask, int64_t groups) {
  const auto key = std::make_pair(mask, groups);
  if (const auto it = filled_masks_.find(key); it != filled_masks_.end()) return it->second;
  HFX_CHECK(filled_slots_, "internal error: executorch: attention over the filled slots before the cache update");
  const std::vector<EtInt> m = sym_ints(mask->shape);  // [1, 1, S, T]
  const EtInt filled = *filled_slots_;
  return filled_masks_[key] = call("aten::slice_copy", "Tensor_out",
                                   {additive_mask(mask, groups), int_value(3), int_value(0), int_value(filled), int_value(1)},
                                   DType::F32, {m[0], m[1], arith("mul", EtInt::of(groups), m[2]), filled});
}

int EtLowering::add_value(etfb::KernelTypesUnion val) {
  auto ev = std::make_unique<etfb::EValueT>();
  ev->val = std::move(val);
  plan_->values.push_back(std::move(ev));
  return static_cast<int>(plan_->values.size() - 1);
}

int EtLowering::int_value(int64_t v) {
  if (const auto it = ints_.find(v); it != ints_.end()) return it->second;
  return ints_[v] = add_value(et_int(v));
}

int EtLowering::bool_value(bool v) {
  return add_value(et_bool(v));
}

int EtLowering::double_value(double v) {
  etfb::DoubleT t;
  t.double_val = v;
  etfb::KernelTypesUnion u;
  u.Set(std::move(t));
  return add_value(std::move(u));
}

int EtLowering::string_value(const std::string& v) {
  etfb::StringT t;
  t.string_val = v;
  etfb::KernelTypesUnion u;
  u.Set(std::move(t));
  return add_value(std::move(u));
}

int EtLowering::null_value() {
  etfb::KernelTypesUnion u;
  u.Set(etfb::NullT{});
  return add_value(std::move(u));
}

int EtLowering::int_list(const std::vector<EtInt>& items) {
  etfb::IntListT list;
  for (const EtInt& i : items) list.items.push_back(int_value(i));
  etfb::KernelTypesUnion u;
  u.Set(std::move(list));
  return add_value(std::move(u));
}

int EtLowering::int_list(const std::vector<int64_t>& items) {
  std::vector<EtInt> ints;
  for (int64_t i : items) ints.push_back(EtInt::of(i));
  return int_list(ints);
}

int EtLowering::tensor_list(const std::vector<int>& tensors) {
  etfb::TensorListT list;
  list.items = tensors;
  etfb::KernelTypesUnion u;
  u.Set(std::move(list));
  return add_value(std::move(u));
}

int EtLowering::optional_tensor_list(const std::vector<int>& tensors) {
  etfb::OptionalTensorListT list;
  list.items = tensors;
  etfb::KernelTypesUnion u;
  u.Set(std::move(list));
  return add_value(std::move(u));
}

std::vector<EtInt> EtLowering::bounds(const Shape& shape) const {
  std::vector<EtInt> out;
  for (const Dim& d : shape) {
    if (d.is_static()) {
      out.push_back(EtInt::of(d.value()));
      continue;
    }
    HFX_CHECK(d.symbol()->max < INT32_MAX, "executorch: dim '", d.symbol()->name,
              "' has no upper bound; memory is planned at each dim's maximum (give one with --dim ",
              d.symbol()->name, "=MIN:MAX)");
    out.push_back({std::nullopt, -1, d.symbol()->max});
  }
  return out;
}

int EtLowering::new_tensor(DType dtype, const std::vector<EtInt>& dims) {
  std::vector<int64_t> sizes;
  bool dynamic = false;
  uint64_t bytes = dtype_size(dtype);
  for (const EtInt& d : dims) {
    sizes.push_back(d.upper);
    dynamic = dynamic || !d.constant;
    bytes *= static_cast<uint64_t>(d.upper);
  }
  etfb::KernelTypesUnion u;
  u.Set(std::move(*tensor_of(dtype, sizes, dynamic)));
  const int id = add_value(std::move(u));
  planned_.push_back(id);
  planned_bytes_[id] = bytes;
  return id;
}

int EtLowering::operator_index(std::string_view name, std::string_view overload) {
  const auto key = std::make_pair(std::string(name), std::string(overload));
  if (const auto it = operators_.find(key); it != operators_.end()) return it->second;
  auto op = std::make_unique<etfb::OperatorT>();
  op->name = key.first;
  op->overload = key.second;
  plan_->operators.push_back(std::move(op));
  return operators_[key] = static_cast<int>(plan_->operators.size() - 1);
}

void EtLowering::kernel(std::string_view name, std::string_view overload, std::vector<int> args,
                        const std::vector<int>& outs) {
  // Out variants take the out arguments after the schema's, then return them: one tensor, or a
  // TensorList of several (topk's values and indices). Prim ops write their one result.
  args.insert(args.end(), outs.begin(), outs.end());
  if (!name.starts_with("executorch_prim::") && name != "aten::sym_size" && name != "aten::_local_scalar_dense") {
    if (outs.size() == 1) args.push_back(outs.front());
    else args.push_back(tensor_list(outs));
  }
  etfb::KernelCallT call;
  call.op_index = operator_index(name, overload);
  call.args = std::move(args);
  auto ins = std::make_unique<etfb::InstructionT>();
  ins->instr_args.Set(std::move(call));
  instructions_.push_back(std::move(ins));
}

void EtLowering::kernel_in_place(std::string_view name, std::string_view overload, std::vector<int> args) {
  args.push_back(args.front());
  etfb::KernelCallT call;
  call.op_index = operator_index(name, overload);
  call.args = std::move(args);
  auto ins = std::make_unique<etfb::InstructionT>();
  ins->instr_args.Set(std::move(call));
  instructions_.push_back(std::move(ins));
}

int EtLowering::call(std::string_view name, std::string_view overload, std::vector<int> args, DType dtype,
                     const std::vector<EtInt>& dims) {
  const int out = new_tensor(dtype, dims);
  kernel(name, overload, std::move(args), {out});
  return out;
}

int EtLowering::view(int source, const std::vector<EtInt>& dims, DType dtype) {
  std::vector<int64_t> sizes;
  bool dynamic = false;
  for (const EtInt& d : dims) sizes.push_back(d.upper), dynamic = dynamic || !d.constant;
  etfb::KernelTypesUnion u;
  u.Set(std::move(*tensor_of(dtype, sizes, dynamic)));
  const int out = add_value(std::move(u));
  const auto root = view_sources_.find(source);
  view_sources_[out] = root == view_sources_.end() ? source : root->second;
  kernel("executorch_prim::et_view", "default", {source, int_list(dims)}, {out});
  return out;
}

void EtLowering::result(const Node& n, std::string_view name, std::string_view overload, std::vector<int> args) {
  const Value* y = n.outputs.at(0);
  define(y, call(name, overload, std::move(args), y->dtype, bounds(y->shape)));
}

int EtLowering::aten_arg(const AtenArg& a, const Node& n) {
  switch (a.kind) {
    case AtenArg::Kind::Tensor: return tensor(a.values[0]);
    case AtenArg::Kind::Tensors:
    case AtenArg::Kind::OptionalTensors: {
      std::vector<int> items;
      for (const Value* v : a.values) items.push_back(v ? tensor(v) : -1);
      return a.kind == AtenArg::Kind::Tensors ? tensor_list(items) : optional_tensor_list(items);
    }
    case AtenArg::Kind::Int: return int_value(a.ints[0]);
    case AtenArg::Kind::Ints: return int_list(a.ints);
    case AtenArg::Kind::SymInts: return sym_list(a.dims);
    case AtenArg::Kind::ShapeInt: {
      const std::vector<EtInt>* s = shape_value(a.values[0]);
      HFX_CHECK(s && s->size() == 1, "executorch: ", op_name(n.op), " takes shape arithmetic; '", a.values[0]->name,
                "' is a computed tensor (", n.name, ")");
      return int_value(s->front());
    }
    case AtenArg::Kind::Float: return double_value(a.number);
    case AtenArg::Kind::Bool: return bool_value(a.flag);
    case AtenArg::Kind::String: return string_value(a.text);
    case AtenArg::Kind::None: return null_value();
    case AtenArg::Kind::ScalarType: break;  // out variants take the dtype from their out tensor
  }
  fail("internal error: executorch: ", op_name(n.op), ": an ATen argument the out variant cannot take");
}

// A default as native_functions.yaml writes it: None, True / False, an int, a float, [] or a 'str'.
int EtLowering::schema_value(const AtenSchemaArg& arg, const std::string& value) {
  if (value == "None") return null_value();
  if (value == "True" || value == "False") return bool_value(value == "True");
  if (value == "[]") return int_list(std::vector<int64_t>{});
  if (value.front() == '\'') return string_value(value.substr(1, value.size() - 2));
  if (value.find('.') != std::string::npos) return double_value(std::stod(value));
  HFX_CHECK(value.find_first_not_of("-0123456789") == std::string::npos, "internal error: executorch: argument '",
            arg.name, "' has a default of unknown form: ", value);
  return int_value(std::stoll(value));
}

void EtLowering::aten(const Node& n, const AtenCall& call) {
  const EtOutVariant& variant = et_out_variant(call.schema->qualified());
  const AtenSchema& out_schema = *variant.kernel;
  for (const auto& [name, a] : call.args)  // what the kernel lacks is the out tensor's (dtype)
    HFX_CHECK(out_schema.arg(name) || call.schema->arg(name)->tensor_option(), "internal error: executorch: ",
              out_schema.qualified(), " has no argument '", name, "'");
  const Value* y = n.outputs.at(0);
  std::vector<int> outs;  // several results are planned before the arguments
  for (DType t : call.results) outs.push_back(new_tensor(t, bounds(y->shape)));
  std::vector<int> args;
  for (const AtenSchemaArg& arg : out_schema.args) {
    if (arg.out) continue;
    if (const AtenArg* given = call.arg(arg.name)) {
      args.push_back(aten_arg(*given, n));
      continue;
    }
    const auto fixed = std::find_if(variant.fixed.begin(), variant.fixed.end(),
                                    [&](const auto& f) { return f.first == arg.name; });
    HFX_CHECK(fixed != variant.fixed.end() || arg.has_default(), "internal error: executorch: ", out_schema.qualified(),
              " needs '", arg.name, "' (", n.name, ")");
    args.push_back(schema_value(arg, fixed != variant.fixed.end() ? fixed->second : arg.default_value));
  }
  const std::string name = "aten::" + out_schema.op;
  if (outs.empty()) return result(n, name, out_schema.overload, std::move(args));
  kernel(name, out_schema.overload, std::move(args), outs);
  define(y, outs[call.result]);
}

EtInt EtLowering::sym_int(const Dim& d) {
  if (d.is_static()) return EtInt::of(d.value());
  const Symbol* s = d.symbol();
  if (const auto it = symbol_ints_.find(s); it != symbol_ints_.end()) return it->second;
  for (const Value* v : graph_.inputs)
    for (size_t axis = 0; axis < v->shape.size(); ++axis) {
      if (v->shape[axis].symbol() != s) continue;
      const int out = add_value(et_int(0));  // written by sym_size at run time
      kernel("aten::sym_size", "int", {tensor(v), int_value(static_cast<int64_t>(axis))}, {out});
      return symbol_ints_[s] = {std::nullopt, out, s->max};
    }
  if (s->op != Symbol::Op::Free) {  // computed from the dims it is derived from
    const EtInt a = sym_int(Dim(s->a)), other = s->b ? sym_int(Dim(s->b)) : EtInt::of(s->k);
    const std::string_view op = s->op == Symbol::Op::Add ? "add" : s->op == Symbol::Op::Mul ? "mul" : "floordiv";
    return symbol_ints_[s] = arith(op, a, other);
  }
  fail("executorch: dim '", s->name, "' is not a dim of any graph input");
}

std::vector<EtInt> EtLowering::sym_ints(const Shape& shape) {
  std::vector<EtInt> out;
  for (const Dim& d : shape) out.push_back(sym_int(d));
  return out;
}

EtInt EtLowering::arith(std::string_view op, const EtInt& a, const EtInt& b) {
  if (a.constant && b.constant) {
    const int64_t x = *a.constant, y = *b.constant;
    if (op == "floordiv") return EtInt::of(x >= 0 ? x / y : -((-x + y - 1) / y));
    return EtInt::of(op == "add" ? x + y : op == "sub" ? x - y : x * y);
  }
  if (op == "floordiv" && b.constant == 1) return a;
  if (op == "mul" && (a.constant == 1 || b.constant == 1)) return a.constant == 1 ? b : a;
  if ((op == "add" || op == "sub") && b.constant == 0) return a;
  HFX_CHECK(op == "add" || op == "sub" || op == "mul" || op == "floordiv", "internal error: executorch: integer op '", op, "'");
  const int out = add_value(et_int(0));
  kernel("executorch_prim::" + std::string(op), "Scalar", {int_value(a), int_value(b)}, {out});
  const int64_t upper = op == "add"   ? a.upper + b.upper
                        : op == "sub" ? a.upper
                        : op == "mul" ? a.upper * b.upper
                                      : a.upper / std::max<int64_t>(1, b.constant.value_or(1));
  return {std::nullopt, out, upper};
}

const std::vector<EtInt>* EtLowering::shape_value(const Value* v) {
  if (!v) return nullptr;
  if (const auto it = shape_values_.find(v); it != shape_values_.end()) return &it->second;
  // Small int64 constants take part in shape arithmetic as numbers.
  const std::optional<std::vector<int64_t>> literal = small_int64_constant(v);
  if (!literal) return nullptr;
  std::vector<EtInt> ints;
  for (int64_t x : *literal) ints.push_back(EtInt::of(x));
  return &(shape_values_[v] = std::move(ints));
}

// ShapeOf and int64 arithmetic on what it yields become Int EValues, as torch programs compute
// shapes; a tensor is made only where one is consumed.
bool EtLowering::lower_shape_arithmetic(const Node& n) {
  const Value* y = n.outputs.at(0);
  if (n.op == OpKind::ShapeOf) {
    shape_values_[y] = sym_ints(n.inputs[0]->shape);
    return true;
  }
  auto out = fold_shape_arithmetic<EtInt>(
      n, [&](const Value* v) { return shape_value(v); }, [](const EtInt& i) { return i.constant; },
      [&](std::string_view op, const EtInt& a, const EtInt& b) { return arith(op, a, b); });
  if (!out) return false;
  shape_values_[y] = std::move(*out);
  return true;
}

int EtLowering::materialize(const Value* v, const std::vector<EtInt>& ints) {
  std::vector<int> parts;
  for (const EtInt& i : ints) parts.push_back(call("aten::scalar_tensor", "out", {int_value(i)}, DType::I64, {}));
  if (v->rank() == 0) return parts.at(0);
  return call("aten::stack", "out", {tensor_list(parts), int_value(0)}, DType::I64,
              {EtInt::of(static_cast<int64_t>(parts.size()))});
}

int EtLowering::constant_tensor(const Value* v) {
  const uint32_t index = constants_.add(v, bytes_of_(*v));
  if (const auto it = constant_values_.find(index); it != constant_values_.end()) return it->second;
  std::vector<int64_t> sizes;
  for (const Dim& d : v->shape) {
    HFX_CHECK(d.is_static(), "internal error: executorch: constant '", v->name, "' has a symbolic dim");
    sizes.push_back(d.value());
  }
  auto t = tensor_of(v->dtype, sizes, false);
  t->data_buffer_idx = index;
  etfb::KernelTypesUnion u;
  u.Set(std::move(*t));
  return constant_values_[index] = add_value(std::move(u));
}

int EtLowering::tensor(const Value* v) {
  if (const auto it = tensors_.find(v); it != tensors_.end()) return it->second;
  if (v->is_constant()) return tensors_[v] = constant_tensor(v);
  if (const auto it = shape_values_.find(v); it != shape_values_.end()) return tensors_[v] = materialize(v, it->second);
  fail("internal error: executorch: value '", v->name, "' used before it is computed");
}

// Which nodes read each value's data: an in-place update reads its positions and rows (and
// writes its buffer); ShapeOf reads only dims.
void EtLowering::note_readers(const std::set<const Node*>& needed) {
  for (const Node* n : graph_.order) {
    if (!needed.count(n) || n->op == OpKind::ShapeOf) continue;
    if (const auto it = in_place_.find(n); it != in_place_.end()) {
      readers_[it->second].push_back(n);
      readers_[n->inputs[2]].push_back(n);
      continue;
    }
    for (const Value* v : n->inputs)
      if (v) readers_[v].push_back(n);
  }
}

// A tensor of the method's inputs or outputs whose memory the caller provides.
int EtLowering::unplanned(int id) {
  planned_.erase(std::remove(planned_.begin(), planned_.end(), id), planned_.end());
  return id;
}

void EtLowering::lower_graph() {
  for (const Value* v : graph_.inputs) {
    const int id = new_tensor(v->dtype, bounds(v->shape));
    tensors_[v] = id;
    if (is_buffer(v)) pinned_.insert(id);
    else plan_->inputs.push_back(planned_io_ ? id : unplanned(id));
  }
  const std::set<const Node*> needed = needed_nodes();
  note_readers(needed);
  auto lower_on_kernels = [&](const Node& n) {
    const EtOpRule& rule = et_rule(n.op);
    if (!rule.lower) fail("internal error: executorch: no lowering for ", op_name(n.op), " (", n.name, ")");
    rule.lower(*this, n);
  };
  // With XNNPACK, each run of consecutive nodes it runs is one delegate (a run that only moves
  // data stays on the kernels, where reshapes are views).
  std::vector<const Node*> run;
  auto flush = [&] {
    const bool computes = std::any_of(run.begin(), run.end(), [](const Node* n) { return !xnn_rule(*n)->moves_data; });
    if (computes) delegate_group(run);
    else
      for (const Node* n : run) lower_on_kernels(*n);
    run.clear();
  };
  for (const Node* n : graph_.order) {
    if (!needed.count(n)) continue;
    if (lower_shape_arithmetic(*n)) continue;
    if (xnnpack_ && xnn_rule(*n) && !runs_hfexport_attention(*n)) {
      run.push_back(n);
      continue;
    }
    flush();
    lower_on_kernels(*n);
  }
  flush();
  add_outputs();  // first: an output that is the state as read is cloned before the state is replaced
  for (const StatePair* pair : replaced_)
    kernel_in_place("aten::copy_", "", {tensor(pair->input), tensor(pair->output), bool_value(false)});
  plan_memory();
  auto chain = std::make_unique<etfb::ChainT>();
  chain->inputs = plan_->inputs;
  chain->outputs = plan_->outputs;
  chain->instructions = std::move(instructions_);
  plan_->chains.push_back(std::move(chain));
  plan_->container_meta_type = std::make_unique<etfb::ContainerMetadataT>();
  plan_->container_meta_type->encoded_inp_str = flat_tuple_spec(plan_->inputs.size(), true);
  plan_->container_meta_type->encoded_out_str = flat_tuple_spec(plan_->outputs.size(), false);
}

void EtLowering::add_outputs() {
  // The caller's cache comes back first and last, as the same tensors (written in place).
  if (!planned_io_)
    for (const Value* v : cache_inputs_) plan_->outputs.push_back(tensor(v));
  for (const Value* v : graph_.outputs) {
    if (!returned(v)) continue;
    int id = tensor(v);
    // An output must be a tensor the method computes, once: inputs and constants are copied.
    const bool computed = std::find(planned_.begin(), planned_.end(), id) != planned_.end() &&
                          std::find(plan_->inputs.begin(), plan_->inputs.end(), id) == plan_->inputs.end();
    if (!computed || std::find(plan_->outputs.begin(), plan_->outputs.end(), id) != plan_->outputs.end())
      id = call("aten::clone", "out", {id, null_value()}, v->dtype, bounds(v->shape));
    plan_->outputs.push_back(planned_io_ ? id : unplanned(id));
  }
  if (!planned_io_)
    for (const Value* v : cache_inputs_) plan_->outputs.push_back(tensor(v));
}

// Greedy by size, largest first: each tensor takes the lowest offset that overlaps no tensor
// alive at the same time. A tensor lives from the instruction that writes it to its last reader
// (a view's readers read it too); inputs from the start, outputs to the end.
void EtLowering::plan_memory() {
  std::map<int, std::pair<int, int>> life;
  for (int id : planned_) life[id] = {INT_MAX, -1};
  auto touch = [&](int id, int at) {
    if (const auto source = view_sources_.find(id); source != view_sources_.end()) id = source->second;
    const auto it = life.find(id);
    if (it == life.end()) return;
    it->second.first = std::min(it->second.first, at);
    it->second.second = std::max(it->second.second, at);
  };
  for (int id : plan_->inputs) touch(id, -1);
  for (size_t i = 0; i < instructions_.size(); ++i) {
    const auto& instr = instructions_[i]->instr_args;
    const std::vector<int>& args = instr.AsKernelCall() ? instr.AsKernelCall()->args : instr.AsDelegateCall()->args;
    for (int arg : args) {
      touch(arg, static_cast<int>(i));
      const etfb::EValueT& ev = *plan_->values[static_cast<size_t>(arg)];
      if (const auto* list = ev.val.AsTensorList())
        for (int t : list->items) touch(t, static_cast<int>(i));
      if (const auto* list = ev.val.AsOptionalTensorList())
        for (int t : list->items) touch(t, static_cast<int>(i));
    }
  }
  for (int id : plan_->outputs) touch(id, INT_MAX - 1);
  for (int id : pinned_) touch(id, -1), touch(id, INT_MAX);
  std::vector<int> order = planned_;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return planned_bytes_[a] > planned_bytes_[b]; });
  struct Placed {
    uint64_t offset, end;
    int first, last;
  };
  std::vector<Placed> placed;
  uint64_t arena = 0;
  for (int id : order) {
    const auto [first, last] = life[id];
    const uint64_t bytes = (std::max<uint64_t>(planned_bytes_[id], 1) + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment;
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (const Placed& p : placed)
      if (p.first <= last && first <= p.last) busy.emplace_back(p.offset, p.end);
    std::sort(busy.begin(), busy.end());
    uint64_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + bytes <= begin) break;
      offset = std::max(offset, end);
    }
    placed.push_back({offset, offset + bytes, first, last});
    arena = std::max(arena, offset + bytes);
    auto* t = plan_->values[static_cast<size_t>(id)]->val.AsTensor();
    t->allocation_info = std::make_unique<etfb::AllocationDetailsT>();
    t->allocation_info->memory_id = 1;
    t->allocation_info->memory_offset_low = static_cast<uint32_t>(offset & 0xffffffffu);
    t->allocation_info->memory_offset_high = static_cast<uint32_t>(offset >> 32);
  }
  // Slack past the last tensor: XNNPACK's kernels may read a few bytes beyond their inputs.
  plan_->non_const_buffer_sizes = {0, static_cast<int64_t>(arena + kPlanAlignment)};
}

std::unique_ptr<etfb::ExecutionPlanT> EtLowering::take_plan() { return std::move(plan_); }

}  // namespace hfx
