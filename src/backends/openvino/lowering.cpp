#include "backends/openvino/lowering.h"
#include "backends/rule_table.h"

#include "core/error.h"

namespace hfx {

std::string ov_shape_attr(const Shape& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + (s[i].is_static() ? std::to_string(s[i].value()) : "?");
  return out;
}

std::string ov_shape_attr(const std::vector<int64_t>& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out;
}

namespace {

OpRuleTable<OvOpRule>& rules() {
  static OpRuleTable<OvOpRule> table("OpenVINO");
  return table;
}

}  // namespace

bool register_ov_rule(OpKind op, OvRule lower, OvNative native, uint32_t owned_inputs) {
  return rules().add(op, {lower, native, owned_inputs});
}

const OvOpRule& ov_rule(OpKind op) { return rules().get(op); }

bool ov_maps_natively(const Node& n) {
  const OvOpRule& rule = ov_rule(n.op);
  return rule.lower && (!rule.native || rule.native(n));
}

OvPort OvLowering::constant(const Value* v, const Value* stored, const std::string& element_type,
                            const std::vector<int64_t>& shape, const std::string& precision) {
  const OvPort c = net_.add("Const", "opset1", v->name,
                            {{"element_type", element_type}, {"shape", ov_shape_attr(shape)}, {"offset", "0"}, {"size", "0"}},
                            {}, {{stored->dtype, Shape(shape.begin(), shape.end()), "", precision}});
  constants_.emplace_back(c.layer, stored);
  return c;
}

OvPort OvLowering::port(const Value* v) {
  if (const auto it = ports_.find(v); it != ports_.end()) return it->second;
  HFX_CHECK(v->is_constant(), "OpenVINO: value '", v->name, "' used before it is produced");
  if (v->constant->quantized) {  // the IR's layout, for a decomposed QuantizedLinear
    std::vector<int64_t> shape;
    for (const Dim& d : v->shape) shape.push_back(d.value());
    return ports_[v] = constant(v, v, ov_element_type(v->dtype), shape);
  }
  const auto& shape = v->constant->src_shape;
  const bool compress = v->constant->from_checkpoint() && is_float(v->dtype) && weight_dtype_ != v->dtype;
  const Value* stored = v;
  if (compress) {
    stored_as_.push_back(*v);
    stored_as_.back().dtype = weight_dtype_;
    stored = &stored_as_.back();
  }
  const OvPort c = constant(v, stored, ov_element_type(stored->dtype), shape);
  if (!compress) return ports_[v] = c;
  const OvPort p = net_.add("Convert", "opset1", v->name + "/decompress",
                            {{"destination_type", ov_element_type(v->dtype)}}, {c},
                            {{v->dtype, Shape(shape.begin(), shape.end()), ""}});
  net_.add_rt_attribute(p.layer, "decompression");
  return ports_[v] = p;
}

// Codes as u4/u8 [N, groups, group] (u4 packs two per byte, low nibble first: the IR's layout),
// scales as [N, groups, 1] so that they broadcast over each group. The bytes are the IR's.
OvPort OvLowering::compressed_weight(const Value* v) {
  if (const auto it = compressed_ports_.find(v); it != compressed_ports_.end()) return it->second;
  HFX_CHECK(v->is_constant() && v->constant->quantized, "OpenVINO: '", v->name, "' is not a quantized weight");
  const ConstantData::Quantized& q = *v->constant->quantized;
  const int64_t rows = v->shape[0].value(), groups = v->shape[1].value();
  const bool u4 = !q.scales && q.scheme.bits == 4;
  const std::string element_type = q.scales ? ov_element_type(v->dtype) : u4 ? "u4" : "u8";
  return compressed_ports_[v] = constant(v, v, element_type, {rows, groups, q.scales ? 1 : q.scheme.group_size},
                                         u4 ? "U4" : "");
}

OvPort OvLowering::derived_weight(const Value* w, std::shared_ptr<const ConstantData> data, const std::string& name) {
  stored_as_.push_back(*w);
  Value& v = stored_as_.back();
  v.name = name;
  v.shape = Shape(data->src_shape.begin(), data->src_shape.end());
  v.constant = std::move(data);
  v.producer = nullptr;
  return port(&v);
}

OvPort OvLowering::i64(const std::vector<int64_t>& data, std::vector<int64_t> shape) {
  return port(b_.const_i64(data, std::move(shape)));
}

OvPort OvLowering::op(const std::string& type, const std::string& version, const Node& n, OvNetwork::Attrs data,
                      const std::vector<OvPort>& inputs, DType dtype, const Shape& shape, const std::string& suffix) {
  const std::string name = n.outputs[0]->name + suffix + (suffix.empty() ? "" : std::to_string(++counter_));
  return net_.add(type, version, name, std::move(data), inputs, {{dtype, shape, ""}});
}

OvPort OvLowering::op_outputs(const std::string& type, const std::string& version, const Node& n, OvNetwork::Attrs data,
                              const std::vector<OvPort>& inputs, const std::vector<std::pair<DType, Shape>>& outputs,
                              size_t which) {
  std::vector<OvNetwork::Output> outs;
  for (const auto& [dtype, shape] : outputs) outs.push_back({dtype, shape, ""});
  OvPort p = net_.add(type, version, n.outputs[0]->name, std::move(data), inputs, std::move(outs));
  p.port += static_cast<int>(which);
  return p;
}

void OvLowering::lower(const Node& n) {
  const OvOpRule& rule = ov_rule(n.op);
  if (!rule.lower) fail("internal error: OpenVINO backend cannot lower ", op_name(n.op));
  std::vector<OvPort> in;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    in.push_back(rule.owned_inputs >> i & 1 || !n.inputs[i] ? OvPort{} : port(n.inputs[i]));
  ports_[n.outputs[0]] = rule.lower(*this, n, in);
}

void OvLowering::lower_graph() {
  std::map<const Value*, const StatePair*> state_of;
  for (const StatePair& s : graph_.state_pairs) {
    if (s.carried() || s.self_initialised()) state_of[s.input] = state_of[s.output] = &s;
    if (s.self_initialised()) initialised_by_[s.output] = &s;
  }
  for (const Value* v : graph_.inputs)
    if (!state_of.count(v)) ports_[v] = parameter(v->name, v->dtype, v->shape);
  if (!state_of.empty()) lower_state_reads();
  for (const Node* n : graph_.order) {
    lower(*n);
    if (const auto it = initialised_by_.find(n->outputs[0]); it != initialised_by_.end()) lower_self_initialised(*it->second);
  }
  for (const Value* v : graph_.outputs) {
    if (const auto it = state_of.find(v); it != state_of.end()) {
      // A self-initialised variable keeps what it read (the first call's projection): the
      // projection then runs only while the variable is empty.
      const OvPort p = port(it->second->self_initialised() ? it->second->input : v);
      net_.add("Assign", "opset6", it->second->name + "/assign", {{"variable_id", it->second->name}}, {p},
               {net_.output(p)});
      continue;
    }
    const OvPort p = port(v);
    net_.set_names(p, v->name);
    net_.add("Result", "opset1", v->name + "/sink_port_0", {}, {p}, {});
  }
}

OvPort OvLowering::parameter(const std::string& name, DType dtype, const Shape& shape) {
  return net_.add("Parameter", "opset1", name, {{"shape", ov_shape_attr(shape)}, {"element_type", ov_element_type(dtype)}},
                  {}, {{dtype, shape, name}});
}

// Each state the graph carries becomes a variable: ReadValue, initialised to zeros of its shape
// for the call's batch (an append cache: empty, [batch, heads, 0, dim]), reordered by beam_idx,
// as optimum-intel and OpenVINO GenAI expect; its output is written back by an Assign. State
// computed once by another component (write-once) stays an input.
void OvLowering::lower_state_reads() {
  const Value* ids = graph_.inputs.front();
  const Dim batch = ids->shape[0];
  const OvPort beam_idx = parameter("beam_idx", DType::I32, {batch});
  beam_idx_ = beam_idx;
  const OvPort ids_shape = net_.add("ShapeOf", "opset3", "state_init/batch_shape", {{"output_type", "i64"}},
                                    {ports_.at(ids)}, {{DType::I64, {Dim(2)}, ""}});
  const OvPort batch_size = net_.add("Gather", "opset8", "state_init/batch", {{"batch_dims", "0"}},
                                     {ids_shape, i64({0}, {1}), i64({0}, {})}, {{DType::I64, {Dim(1)}, ""}});
  for (const StatePair& s : graph_.state_pairs) {
    if (!s.carried()) continue;  // (a self-initialised one is read once its projection is lowered)
    const Value* v = s.input;
    const Shape& shape = v->shape;  // [batch, ...]: an append cache's length is its one other dynamic dim
    HFX_CHECK(shape.at(0) == batch, "internal error: openvino: state ", s.name, "'s first dim is not the batch");
    std::vector<int64_t> rest;
    Shape initial{batch};
    // The variable's shape as the graph declares it: a static batch stays static (a variable
    // declared [?, ...] over a static graph keeps its initial empty value: measured, 2026.4).
    std::string variable_shape = shape[0].is_static() ? std::to_string(shape[0].value()) : "?";
    for (size_t i = 1; i < shape.size(); ++i) {
      HFX_CHECK(shape[i].is_static() || s.update == StateUpdatePolicy::Append, "internal error: openvino: state ", s.name,
                " has a dynamic dim besides the batch");
      rest.push_back(shape[i].is_static() ? shape[i].value() : 0);
      initial.push_back(Dim(rest.back()));
      variable_shape += "," + (shape[i].is_static() ? std::to_string(shape[i].value()) : std::string("?"));
    }
    const OvPort init_shape = net_.add("Concat", "opset1", s.name + "/init_shape", {{"axis", "0"}},
                                       {batch_size, i64(rest, {static_cast<int64_t>(rest.size())})},
                                       {{DType::I64, {Dim(static_cast<int64_t>(shape.size()))}, ""}});
    const OvPort zeros = net_.add("Broadcast", "opset3", s.name + "/init", {{"mode", "numpy"}},
                                  {port(b_.scalar(0.0, v->dtype)), init_shape}, {{v->dtype, initial, ""}});
    const OvPort read = net_.add("ReadValue", "opset6", s.name,
                                 {{"variable_id", s.name}, {"variable_type", ov_element_type(v->dtype)},
                                  {"variable_shape", variable_shape}},
                                 {zeros}, {{v->dtype, shape, ""}});
    ports_[v] = net_.add("Gather", "opset8", s.name + "/beam", {{"batch_dims", "0"}}, {read, beam_idx, i64({0}, {})},
                         {{v->dtype, shape, ""}});
  }
}

// A write-once state the graph both projects and reads: a variable whose ReadValue is initialised
// from the projection, so the first call after a reset stores it and later calls read it back.
void OvLowering::lower_self_initialised(const StatePair& s) {
  const Value* v = s.input;
  std::string variable_shape;
  for (size_t i = 0; i < v->shape.size(); ++i)
    variable_shape += (i ? "," : "") + (v->shape[i].is_static() ? std::to_string(v->shape[i].value()) : std::string("?"));
  ports_[v] = net_.add("ReadValue", "opset6", s.name,
                       {{"variable_id", s.name}, {"variable_type", ov_element_type(v->dtype)}, {"variable_shape", variable_shape}},
                       {port(s.output)}, {{v->dtype, v->shape, ""}});
}

}  // namespace hfx
