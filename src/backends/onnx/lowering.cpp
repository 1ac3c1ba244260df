#include "backends/onnx/lowering.h"

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


namespace {

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

}  // namespace

bool maps_natively(const Node& n, OnnxOpProfile profile) {
  switch (n.op) {
    case OpKind::QuantizedLinear:
      return profile_has_contrib_ops(profile);
    case OpKind::Linear: case OpKind::Embedding: case OpKind::GELU:
    case OpKind::RMSNorm: case OpKind::RoPE: case OpKind::Attention: case OpKind::KVAppend:
      return true;
    default:
      return false;
  }
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

// RMSNormalization-23 computes in float32 (stash_type 1) and casts back before the scale, as HF.
// The ort profile uses onnxruntime's SimplifiedLayerNormalization, its fast kernel for the same.
void Lowering::lower_rms_norm(const Node& n, const std::vector<std::string>& in, const std::string& out) {
  const bool ort = profile_has_contrib_ops(profile_);
  if (const Node* add = ort ? fusable_residual(n) : nullptr; add && fused_.count(add)) {
    // Output 3 is the residual sum the skipped Add would have produced.
    onnx::NodeProto* norm = node("SkipSimplifiedLayerNormalization",
                                 {name_of(add->inputs[0]), name_of(add->inputs[1]), in[1]},
                                 {out, "", "", add->outputs[0]->name}, "com.microsoft");
    attr_float(norm, "epsilon", static_cast<float>(n.attrs.f("epsilon")));
    return;
  }
  onnx::NodeProto* norm = node(ort ? "SimplifiedLayerNormalization" : "RMSNormalization", {in[0], in[1]}, {out});
  attr_int(norm, "axis", -1);
  attr_float(norm, "epsilon", static_cast<float>(n.attrs.f("epsilon")));
  attr_int(norm, "stash_type", 1);
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

// RotaryEmbedding-23 with per-token tables: cos/sin [B, S, R/2] (the IR's tables repeat the
// frequencies twice, HF-style, so the first half is taken once per table).
void Lowering::lower_rope(const Node& n, const std::vector<std::string>&, const std::string& out) {
  const Value* x = n.inputs[0];
  std::string cos = half_table(n.inputs[1]), sin = half_table(n.inputs[2]);
  if (n.inputs[1]->dtype != x->dtype) {
    const std::string c = temp(cos), s = temp(sin);
    attr_int(node("Cast", {cos}, {c}), "to", onnx_type(x->dtype));
    attr_int(node("Cast", {sin}, {s}), "to", onnx_type(x->dtype));
    cos = c, sin = s;
  }
  onnx::NodeProto* rope = node("RotaryEmbedding", {x->name, cos, sin}, {out});
  attr_int(rope, "interleaved", n.attrs.i("interleaved", 0));
  const int64_t rot = n.inputs[1]->shape.back().value();
  if (rot != x->shape.back().value()) attr_int(rope, "rotary_embedding_dim", rot);
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

// [B, N, S, D] -> [B, S, N * D], the layout GroupQueryAttention takes.
std::string Lowering::bsh(const Value* x) {
  const std::string t = temp(x->name + "/bsnd"), r = temp(x->name + "/bsh");
  attr_ints(node("Transpose", {name_of(x)}, {t}), "perm", {0, 2, 1, 3});
  node("Reshape", {t, ints({0, 0, x->shape[1].value() * x->shape[3].value()})}, {r});
  return r;
}

bool Lowering::lower_group_query_attention(const Node& n, const std::string& out) {
  const Value* mask = n.inputs.size() > 3 ? n.inputs[3] : nullptr;
  if (!mask) return false;
  const Node* k_append = n.inputs[1]->producer;
  const bool cached = k_append && fused_.count(k_append);
  const Node* v_append = cached ? n.inputs[2]->producer : nullptr;
  const Value* q = n.inputs[0];
  // Without an append to absorb, GQA needs keys exactly as long as the queries (no cache).
  if (!cached && !(n.inputs[1]->shape[2] == q->shape[2])) return false;
  const Value* k = cached ? k_append->inputs[1] : n.inputs[1];
  const Value* v = cached ? v_append->inputs[1] : n.inputs[2];
  // Every row's cache spans all T slots (left padding included), so seqlens_k = T - 1 for each
  // row and the causal rule matches the IR's; padding and windows arrive as the additive bias.
  auto& [seqlens, total] = gqa_lengths_[mask];
  if (seqlens.empty()) {
    const std::string shape = temp(mask->name + "/shape");
    node("Shape", {mask->name}, {shape});
    const std::string t64 = temp(mask->name + "/total64"), b64 = temp(mask->name + "/batch64");
    node("Gather", {shape, ints({3}, true)}, {t64});
    node("Gather", {shape, ints({0}, true)}, {b64});
    total = temp(mask->name + "/total");
    attr_int(node("Cast", {t64}, {total}), "to", onnx::TensorProto::INT32);
    const std::string last = temp(mask->name + "/last"), batch = temp(mask->name + "/batch");
    node("Sub", {total, int32_scalar(1)}, {last});
    node("Unsqueeze", {b64, ints({0})}, {batch});
    seqlens = temp(mask->name + "/seqlens_k");
    node("Expand", {last, batch}, {seqlens});
  }
  const int64_t heads = q->shape[1].value(), kv_heads = k->shape[1].value(), head_dim = q->shape[3].value();
  std::vector<std::string> inputs{bsh(q), bsh(k), bsh(v)};
  inputs.push_back(cached ? name_of(k_append->inputs[0]) : "");
  inputs.push_back(cached ? name_of(v_append->inputs[0]) : "");
  inputs.insert(inputs.end(), {seqlens, total, "", "", "", additive_mask(mask, q->dtype)});
  const std::string flat = temp(out + "/bsh");
  std::vector<std::string> outputs{flat};
  if (cached) outputs.insert(outputs.end(), {k_append->outputs[0]->name, v_append->outputs[0]->name});
  onnx::NodeProto* gqa = node("GroupQueryAttention", inputs, outputs, "com.microsoft");
  attr_int(gqa, "num_heads", heads);
  attr_int(gqa, "kv_num_heads", kv_heads);
  attr_float(gqa, "scale", static_cast<float>(n.attrs.f("scale")));
  if (const double cap = n.attrs.f("softcap", 0.0); cap > 0) attr_float(gqa, "softcap", static_cast<float>(cap));
  const std::string split = temp(out + "/bsnd");
  node("Reshape", {flat, ints({0, 0, heads, head_dim})}, {split});
  attr_ints(node("Transpose", {split}, {out}), "perm", {0, 2, 1, 3});
  return true;
}

void Lowering::lower_attention(const Node& n, const std::vector<std::string>& in, const std::string& out) {
  if (profile_ == OnnxOpProfile::OrtGqa && lower_group_query_attention(n, out)) return;
  const Value* q = n.inputs[0];
  std::vector<std::string> inputs{in[0], in[1], in[2]};
  if (n.inputs.size() > 3 && n.inputs[3]) inputs.push_back(additive_mask(n.inputs[3], q->dtype));
  onnx::NodeProto* attention = node("Attention", inputs, {out});
  attr_float(attention, "scale", static_cast<float>(n.attrs.f("scale")));
  if (const double cap = n.attrs.f("softcap", 0.0); cap > 0) attr_float(attention, "softcap", static_cast<float>(cap));
}

// onnxruntime's MatMulNBits reads the IR's layout as is: codes [N, K/g, g*bits/8], scales
// [N, K/g], no zero points (the default is the symmetric midpoint). accuracy_level 4 lets it
// quantize activations to int8 and use the integer dot-product units; 0 computes in float.
void Lowering::lower_quantized_linear(const Node& n, const std::vector<std::string>& in, const std::string& out) {
  const Value* codes = n.inputs[1];
  const bool bias = n.inputs.size() > 3 && n.inputs[3];
  const std::string mm = bias ? temp(out) : out;
  auto* m = node("MatMulNBits", {in[0], in[1], in[2]}, {mm}, "com.microsoft");
  attr_int(m, "K", n.inputs[0]->shape.back().value());
  attr_int(m, "N", codes->shape[0].value());
  attr_int(m, "bits", n.attrs.i("bits"));
  attr_int(m, "block_size", n.attrs.i("group_size"));
  attr_int(m, "accuracy_level", n.attrs.i("int8_compute") ? 4 : 0);
  if (bias) node("Add", {mm, in[3]}, {out});
}

Lowering::Lowering(onnx::GraphProto& g, const Graph& graph, OnnxOpProfile profile,
                   std::set<const Value*> transposed_weights)
    : g_(g), profile_(profile), transposed_(std::move(transposed_weights)) {
  for (const Node* n : graph.order)
    for (const Value* in : n->inputs)
      if (in) consumers_[in].push_back(n);
  graph_outputs_.insert(graph.outputs.begin(), graph.outputs.end());
  if (!profile_has_contrib_ops(profile_)) return;
  // Decide fusions up front: nodes absorbed into a later fused op are skipped when reached.
  for (const Node* n : graph.order) {
    if (n->op == OpKind::RMSNorm)
      if (const Node* add = fusable_residual(*n)) fused_.insert(add);
    if (n->op == OpKind::Attention) {
      const Node* k = n->inputs[1]->producer;
      const Node* v = n->inputs[2]->producer;
      auto only_feeds = [&](const Node* p) {
        return p && p->op == OpKind::KVAppend && consumers(p->outputs[0]).size() == 1;
      };
      if (profile_ == OnnxOpProfile::OrtGqa && only_feeds(k) && only_feeds(v)) fused_.insert({k, v});
    }
  }
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
  for (const Node* c : consumers(norm.inputs[0])) norms += c->op == OpKind::RMSNorm;
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

void Lowering::lower(const Node& n) {
  if (fused_.count(&n)) return;
  // Linear and Embedding read their weight in a stored layout of their own; name only the rest.
  const bool own_weight = n.op == OpKind::Linear || n.op == OpKind::Embedding;
  const size_t weight_index = n.op == OpKind::Linear ? 1 : 0;
  std::vector<std::string> in;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    in.push_back(!n.inputs[i] || (own_weight && i == weight_index) ? "" : name_of(n.inputs[i]));
  const std::string out = n.outputs[0]->name;
  const Value* x = n.inputs.empty() ? nullptr : n.inputs[0];
  switch (n.op) {
    case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Div: case OpKind::Pow:
    case OpKind::Max: case OpKind::Neg: case OpKind::Sqrt: case OpKind::Reciprocal: case OpKind::Exp:
    case OpKind::Tanh: case OpKind::Erf: case OpKind::Cos: case OpKind::Sin: case OpKind::Sigmoid:
    case OpKind::MatMul: case OpKind::Where: case OpKind::Equal: case OpKind::Less:
    case OpKind::LessOrEqual: case OpKind::Greater: case OpKind::And: case OpKind::Not:
    case OpKind::Range: case OpKind::Expand: case OpKind::BitwiseAnd:
      node(std::string(op_name(n.op)), in, {out});
      return;
    case OpKind::BitShiftRight:
      attr_string(node("BitShift", in, {out}), "direction", "RIGHT");
      return;
    case OpKind::Softmax:
      attr_int(node("Softmax", in, {out}), "axis", n.attrs.i("axis"));
      return;
    case OpKind::ReduceMean: case OpKind::ReduceMax: {
      const auto& axes = n.attrs.ints("axes");
      if (!axes.empty()) in.push_back(ints(axes));
      attr_int(node(std::string(op_name(n.op)), in, {out}), "keepdims", n.attrs.i("keepdims"));
      return;
    }
    case OpKind::Cast:
      attr_int(node("Cast", in, {out}), "to", onnx_type(n.outputs[0]->dtype));
      return;
    case OpKind::Reshape:
      node("Reshape", {in[0], ints(reshape_target(x->shape, n.outputs[0]->shape))}, {out});
      return;
    case OpKind::Transpose:
      attr_ints(node("Transpose", in, {out}), "perm", n.attrs.ints("perm"));
      return;
    case OpKind::Slice:
      node("Slice", {in[0], ints({n.attrs.i("start")}), ints({n.attrs.i("end")}), ints({n.attrs.i("axis")})}, {out});
      return;
    case OpKind::Concat:
      attr_int(node("Concat", in, {out}), "axis", n.attrs.i("axis"));
      return;
    case OpKind::Gather:
      attr_int(node("Gather", in, {out}), "axis", n.attrs.i("axis"));
      return;
    case OpKind::Unsqueeze:
      node("Unsqueeze", {in[0], ints(n.attrs.ints("axes"))}, {out});
      return;
    case OpKind::ScatterElements:
      attr_int(node("ScatterElements", in, {out}), "axis", n.attrs.i("axis"));
      return;
    case OpKind::ShapeOf:
      node("Shape", in, {out});
      return;
    case OpKind::Linear: {
      // MatMul against the weight stored transposed ([in, out]) at export time.
      const std::string w = constant_name(n.inputs[1], true);
      if (n.inputs.size() > 2 && n.inputs[2]) {
        const std::string mm = temp(out);
        node("MatMul", {in[0], w}, {mm});
        node("Add", {mm, in[2]}, {out});
      } else {
        node("MatMul", {in[0], w}, {out});
      }
      return;
    }
    case OpKind::QuantizedLinear:
      lower_quantized_linear(n, in, out);
      return;
    case OpKind::Embedding: {
      const Value* w = n.inputs[0];
      if (!transposed_.count(w)) {
        attr_int(node("Gather", {constant_name(w, false), in[1]}, {out}), "axis", 0);
        return;
      }
      // Tied embeddings: one [hidden, vocab] copy serves lm_head; gather columns and transpose back.
      const std::string cols = temp(out);
      attr_int(node("Gather", {constant_name(w, true), in[1]}, {cols}), "axis", 1);
      std::vector<int64_t> perm;
      for (size_t i = 1; i <= n.inputs[1]->rank(); ++i) perm.push_back(static_cast<int64_t>(i));
      perm.push_back(0);
      attr_ints(node("Transpose", {cols}, {out}), "perm", perm);
      return;
    }
    case OpKind::RMSNorm:
      lower_rms_norm(n, in, out);
      return;
    case OpKind::RoPE:
      lower_rope(n, in, out);
      return;
    case OpKind::Attention:
      lower_attention(n, in, out);
      return;
    case OpKind::KVAppend:
      attr_int(node("Concat", in, {out}), "axis", 2);
      return;
    case OpKind::GELU:
      attr_string(node("Gelu", in, {out}), "approximate", n.attrs.s("approximate"));
      return;
    default:
      fail("internal error: ONNX backend cannot lower ", op_name(n.op));
  }
}



}  // namespace hfx
