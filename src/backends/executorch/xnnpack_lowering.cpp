#include "backends/executorch/xnnpack_lowering.h"
#include "backends/rule_table.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace hfx {
namespace {

OpRuleTable<XnnOpRule>& xnn_rules() {
  static OpRuleTable<XnnOpRule> rules("XNNPACK");
  return rules;
}

constexpr size_t kMaxDims = 6;  // XNN_MAX_TENSOR_DIMS

}  // namespace

bool register_xnn_rule(OpKind op, XnnOpRule rule) { return xnn_rules().add(op, rule); }

const XnnOpRule* xnn_rule(const Node& n) {
  const XnnOpRule* rule = xnn_rules().find(n.op);
  return rule && rule->accepts(n) ? rule : nullptr;
}

bool reshapable(const Shape& s) {
  size_t dynamic = 0;
  for (const Dim& d : s) dynamic += XnnLowering::dynamic(d) ? 1 : 0;
  return dynamic <= 1 && s.size() <= kMaxDims;
}

bool all_float32(const Node& n) {
  for (const std::vector<Value*>* values : {&n.inputs, &n.outputs})
    for (const Value* v : *values)
      if (v && (v->dtype != DType::F32 || v->rank() > kMaxDims)) return false;
  return true;
}

XnnLowering::XnnLowering(EtLowering& et, const std::vector<const Node*>& group)
    : et(et), members_(group.begin(), group.end()) {}

std::vector<int64_t> XnnLowering::dims(const Shape& s) const {
  std::vector<int64_t> out;
  for (const EtInt& d : et.bounds(s)) out.push_back(d.upper);
  return out;
}

std::vector<int64_t> XnnLowering::dims(const Value* v) const { return dims(v->shape); }

std::vector<int64_t> XnnLowering::reshape_target(const Shape& s) {
  std::vector<int64_t> out;
  for (const Dim& d : s) out.push_back(dynamic(d) ? 0 : upper(d));
  return out;
}

uint32_t XnnLowering::value(const Value* v) {
  if (const auto it = ids_.find(v); it != ids_.end()) return it->second;
  HFX_CHECK(!v->producer || !members_.count(v->producer), "internal error: executorch: XNNPACK value '", v->name,
            "' read before it is made");
  HFX_CHECK(v->dtype == DType::F32, "internal error: executorch: XNNPACK input '", v->name, "' is not float32");
  if (v->is_constant()) return ids_[v] = g.named_constant(XnnFloat::F32, et.named_weight(v));
  inputs_.push_back(et.tensor(v));
  return ids_[v] = g.external_input(XnnFloat::F32, dims(v));
}

uint32_t XnnLowering::prepared(int tensor, const std::vector<int64_t>& dims) {
  inputs_.push_back(tensor);
  return g.external_input(XnnFloat::F32, dims);
}

uint32_t XnnLowering::out(const Node& n, size_t i) {
  const Value* v = n.outputs.at(i);
  if (et.read_outside(v, members_)) {
    outputs_.push_back(v);
    return ids_[v] = g.external_output(XnnFloat::F32, dims(v));
  }
  return ids_[v] = g.internal(XnnFloat::F32, dims(v));
}

void XnnLowering::finish() {
  const uint32_t segment = et.add_payload(g.finish());
  std::vector<int> args = inputs_;
  for (const Value* v : outputs_) {
    const int t = et.new_tensor(v->dtype, et.bounds(v->shape));
    et.define(v, t);
    args.push_back(t);
  }
  et.emit_delegate(segment, std::move(args));
}

void EtLowering::delegate_group(const std::vector<const Node*>& group) {
  XnnLowering x(*this, group);
  for (const Node* n : group) xnn_rule(*n)->lower(x, *n);
  x.finish();
}

bool EtLowering::read_outside(const Value* v, const std::set<const Node*>& group) const {
  if (std::find(graph_.outputs.begin(), graph_.outputs.end(), v) != graph_.outputs.end()) return true;
  const auto it = readers_.find(v);
  if (it == readers_.end()) return false;
  for (const Node* r : it->second)
    if (!group.count(r)) return true;
  return false;
}

int EtLowering::additive_mask(const Value* mask, int64_t groups) {
  const auto key = std::make_pair(mask, groups);
  if (const auto it = additive_masks_.find(key); it != additive_masks_.end()) return it->second;
  const std::vector<EtInt> m = sym_ints(mask->shape);  // [B, 1, S, T]
  const int zero = call("aten::scalar_tensor", "out", {double_value(0.0)}, DType::F32, {});
  const int lowest =
      call("aten::scalar_tensor", "out", {double_value(std::numeric_limits<float>::lowest())}, DType::F32, {});
  int added = call("aten::where", "self_out", {tensor(mask), zero, lowest}, DType::F32, m);
  if (groups > 1) {
    const std::vector<EtInt> repeated = {m[0], m[1], EtInt::of(groups), m[2], m[3]};
    const int one = view(added, {m[0], m[1], EtInt::of(1), m[2], m[3]}, DType::F32);
    added = call("aten::expand_copy", "out", {one, int_list(repeated), bool_value(false)}, DType::F32, repeated);
    added = view(added, {m[0], m[1], arith("mul", EtInt::of(groups), m[2]), m[3]}, DType::F32);
  }
  return additive_masks_[key] = added;
}

}  // namespace hfx
