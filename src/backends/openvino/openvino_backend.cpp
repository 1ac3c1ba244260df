// OpenVINO backend: lowers the IR to public opsets and writes IR v11 (openvino_model.xml + .bin).
#include <deque>
#include <limits>
#include <map>
#include <set>

#include "backends/backend.h"
#include "backends/openvino/ir_xml.h"
#include "backends/weight_file.h"
#include "core/error.h"
#include "io/manifest.h"
#include "ir/builder.h"
#include "passes/passes.h"

namespace hfx {
namespace {

constexpr uint64_t kBinAlignment = 4096;  // page-aligned: unaligned chunk writes cost the kernel dearly
const OvNetwork::Attrs kNumpy{{"auto_broadcast", "numpy"}};

std::string shape_attr(const Shape& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + (s[i].is_static() ? std::to_string(s[i].value()) : "?");
  return out;
}

std::string shape_attr(const std::vector<int64_t>& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out;
}

class OvLowering {
 public:
  // Checkpoint weights are stored as `weight_dtype` (f16/bf16 compression: Const + Convert
  // marked "decompression", the pattern OpenVINO keeps compressed) when it differs from theirs.
  OvLowering(Graph& graph, OvNetwork& net, DType weight_dtype)
      : graph_(graph), b_(graph), net_(net), weight_dtype_(weight_dtype) {}

  void lower_graph();
  // Constants in the order their Const layers were made, for the .bin.
  const std::vector<std::pair<int, const Value*>>& constants() const { return constants_; }
  // True once graph state was lowered to variables (the model then takes beam_idx).
  bool stateful() const { return beam_idx_.layer >= 0; }

 private:
  OvPort port(const Value* v);
  OvPort quantized_constant(const Value* v);
  OvPort lower_quantized_linear(const Node& n, const std::vector<OvPort>& in);
  OvPort i64(const std::vector<int64_t>& data, std::vector<int64_t> shape);
  OvPort i64_vector(const std::vector<int64_t>& data) { return i64(data, {static_cast<int64_t>(data.size())}); }
  OvPort op(const std::string& type, const std::string& version, const Node& n, OvNetwork::Attrs data,
            const std::vector<OvPort>& inputs, DType dtype, const Shape& shape, const std::string& suffix = "");
  OvPort node_result(const Node& n, const std::string& type, const std::string& version, OvNetwork::Attrs data,
                     const std::vector<OvPort>& inputs) {
    return op(type, version, n, std::move(data), inputs, n.outputs[0]->dtype, n.outputs[0]->shape);
  }
  void lower(const Node& n);
  OvPort lower_attention(const Node& n, const std::vector<OvPort>& in);
  OvPort repeat_kv(const Node& n, OvPort kv, const Value* value, int64_t groups);
  OvPort parameter(const std::string& name, DType dtype, const Shape& shape);
  void lower_state_reads();

  Graph& graph_;
  Builder b_;  // makes the small constants (axes, shapes) lowering needs
  OvNetwork& net_;
  std::map<const Value*, OvPort> ports_;
  std::vector<std::pair<int, const Value*>> constants_;
  std::deque<Value> stored_as_;  // compressed views of weights, for the .bin writer
  std::map<const Value*, OvPort> additive_masks_;  // per bool mask, shared by the layers using it
  OvPort beam_idx_;
  DType weight_dtype_;
  int counter_ = 0;
};

OvPort OvLowering::port(const Value* v) {
  if (const auto it = ports_.find(v); it != ports_.end()) return it->second;
  HFX_CHECK(v->is_constant(), "OpenVINO: value '", v->name, "' used before it is produced");
  if (v->constant->quantized) return quantized_constant(v);
  const auto& shape = v->constant->src_shape;
  const bool compress = v->constant->from_checkpoint() && is_float(v->dtype) && weight_dtype_ != v->dtype;
  const Value* stored = v;
  if (compress) {
    stored_as_.push_back(*v);
    stored_as_.back().dtype = weight_dtype_;
    stored = &stored_as_.back();
  }
  const OvPort c = net_.add("Const", "opset1", v->name,
                            {{"element_type", ov_element_type(stored->dtype)}, {"shape", shape_attr(shape)},
                             {"offset", "0"}, {"size", "0"}},
                            {}, {{stored->dtype, Shape(shape.begin(), shape.end()), ""}});
  constants_.emplace_back(c.layer, stored);
  if (!compress) return ports_[v] = c;
  const OvPort p = net_.add("Convert", "opset1", v->name + "/decompress",
                            {{"destination_type", ov_element_type(v->dtype)}}, {c},
                            {{v->dtype, Shape(shape.begin(), shape.end()), ""}});
  net_.add_rt_attribute(p.layer, "decompression");
  return ports_[v] = p;
}

// Codes as u4/u8 [N, groups, group] (u4 packs two per byte, low nibble first: the IR's layout),
// scales as [N, groups, 1] so that they broadcast over each group.
OvPort OvLowering::quantized_constant(const Value* v) {
  const ConstantData::Quantized& q = *v->constant->quantized;
  const int64_t rows = v->shape[0].value(), groups = v->shape[1].value();
  const bool u4 = !q.scales && q.scheme.bits == 4;
  const std::vector<int64_t> shape{rows, groups, q.scales ? 1 : q.scheme.group_size};
  const std::string element_type = q.scales ? ov_element_type(v->dtype) : u4 ? "u4" : "u8";
  const OvPort c = net_.add("Const", "opset1", v->name,
                            {{"element_type", element_type}, {"shape", shape_attr(shape)}, {"offset", "0"}, {"size", "0"}},
                            {}, {{v->dtype, Shape(shape.begin(), shape.end()), "", u4 ? "U4" : ""}});
  constants_.emplace_back(c.layer, v);
  return ports_[v] = c;
}

// The weight-compression subgraph OpenVINO's CPU plugin keeps compressed (Convert -> Subtract zero
// point -> Multiply scale), reshaped to [N, K] for a MatMul that reads it transposed. Unlike the
// f16 path, the Convert must not carry the "decompression" mark: with it the plugin folds the
// weights to f32 at compile time (measured).
OvPort OvLowering::lower_quantized_linear(const Node& n, const std::vector<OvPort>& in) {
  const Value* codes = n.inputs[1];
  const QuantizedLinearAttrs& q = n.attrs_as<QuantizedLinearAttrs>();
  const int64_t rows = codes->shape[0].value(), groups = codes->shape[1].value(), group = q.group_size;
  const Shape grouped{Dim(rows), Dim(groups), Dim(group)};
  OvPort w = op("Convert", "opset1", n, {{"destination_type", "f32"}}, {in[1]}, DType::F32, grouped, "/decompress");
  const double zero_point = static_cast<double>(int64_t{1} << (q.bits - 1));
  w = op("Subtract", "opset1", n, kNumpy, {w, port(b_.scalar(zero_point, DType::F32))}, DType::F32, grouped,
         "/zero_point");
  w = op("Multiply", "opset1", n, kNumpy, {w, in[2]}, DType::F32, grouped, "/scale");
  w = op("Reshape", "opset1", n, {{"special_zero", "false"}}, {w, i64_vector({rows, groups * group})}, DType::F32,
         Shape{Dim(rows), Dim(groups * group)}, "/weight");
  const bool bias = n.inputs.size() > 3 && n.inputs[3];
  OvPort out = op("MatMul", "opset1", n, {{"transpose_a", "false"}, {"transpose_b", "true"}}, {in[0], w},
                  n.outputs[0]->dtype, n.outputs[0]->shape, bias ? "/matmul" : "");
  if (bias) out = node_result(n, "Add", "opset1", kNumpy, {out, in[3]});
  return out;
}

OvPort OvLowering::i64(const std::vector<int64_t>& data, std::vector<int64_t> shape) {
  return port(b_.const_i64(data, std::move(shape)));
}

OvPort OvLowering::op(const std::string& type, const std::string& version, const Node& n, OvNetwork::Attrs data,
                      const std::vector<OvPort>& inputs, DType dtype, const Shape& shape, const std::string& suffix) {
  const std::string name = n.outputs[0]->name + suffix + (suffix.empty() ? "" : std::to_string(++counter_));
  return net_.add(type, version, name, std::move(data), inputs, {{dtype, shape, ""}});
}

void OvLowering::lower(const Node& n) {
  std::vector<OvPort> in;
  for (const Value* v : n.inputs) in.push_back(port(v));
  const Value* x = n.inputs.empty() ? nullptr : n.inputs[0];
  const Value* y = n.outputs[0];
  OvPort out;
  auto elementwise = [&](const char* type) { return node_result(n, type, "opset1", kNumpy, in); };
  switch (n.op) {
    case OpKind::Add: out = elementwise("Add"); break;
    case OpKind::Sub: out = elementwise("Subtract"); break;
    case OpKind::Mul: out = elementwise("Multiply"); break;
    case OpKind::Div: out = elementwise("Divide"); break;
    case OpKind::Pow: out = elementwise("Power"); break;
    case OpKind::Max: out = elementwise("Maximum"); break;
    case OpKind::Equal: out = elementwise("Equal"); break;
    case OpKind::Less: out = elementwise("Less"); break;
    case OpKind::LessOrEqual: out = elementwise("LessEqual"); break;
    case OpKind::Greater: out = elementwise("Greater"); break;
    case OpKind::And: out = elementwise("LogicalAnd"); break;
    case OpKind::Where: out = elementwise("Select"); break;
    case OpKind::Neg:  // x * -1: the form OpenVINO's RoPE fusion matches in rotate_half
      out = node_result(n, "Multiply", "opset1", kNumpy, {in[0], port(b_.scalar(-1.0, x->dtype))});
      break;
    case OpKind::Sqrt: out = node_result(n, "Sqrt", "opset1", {}, in); break;
    case OpKind::Exp: out = node_result(n, "Exp", "opset1", {}, in); break;
    case OpKind::Tanh: out = node_result(n, "Tanh", "opset1", {}, in); break;
    case OpKind::Erf: out = node_result(n, "Erf", "opset1", {}, in); break;
    case OpKind::Cos: out = node_result(n, "Cos", "opset1", {}, in); break;
    case OpKind::Sin: out = node_result(n, "Sin", "opset1", {}, in); break;
    case OpKind::Sigmoid: out = node_result(n, "Sigmoid", "opset1", {}, in); break;
    case OpKind::Not: out = node_result(n, "LogicalNot", "opset1", {}, in); break;
    case OpKind::Reciprocal: {  // no public Reciprocal: 1 / x
      const OvPort one = port(b_.scalar(1.0, x->dtype));
      out = node_result(n, "Divide", "opset1", kNumpy, {one, in[0]});
      break;
    }
    case OpKind::MatMul:
      out = node_result(n, "MatMul", "opset1", {{"transpose_a", "false"}, {"transpose_b", "false"}}, in);
      break;
    case OpKind::Linear: {  // weight stays [out, in]: MatMul reads it transposed
      out = op("MatMul", "opset1", n, {{"transpose_a", "false"}, {"transpose_b", "true"}}, {in[0], in[1]}, y->dtype,
               y->shape, n.inputs.size() > 2 && n.inputs[2] ? "/matmul" : "");
      if (n.inputs.size() > 2 && n.inputs[2]) out = node_result(n, "Add", "opset1", kNumpy, {out, in[2]});
      break;
    }
    case OpKind::QuantizedLinear:
      out = lower_quantized_linear(n, in);
      break;
    case OpKind::Embedding:
      out = node_result(n, "Gather", "opset8", {{"batch_dims", "0"}}, {in[0], in[1], i64({0}, {})});
      break;
    case OpKind::Softmax:
      out = node_result(n, "SoftMax", "opset8", {{"axis", std::to_string(n.attrs_as<AxisAttrs>().axis)}}, in);
      break;
    case OpKind::ReduceMean: case OpKind::ReduceMax: {
      const ReduceAttrs& r = n.attrs_as<ReduceAttrs>();
      std::vector<int64_t> axes = r.axes;
      if (axes.empty())
        for (size_t i = 0; i < x->rank(); ++i) axes.push_back(static_cast<int64_t>(i));
      out = node_result(n, n.op == OpKind::ReduceMean ? "ReduceMean" : "ReduceMax", "opset1",
                        {{"keep_dims", r.keepdims ? "true" : "false"}},
                        {in[0], i64_vector(axes)});
      break;
    }
    case OpKind::Cast:
      out = node_result(n, "Convert", "opset1", {{"destination_type", ov_element_type(y->dtype)}}, in);
      break;
    case OpKind::Reshape: {
      const auto target = reshape_target(x->shape, y->shape);
      out = node_result(n, "Reshape", "opset1", {{"special_zero", "true"}},
                        {in[0], i64_vector(target)});
      break;
    }
    case OpKind::Transpose: {
      const auto& perm = n.attrs_as<PermAttrs>().perm;
      out = node_result(n, "Transpose", "opset1", {}, {in[0], i64_vector(perm)});
      break;
    }
    case OpKind::Slice: {
      // "To the end" as INT32_MAX, the sentinel OpenVINO's fusion patterns (RoPE) look for.
      const SliceAttrs& s = n.attrs_as<SliceAttrs>();
      out = node_result(n, "Slice", "opset8", {},
                        {in[0], i64({s.start}, {1}),
                         i64({std::min<int64_t>(s.end, std::numeric_limits<int32_t>::max())}, {1}),
                         i64({1}, {1}), i64({s.axis}, {1})});
      break;
    }
    case OpKind::Concat: {  // the last axis as -1, as fusion patterns spell it
      const int64_t axis = n.attrs_as<ConcatAttrs>().axis;
      const bool last = axis == static_cast<int64_t>(y->rank()) - 1;
      out = node_result(n, "Concat", "opset1", {{"axis", last ? "-1" : std::to_string(axis)}}, in);
      break;
    }
    case OpKind::Gather:
      out = node_result(n, "Gather", "opset8", {{"batch_dims", "0"}}, {in[0], in[1], i64({n.attrs_as<AxisAttrs>().axis}, {})});
      break;
    case OpKind::Unsqueeze: {
      const auto& axes = n.attrs_as<AxesAttrs>().axes;
      out = node_result(n, "Unsqueeze", "opset1", {}, {in[0], i64_vector(axes)});
      break;
    }
    case OpKind::Range:
      out = node_result(n, "Range", "opset4", {{"output_type", ov_element_type(y->dtype)}}, in);
      break;
    case OpKind::ShapeOf:
      out = node_result(n, "ShapeOf", "opset3", {{"output_type", "i64"}}, in);
      break;
    case OpKind::Expand:
      out = node_result(n, "Broadcast", "opset3", {{"mode", "bidirectional"}}, in);
      break;
    case OpKind::ScatterElements:
      out = node_result(n, "ScatterElementsUpdate", "opset12", {{"reduction", "none"}, {"use_init_val", "true"}},
                        {in[0], in[1], in[2], i64({n.attrs_as<AxisAttrs>().axis}, {})});
      break;
    case OpKind::Attention:
      out = lower_attention(n, in);
      break;
    case OpKind::GELU:
      out = node_result(n, "Gelu", "opset7",
                        {{"approximation_mode", n.attrs_as<GELUAttrs>().approximate == GeluApproximation::Tanh ? "TANH" : "ERF"}}, in);
      break;
    default:
      fail("internal error: OpenVINO backend cannot lower ", op_name(n.op));
  }
  ports_[y] = out;
}

// Grouped kv heads repeated to the query heads, the shape the CPU plugin's SDPA fusions expect:
// [B, Hkv, T, D] -> Unsqueeze -> Broadcast [B, Hkv, G, T, D] -> Reshape [B, Hkv * G, T, D].
OvPort OvLowering::repeat_kv(const Node& n, OvPort kv, const Value* value, int64_t groups) {
  const Shape& s = value->shape;
  const Shape five{s[0], s[1], Dim(groups), s[2], s[3]};
  const OvPort unsqueezed = op("Unsqueeze", "opset1", n, {}, {kv, i64({2}, {1})}, value->dtype,
                               {s[0], s[1], Dim(int64_t{1}), s[2], s[3]}, "/kv_unsqueeze");
  const OvPort target = i64({1, 1, groups, 1, 1}, {5});
  const OvPort broadcast = op("Broadcast", "opset3", n, {{"mode", "bidirectional"}}, {unsqueezed, target},
                              value->dtype, five, "/kv_broadcast");
  const Shape four{s[0], Dim(s[1].value() * groups), s[2], s[3]};
  const auto spec = reshape_target(five, four);
  return op("Reshape", "opset1", n, {{"special_zero", "true"}}, {broadcast, i64(spec, {4})}, value->dtype, four,
            "/kv_reshape");
}

// ScaledDotProductAttention (opset13) with an additive mask: masked scores get the lowest finite
// value so fully padded rows stay finite, as in the reference decomposition.
OvPort OvLowering::lower_attention(const Node& n, const std::vector<OvPort>& in) {
  const Value* q = n.inputs[0];
  const int64_t groups = q->shape[1].value() / n.inputs[1]->shape[1].value();
  OvPort k = in[1], v = in[2];
  if (groups > 1) {
    k = repeat_kv(n, k, n.inputs[1], groups);
    v = repeat_kv(n, v, n.inputs[2], groups);
  }
  std::vector<OvPort> inputs{in[0], k, v};
  if (n.inputs.size() > 3 && n.inputs[3]) {
    const Value* mask = n.inputs[3];
    OvPort& additive = additive_masks_[mask];
    if (additive.layer < 0) {
      const float lowest = q->dtype == DType::F16 ? -65504.0f : std::numeric_limits<float>::lowest();
      additive = op("Select", "opset1", n, kNumpy, {in[3], port(b_.scalar(0.0, q->dtype)), port(b_.scalar(lowest, q->dtype))},
                    q->dtype, mask->shape, "/additive_mask");
    }
    inputs.push_back(additive);
  } else {
    inputs.push_back(port(b_.scalar(0.0, q->dtype)));
  }
  const AttentionAttrs& a = n.attrs_as<AttentionAttrs>();
  inputs.push_back(port(b_.scalar(a.scale, q->dtype)));
  HFX_CHECK(a.softcap == 0.0, "OpenVINO SDPA has no softcap (decompose instead)");
  return node_result(n, "ScaledDotProductAttention", "opset13", {{"causal", "false"}}, inputs);
}

void OvLowering::lower_graph() {
  std::map<const Value*, const StatePair*> state_of;
  for (const StatePair& s : graph_.states) state_of[s.input] = state_of[s.output] = &s;
  for (const Value* v : graph_.inputs)
    if (!state_of.count(v)) ports_[v] = parameter(v->name, v->dtype, v->shape);
  if (!graph_.states.empty()) lower_state_reads();
  for (const Node* n : graph_.order) lower(*n);
  for (const Value* v : graph_.outputs) {
    const OvPort p = port(v);
    if (const auto it = state_of.find(v); it != state_of.end()) {
      net_.add("Assign", "opset6", it->second->name + "/assign", {{"variable_id", it->second->name}}, {p},
               {net_.output(p)});
      continue;
    }
    net_.set_names(p, v->name);
    net_.add("Result", "opset1", v->name + "/sink_port_0", {}, {p}, {});
  }
}

OvPort OvLowering::parameter(const std::string& name, DType dtype, const Shape& shape) {
  return net_.add("Parameter", "opset1", name, {{"shape", shape_attr(shape)}, {"element_type", ov_element_type(dtype)}},
                  {}, {{dtype, shape, name}});
}

// Each cache input becomes a variable: ReadValue, initialised to an empty [batch, heads, 0, dim]
// tensor, reordered by beam_idx, as optimum-intel and OpenVINO GenAI expect; its output is
// written back by an Assign.
void OvLowering::lower_state_reads() {
  const Value* ids = graph_.inputs.front();
  const Dim batch = ids->shape[0];
  const OvPort beam_idx = parameter("beam_idx", DType::I32, {batch});
  beam_idx_ = beam_idx;
  const OvPort ids_shape = net_.add("ShapeOf", "opset3", "state_init/batch_shape", {{"output_type", "i64"}},
                                    {ports_.at(ids)}, {{DType::I64, {Dim(2)}, ""}});
  const OvPort batch_size = net_.add("Gather", "opset8", "state_init/batch", {{"batch_dims", "0"}},
                                     {ids_shape, i64({0}, {1}), i64({0}, {})}, {{DType::I64, {Dim(1)}, ""}});
  for (const StatePair& s : graph_.states) {
    const Value* v = s.input;
    const Shape& shape = v->shape;  // [batch, heads, past, dim]
    const OvPort rest = i64({shape[1].value(), 0, shape[3].value()}, {3});
    const OvPort init_shape = net_.add("Concat", "opset1", s.name + "/init_shape", {{"axis", "0"}}, {batch_size, rest},
                                       {{DType::I64, {Dim(4)}, ""}});
    const Shape empty{batch, shape[1], Dim(int64_t{0}), shape[3]};
    const OvPort zeros = net_.add("Broadcast", "opset3", s.name + "/init", {{"mode", "numpy"}},
                                  {port(b_.scalar(0.0, v->dtype)), init_shape}, {{v->dtype, empty, ""}});
    std::string variable_shape = "?," + std::to_string(shape[1].value()) + ",?," + std::to_string(shape[3].value());
    const OvPort read = net_.add("ReadValue", "opset6", s.name,
                                 {{"variable_id", s.name}, {"variable_type", ov_element_type(v->dtype)},
                                  {"variable_shape", variable_shape}},
                                 {zeros}, {{v->dtype, shape, ""}});
    ports_[v] = net_.add("Gather", "opset8", s.name + "/beam", {{"batch_dims", "0"}}, {read, beam_idx, i64({0}, {})},
                         {{v->dtype, shape, ""}});
  }
}

bool maps_natively(const Node& n) {
  if (n.op == OpKind::Attention) return n.attrs_as<AttentionAttrs>().softcap == 0.0;  // SDPA has no softcap
  return n.op == OpKind::Linear || n.op == OpKind::QuantizedLinear || n.op == OpKind::Embedding ||
         n.op == OpKind::GELU;
}

// One export's OpenVINO files: an .xml per component and its .bin (OpenVINO reads weights from
// the .bin named after the .xml; generation is one stateful model, so weights are stored once).
class OpenVinoWriter final : public ExportWriter {
 public:
  OpenVinoWriter(const ExportConfig& config, const std::filesystem::path& dir) : dtype_(config.dtype), dir_(dir) {}

  WrittenComponent write(const std::string& name, Graph& graph) override {
    OvNetwork net;
    OvLowering lowering(graph, net, dtype_);
    lowering.lower_graph();

    // OpenVINO tools look for openvino_model.xml/.bin; other components keep their own name.
    const bool main_model = name == manifest::component::kModel || name == manifest::component::kDecode;
    const std::string stem = main_model ? "openvino_model" : "openvino_" + name + "_model";
    WeightFile bin(dir_ / (stem + ".bin"), kBinAlignment);
    std::vector<WeightFile::Item> items;
    for (const auto& [layer, v] : lowering.constants()) items.push_back({v, false});
    const auto spans = bin.append_all(items);
    bin.close();
    for (size_t i = 0; i < spans.size(); ++i) {
      const int layer = lowering.constants()[i].first;
      net.set_data(layer, "offset", std::to_string(spans[i].offset));
      net.set_data(layer, "size", std::to_string(spans[i].length));
    }
    net.write(dir_ / (stem + ".xml"), name);

    WrittenComponent written{stem + ".xml", {stem + ".bin"}, {}, {}, lowering.stateful()};
    std::set<const Value*> state_values;
    for (const StatePair& s : graph.states) state_values.insert({s.input, s.output});
    for (const Value* v : graph.inputs)
      if (!state_values.count(v)) written.inputs.push_back({v->name, v->dtype, v->shape});
    if (lowering.stateful()) written.inputs.push_back({"beam_idx", DType::I32, {graph.inputs.front()->shape[0]}});
    for (const Value* v : graph.outputs)
      if (!state_values.count(v)) written.outputs.push_back({v->name, v->dtype, v->shape});
    return written;
  }

  void finish() override {}

 private:
  DType dtype_;  // checkpoint weights are stored compressed to this (the graph computes in f32)
  std::filesystem::path dir_;
};

class OpenVinoBackend final : public Backend {
 public:
  std::string_view format() const override { return "openvino"; }

  BackendCapabilities capabilities() const override {
    return {{DType::F32, DType::F16, DType::BF16},
            "",
            {manifest::cache::kStateful},
            "its generation model is stateful: the cache lives in the runtime",
            true};
  }

  void check(const ExportConfig& config, const FieldSpelling& spell) const override {
    if (!config.backend.empty()) fail(spell("backend"), ": --format openvino takes no backend options");
    if (config.quantization.compute == WeightQuantization::Compute::Int8)
      fail(spell("quantization.compute"), " int8: OpenVINO picks the activation precision when it compiles the model "
           "(DYNAMIC_QUANTIZATION_GROUP_SIZE); leave ", spell("quantization.compute"), " unset");
  }

  // OpenVINO picks its own inference precision: the graph computes in float32 and the weights are
  // stored compressed to the requested dtype. Generation is one stateful graph for any query length.
  ExportConfig graph_config(const ExportConfig& config) const override {
    ExportConfig graph = config;
    graph.dtype = DType::F32;
    if (graph.generation.enabled) graph.generation.multi_token_decode = true;
    return graph;
  }

  std::vector<Pass> passes(const ExportConfig& config) const override {
    WeightQuantization quantize = config.quantization;
    if (quantize.enabled()) quantize.compute = WeightQuantization::Compute::Float;  // the IR holds no choice
    return {
        {"quantize_linears", [quantize](Graph& g, PassReport& r) { r.quantization = quantize_linears(g, quantize); }},
        {"decompose", [](Graph& g, PassReport&) { decompose(g, maps_natively); }},
        {"eliminate_dead_code", [](Graph& g, PassReport&) { eliminate_dead_code(g); }},
    };
  }

  std::unique_ptr<ExportWriter> writer(const ExportConfig& config, const std::filesystem::path& dir) const override {
    return std::make_unique<OpenVinoWriter>(config, dir);
  }
};

}  // namespace

HFX_REGISTER_BACKEND("openvino", OpenVinoBackend)

}  // namespace hfx
