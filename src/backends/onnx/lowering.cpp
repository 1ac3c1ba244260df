#include "backends/onnx/lowering.h"
#include "backends/rule_table.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "ir/builder.h"

namespace hfx {

OnnxOpProfile parse_onnx_op_profile(const std::string& name, const std::string& field) {
  if (name == "standard" || name.empty()) return OnnxOpProfile::Standard;
  if (name == "ort") return OnnxOpProfile::Ort;
  if (name == "ort-gqa") return OnnxOpProfile::OrtGqa;
  fail(field, ": '", name, "' is not a profile (standard: ai.onnx ops only; ort: onnxruntime contrib ops; "
       "ort-gqa: ort with GroupQueryAttention)");
}

int32_t onnx_type(DType t) {
  switch (t) {
    case DType::F32: return onnx::TensorProto::FLOAT;
    case DType::F16: return onnx::TensorProto::FLOAT16;
    case DType::BF16: return onnx::TensorProto::BFLOAT16;
    case DType::F64: return onnx::TensorProto::DOUBLE;
    case DType::I64: return onnx::TensorProto::INT64;
    case DType::I32: return onnx::TensorProto::INT32;
    case DType::I16: return onnx::TensorProto::INT16;
    case DType::I8: return onnx::TensorProto::INT8;
    case DType::U8: return onnx::TensorProto::UINT8;
    case DType::Bool: return onnx::TensorProto::BOOL;
  }
  fail("internal error: dtype");
}

void set_value_info(onnx::ValueInfoProto* info, const std::string& name, DType dtype, const Shape& shape) {
  info->set_name(name);
  auto* tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(onnx_type(dtype));
  auto* s = tensor->mutable_shape();
  for (const Dim& d : shape) {
    auto* dim = s->add_dim();
    if (d.is_static()) dim->set_dim_value(d.value());
    else dim->set_dim_param(d.symbol()->name);
  }
}

void attr_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void attr_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

void attr_float(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

std::string Lowering::float_scalar(float value, DType dtype) {
  auto* t = g_.add_initializer();
  t->set_name("const/f_" + std::to_string(++counter_));
  t->set_data_type(onnx_type(dtype));
  std::string raw(dtype_size(dtype), '\0');
  convert_floats(&value, DType::F32, raw.data(), dtype, 1);
  t->set_raw_data(raw);
  return t->name();
}

std::string Lowering::int32_scalar(int32_t value) {
  auto* t = g_.add_initializer();
  t->set_name("const/i32_" + std::to_string(++counter_));
  t->set_data_type(onnx::TensorProto::INT32);
  t->add_int32_data(value);
  return t->name();
}

std::string Lowering::half_table(const Value* table) {
  std::string& name = half_tables_[table];
  if (name.empty()) {
    const int64_t rot = table->shape.back().value();
    name = temp(table->name + "/half");
    node("Slice", {table->name, ints({0}), ints({rot / 2}), ints({-1})}, {name});
  }
  return name;
}

// Masked scores must stay finite (fully padded rows would otherwise turn NaN and poison later
// layers), so the bool mask becomes an additive one holding the dtype's lowest value.
std::string Lowering::additive_mask(const Value* mask, DType dtype) {
  std::string& name = additive_masks_[{mask, dtype}];
  if (name.empty()) {
    name = temp(mask->name + "/additive");
    const float lowest = dtype == DType::F16 ? -65504.0f : std::numeric_limits<float>::lowest();
    node("Where", {mask->name, float_scalar(0.0f, dtype), float_scalar(lowest, dtype)}, {name});
  }
  return name;
}

namespace {

// x = Transpose(perm 0 2 1 3) of a rank-4 value: that value ([B, S, N, D] for heads), else null.
const Value* head_transpose_source(const Value* x) {
  const Node* t = x->producer;
  if (!t || t->op != OpKind::Transpose || x->rank() != 4) return nullptr;
  return t->attrs_as<PermAttrs>().perm == std::vector<int64_t>{0, 2, 1, 3} ? t->inputs[0] : nullptr;
}

// Whether `flat` [B, S, N * D] is `heads` [B, S, N, D] with its last two dims merged.
bool merges_heads(const Value* flat, const Value* heads) {
  if (flat->rank() != 3 || heads->rank() != 4 || !flat->shape[2].is_static() || !heads->shape[2].is_static() ||
      !heads->shape[3].is_static())
    return false;
  return flat->shape[0] == heads->shape[0] && flat->shape[1] == heads->shape[1] &&
         flat->shape[2].value() == heads->shape[2].value() * heads->shape[3].value();
}

}  // namespace

std::string Lowering::bsh(const Value* x) {
  if (const auto it = bsh_names_.find(x); it != bsh_names_.end()) return it->second;
  const int64_t width = x->shape[1].value() * x->shape[3].value();
  if (const Value* y = head_transpose_source(x)) {
    const std::string r = temp(x->name + "/bsh");
    node("Reshape", {name_of(y), ints({0, 0, width})}, {r});
    return bsh_names_[x] = r;
  }
  const std::string t = temp(x->name + "/bsnd"), r = temp(x->name + "/bsh");
  attr_ints(node("Transpose", {name_of(x)}, {t}), "perm", {0, 2, 1, 3});
  node("Reshape", {t, ints({0, 0, width})}, {r});
  return r;
}

const Value* Lowering::transposed_back(const Node& attention) const {
  const auto& readers = consumers(attention.outputs[0]);
  if (!reads_bsh(attention) || readers.size() != 1) return nullptr;
  const Value* out = readers[0]->outputs[0];
  return head_transpose_source(out) == attention.outputs[0] ? out : nullptr;
}

// Decides, before lowering, which attentions take BSH tensors ([B, S, N * D]: GroupQueryAttention,
// and Attention-23 in its 3-D form) and which values around them stay in that layout, so that no
// [B, N, S, D] round trip is emitted for them.
void Lowering::plan_bsh_layouts(const Graph& graph, bool gqa) {
  // GQA takes the (causal) mask as its bias, and without an append to absorb it needs keys
  // exactly as long as the queries (no cache).
  for (const Node* n : graph.order) {
    if (!gqa || n->op != OpKind::Attention || !gqa_candidate(*n)) continue;
    const Node* k = n->inputs[1]->producer;
    const bool cached = k && k->op == OpKind::KVAppend && fused(k);
    if (cached || n->inputs[1]->shape[2] == n->inputs[0]->shape[2]) gqa_attentions_.insert(n);
  }
  // Attention-23 takes q, k and v in 3-D (q_num_heads / kv_num_heads set) when each is a head
  // split of a [B, S, N * D] value (an encoder's, a forward without cache or rotary): the
  // splits and the merge after it are then not emitted (onnxruntime runs the 3-D form faster).
  for (const Node* n : graph.order) {
    if (n->op != OpKind::Attention || gqa_attentions_.count(n) || n->input(4) || n->input(5)) continue;
    if (head_transpose_source(n->inputs[0]) && head_transpose_source(n->inputs[1]) &&
        head_transpose_source(n->inputs[2]))
      flat_attentions_.insert(n);
  }
  // Readers that take a value in BSH: such an attention (q, k, v without a cache), or a fused
  // append feeding a GQA (the fresh rows).
  auto reads_bsh = [&](const Node* reader, const Value* v) {
    if (this->reads_bsh(*reader)) return v != reader->input(3);
    if (reader->op != OpKind::KVAppend || !fused(reader) || reader->inputs[1] != v) return false;
    const auto& next = consumers(reader->outputs[0]);
    return next.size() == 1 && gqa_attentions_.count(next[0]);
  };
  auto all_read_bsh = [&](const Value* v) {
    const auto& readers = consumers(v);
    return !readers.empty() && std::all_of(readers.begin(), readers.end(), [&](const Node* r) { return reads_bsh(r, v); });
  };
  for (const Node* n : graph.order)
    if (n->op == OpKind::RoPE && head_transpose_source(n->inputs[0]) && all_read_bsh(n->outputs[0]))
      bsh_ropes_.insert(n);
  const std::set<const Value*> outputs(graph.outputs.begin(), graph.outputs.end());
  for (const Node* n : graph.order) {
    // A graph output (a prefill's present keys) is emitted whatever reads it.
    if (n->op != OpKind::Transpose || !head_transpose_source(n->outputs[0]) || outputs.count(n->outputs[0])) continue;
    const auto& readers = consumers(n->outputs[0]);
    const bool bsh_only = !readers.empty() && std::all_of(readers.begin(), readers.end(), [&](const Node* r) {
      return bsh_ropes_.count(r) || reads_bsh(r, n->outputs[0]);
    });
    if (!bsh_only) continue;
    fused_.insert(n);  // its readers take the [B, S, N, D] source directly
    // ... or, when that source only splits a [B, S, N * D] value into heads, that value itself.
    const Value* heads = n->inputs[0];
    const Node* split = heads->producer;
    const bool only_here = consumers(heads).size() == 1 && !outputs.count(heads);
    if (split && split->op == OpKind::Reshape && only_here && merges_heads(split->inputs[0], heads)) {
      fused_.insert(split);
      bsh_names_[n->outputs[0]] = name_of(split->inputs[0]);
    }
  }
  plan_fused_rotaries(graph);
  std::set<const Node*> bsh_attentions = gqa_attentions_;
  bsh_attentions.insert(flat_attentions_.begin(), flat_attentions_.end());
  for (const Node* n : bsh_attentions) {
    const Value* back = transposed_back(*n);
    if (!back) continue;
    fused_.insert(back->producer);
    const auto& readers = consumers(back);
    if (readers.size() == 1 && readers[0]->op == OpKind::Reshape && merges_heads(readers[0]->outputs[0], back)) {
      fused_.insert(readers[0]);  // GQA's flat result is that reshape's result
      flat_results_[n] = readers[0]->outputs[0];
    }
  }
}

Lowering::Lowering(onnx::GraphProto& g, const Graph& graph, OnnxOpProfile profile,
                   std::set<const Value*> transposed_weights)
    : g_(g), profile_(profile), transposed_(std::move(transposed_weights)) {
  for (const Node* n : graph.order) {
    for (const Value* in : n->inputs)
      if (in) consumers_[in].push_back(n);
    appends_ += n->op == OpKind::KVAppend;
  }
  plan_splits(graph);
  const bool contrib = profile_has_contrib_ops(profile_);
  // GroupQueryAttention serves the whole graph or none of it: the runner binds every cache pair
  // one way. Every family's attentions share one head size, so a refusal holds for all of them.
  bool gqa = profile_ == OnnxOpProfile::OrtGqa;
  for (const Node* n : graph.order) {
    if (!gqa || n->op != OpKind::Attention) continue;
    gqa = gqa_refusal(*n).empty();  // the ort-gqa passes recorded why not (check_gqa_preconditions)
  }
  // Decide fusions up front: nodes absorbed into a later fused op are skipped when reached.
  for (const Node* n : graph.order) {
    if (!contrib) break;
    if (n->op == OpKind::RMSNorm || n->op == OpKind::LayerNorm)
      if (const Node* add = fusable_residual(*n)) fused_.insert(add);
    if (n->op == OpKind::Attention) {
      const Node* k = n->inputs[1]->producer;
      const Node* v = n->inputs[2]->producer;
      auto only_feeds = [&](const Node* p) {
        return p && p->op == OpKind::KVAppend && consumers(p->outputs[0]).size() == 1;
      };
      if (gqa && only_feeds(k) && only_feeds(v)) {
        fused_.insert({k, v});
        fused_appends_ += 2;
      }
    }
  }
  plan_bsh_layouts(graph, gqa);
}

bool gqa_candidate(const Node& attention) {
  const Node* k = attention.inputs[1]->producer;
  return attention.input(3) && !attention.input(5) && attention.attrs_as<AttentionAttrs>().causal && ((k && k->op == OpKind::KVAppend) || attention.inputs[1]->shape[2] == attention.inputs[0]->shape[2]);
}

// onnxruntime 1.32's CPU kernel (contrib_ops/cpu/bert/group_query_attention) rejects a head size
// that is not a multiple of 8 when it runs, not when the session loads.
std::string gqa_refusal(const Node& attention) {
  const Node* k = attention.inputs[1]->producer;
  const bool over_cache = k && k->op == OpKind::KVAppend;
  if (!gqa_candidate(attention))  // fine as plain attention, unless it reads the cache GQA would own
    return over_cache && !attention.attrs_as<AttentionAttrs>().causal
               ? "the mask is not causal-only (image tokens attend to later ones of their image)"
               : "";
  const int64_t head_size = attention.inputs[0]->shape[3].value();
  if (head_size % 8 != 0) return "head size " + std::to_string(head_size) + " is not a multiple of 8";
  return {};
}

// A packed Linear's result is read by one Slice per original Linear, each a static range of the
// last axis; when they tile it exactly, one Split produces them all (one pass instead of several).
void Lowering::plan_splits(const Graph& graph) {
  std::set<const Value*> seen;
  for (const Node* n : graph.order) {
    if (n->op != OpKind::Slice || !seen.insert(n->inputs[0]).second) continue;
    const Value* packed = n->inputs[0];
    const Dim last = packed->shape.empty() ? Dim(int64_t{0}) : packed->shape.back();
    const auto& readers = consumers(packed);
    if (!last.is_static() || readers.size() < 2) continue;
    std::vector<const Node*> parts;
    for (const Node* r : readers) {
      const int64_t axis = r->op == OpKind::Slice ? r->attrs_as<SliceAttrs>().axis : 0;
      const bool last_axis = r->op == OpKind::Slice && (axis == -1 || axis == static_cast<int64_t>(packed->rank()) - 1);
      if (!last_axis) break;
      parts.push_back(r);
    }
    if (parts.size() != readers.size()) continue;
    auto bounds = [&](const Node* r) {
      const SliceAttrs& a = r->attrs_as<SliceAttrs>();
      return std::make_pair(a.start, std::min(a.end, last.value()));
    };
    std::sort(parts.begin(), parts.end(), [&](const Node* a, const Node* b) { return bounds(a) < bounds(b); });
    int64_t covered = 0;
    for (const Node* r : parts) {
      const auto [start, end] = bounds(r);
      if (start != covered || end <= start) break;
      covered = end;
    }
    if (covered != last.value()) continue;
    split_groups_[n] = parts;
    for (const Node* r : parts)
      if (r != n) fused_.insert(r);
  }
}

// GroupQueryAttention rotates q and the keys it appends itself (do_rotary) by cache slot, from
// cos/sin caches: a static table's RoPE on both is absorbed when it rotates the whole head. Slots
// and transformers' positions differ by each row's left padding, a per-row offset that rotary
// attention scores do not see (they depend on position differences only).
void Lowering::plan_fused_rotaries(const Graph& graph) {
  auto table_of = [](const Value* v, bool sine) -> const Node* {
    const Node* t = v->producer;
    return t && t->op == OpKind::RoPETable && t->attrs_as<RoPETableAttrs>().sine == sine ? t : nullptr;
  };
  for (const Node* n : graph.order) {
    if (n->op != OpKind::Attention || !gqa_attentions_.count(n)) continue;
    const Node* k_append = n->inputs[1]->producer;
    if (!k_append || k_append->op != OpKind::KVAppend || !fused(k_append)) continue;
    const Node* q_rope = n->inputs[0]->producer;
    const Node* k_rope = k_append->inputs[1]->producer;
    auto absorbable = [&](const Node* r) {
      return r && r->op == OpKind::RoPE && bsh_ropes_.count(r) && consumers(r->outputs[0]).size() == 1 &&
             table_of(r->inputs[1], false) && table_of(r->inputs[2], true) &&
             r->inputs[1]->shape.back() == r->inputs[0]->shape.back();
    };
    if (!absorbable(q_rope) || !absorbable(k_rope) || q_rope->inputs[1] != k_rope->inputs[1] ||
        q_rope->inputs[2] != k_rope->inputs[2] ||
        q_rope->attrs_as<RoPEAttrs>().interleaved != k_rope->attrs_as<RoPEAttrs>().interleaved)
      continue;
    // The CPU kernel's own rotary needs it (checked when it runs).
    if (const int64_t head_size = q_rope->inputs[0]->shape.back().value(); head_size % 16 != 0) {
      if (fallbacks_.empty() || fallbacks_.back().kernel != "GroupQueryAttention do_rotary")
        fallbacks_.push_back({"GroupQueryAttention do_rotary", "head size " + std::to_string(head_size) +
                              " is not a multiple of 16", "RotaryEmbedding before GroupQueryAttention"});
      continue;
    }
    fused_rotaries_[n] = {q_rope, k_rope};
    fused_.insert({q_rope, k_rope});
  }
  // A table whose every reader was absorbed is not emitted.
  for (const Node* n : graph.order) {
    if (n->op != OpKind::RoPETable) continue;
    const auto& readers = consumers(n->outputs[0]);
    if (!readers.empty() && std::all_of(readers.begin(), readers.end(), [&](const Node* r) { return fused(r); }))
      fused_.insert(n);
  }
}

std::string Lowering::rope_angles(const Value* positions, const Value* inv_freq) {
  std::string& name = rope_angles_[{positions, inv_freq}];
  if (!name.empty()) return name;
  const std::string base = positions->name + "/rope_angles";
  const std::string f = temp(base), col = temp(base), freqs = temp(base);
  attr_int(node("Cast", {name_of(positions)}, {f}), "to", onnx::TensorProto::FLOAT);
  node("Unsqueeze", {f, ints({-1})}, {col});
  node("Mul", {col, name_of(inv_freq)}, {freqs});
  name = temp(base);
  attr_int(node("Concat", {freqs, freqs}, {name}), "axis", -1);
  return name;
}

std::string Lowering::rotary_cache(const Node& table, const Value* mask, DType dtype) {
  const RoPETableAttrs& a = table.attrs_as<RoPETableAttrs>();
  const Value* inv_freq = table.inputs[1];
  std::string& name = rotary_caches_[{mask, inv_freq, a.scaling, a.sine, dtype}];
  if (!name.empty()) return name;
  const std::string base = mask->name + (a.sine ? "/sin_cache" : "/cos_cache");
  std::string& angles = slot_angles_[{mask, inv_freq}];  // [T, R/2], shared by cos and sin
  if (angles.empty()) {
    const std::string shape = temp(base), slots = temp(base), count = temp(base), f = temp(base), col = temp(base);
    node("Shape", {mask->name}, {shape});
    node("Gather", {shape, ints({3}, true)}, {count});
    node("Range", {ints({0}, true), count, ints({1}, true)}, {slots});
    attr_int(node("Cast", {slots}, {f}), "to", onnx::TensorProto::FLOAT);
    node("Unsqueeze", {f, ints({1})}, {col});
    angles = temp(base);
    node("Mul", {col, name_of(inv_freq)}, {angles});  // GQA's caches hold the first half only
  }
  const std::string wave = temp(base);
  node(a.sine ? "Sin" : "Cos", {angles}, {wave});
  std::string out = wave;
  if (a.scaling != 1.0) {
    out = temp(base);
    node("Mul", {wave, float_scalar(static_cast<float>(a.scaling), DType::F32)}, {out});
  }
  if (dtype != DType::F32) {
    const std::string cast = temp(base);
    attr_int(node("Cast", {out}, {cast}), "to", onnx_type(dtype));
    out = cast;
  }
  return name = out;
}

const std::vector<const Node*>& Lowering::consumers(const Value* v) const {
  static const std::vector<const Node*> none;
  const auto it = consumers_.find(v);
  return it == consumers_.end() ? none : it->second;
}

const Node* Lowering::fusable_residual(const Node& norm) const {
  const Node* add = norm.inputs[0]->producer;
  if (!add || add->op != OpKind::Add || !(add->inputs[0]->shape == add->inputs[1]->shape)) return nullptr;
  if (add->inputs[0]->is_constant() || add->inputs[1]->is_constant()) return nullptr;
  // Other readers of the sum take the fused op's output 3; a second norm would need a second one.
  int norms = 0;
  for (const Node* c : consumers(norm.inputs[0])) norms += c->op == OpKind::RMSNorm || c->op == OpKind::LayerNorm;
  return norm.inputs[0]->rank() == 3 && norms == 1 ? add : nullptr;
}

std::string Lowering::constant_name(const Value* v, bool transposed) {
  const auto key = std::make_pair(v, transposed);
  if (const auto it = constant_names_.find(key); it != constant_names_.end()) return it->second;
  std::string name = v->name + (transposed ? ".T" : "");
  constant_names_[key] = name;
  inits_.push_back({v, transposed, name});
  return name;
}

std::string Lowering::reshaped_constant(const Value* v, std::vector<int64_t> dims) {
  std::string name = v->name + ".view";
  for (int64_t d : dims) name += "_" + std::to_string(d);
  if (std::none_of(inits_.begin(), inits_.end(), [&](const Init& i) { return i.name == name; }))
    inits_.push_back({v, false, name, std::move(dims)});
  return name;
}

std::string Lowering::ints(const std::vector<int64_t>& data, bool scalar) {
  auto* t = g_.add_initializer();
  t->set_name("const/i64_" + std::to_string(++counter_));
  t->set_data_type(onnx::TensorProto::INT64);
  if (!scalar) t->add_dims(static_cast<int64_t>(data.size()));
  for (int64_t x : data) t->add_int64_data(x);
  return t->name();
}

onnx::NodeProto* Lowering::node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                               const std::string& domain) {
  auto* n = g_.add_node();
  n->set_op_type(op);
  if (!domain.empty()) {
    n->set_domain(domain);
    uses_contrib_ = true;
  }
  n->set_name(out.front());
  for (auto& i : in) n->add_input(i);
  for (auto& o : out) n->add_output(o);
  return n;
}

namespace {

OpRuleTable<OnnxOpRule>& rules() {
  static OpRuleTable<OnnxOpRule> table("ONNX");
  return table;
}

}  // namespace

bool register_onnx_rule(OpKind op, OnnxRule lower, OnnxNative native, uint32_t owned_inputs) {
  return rules().add(op, {lower, native, owned_inputs});
}

const OnnxOpRule& onnx_rule(OpKind op) { return rules().get(op); }

bool maps_natively(const Node& n, OnnxOpProfile profile) {
  const OnnxOpRule& rule = onnx_rule(n.op);
  return rule.lower && (!rule.native || rule.native(n, profile));
}

void Lowering::lower(const Node& n) {
  if (fused_.count(&n)) return;
  const OnnxOpRule& rule = onnx_rule(n.op);
  if (!rule.lower) fail("internal error: ONNX backend cannot lower ", op_name(n.op));
  // Inputs the rule stores in a layout of its own (a transposed weight, a view) are not named here.
  OnnxNames in;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    in.push_back(!n.inputs[i] || (rule.owned_inputs >> i & 1) ? "" : name_of(n.inputs[i]));
  rule.lower(*this, n, in, n.outputs[0]->name);
}

}  // namespace hfx
