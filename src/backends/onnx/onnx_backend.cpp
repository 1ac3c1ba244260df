// ONNX backend: lowers the IR to ai.onnx ops (opset 23) and writes model + one external data file.
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "backends/backend.h"
#include "backends/weight_file.h"
#include "core/error.h"
#include "onnx/onnx.pb.h"
#include "passes/passes.h"

namespace hfx {
namespace {

constexpr int64_t kOpset = 23;
constexpr int64_t kIrVersion = 11;
constexpr uint64_t kDataAlignment = 4096;          // page-aligned so runtimes can mmap
constexpr size_t kInlineConstantLimit = 1024;      // smaller constants live inside the .onnx

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

class Lowering {
 public:
  Lowering(onnx::GraphProto& g, std::set<const Value*> transposed_weights)
      : g_(g), transposed_(std::move(transposed_weights)) {}

  std::string name_of(const Value* v) {
    if (v->is_constant()) return constant_name(v, false);
    return v->name;
  }

  void lower(const Node& n);
  // Constants referenced so far: (value, as transposed, initializer name).
  struct Init {
    const Value* value;
    bool transposed;
    std::string name;
  };
  const std::vector<Init>& initializers() const { return inits_; }

 private:
  std::string constant_name(const Value* v, bool transposed);
  std::string ints(const std::vector<int64_t>& data, bool scalar = false);
  onnx::NodeProto* node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out);
  std::string temp(const std::string& base) { return base + "/t" + std::to_string(++counter_); }
  std::vector<int64_t> reshape_target(const Value* in, const Value* out);

  onnx::GraphProto& g_;
  std::set<const Value*> transposed_;
  std::map<std::pair<const Value*, bool>, std::string> constant_names_;
  std::vector<Init> inits_;
  int counter_ = 0;
};

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

onnx::NodeProto* Lowering::node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  auto* n = g_.add_node();
  n->set_op_type(op);
  n->set_name(out.front());
  for (auto& i : in) n->add_input(i);
  for (auto& o : out) n->add_output(o);
  return n;
}

// ONNX Reshape target: static dims as numbers, a symbolic dim equal to the input's at the same
// index as 0 (copy), and at most one remaining symbolic dim as -1 (inferred).
std::vector<int64_t> Lowering::reshape_target(const Value* in, const Value* out) {
  std::vector<int64_t> target;
  bool inferred = false;
  for (size_t i = 0; i < out->rank(); ++i) {
    const Dim& d = out->shape[i];
    if (d.is_static()) {
      target.push_back(d.value());
    } else if (i < in->rank() && in->shape[i] == d) {
      target.push_back(0);
    } else {
      HFX_CHECK(!inferred, "reshape with two inferred dims: ", out->name);
      inferred = true;
      target.push_back(-1);
    }
  }
  return target;
}

void Lowering::lower(const Node& n) {
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
    case OpKind::Range: case OpKind::Expand:
      node(std::string(op_name(n.op)), in, {out});
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
      node("Reshape", {in[0], ints(reshape_target(x, n.outputs[0]))}, {out});
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
    case OpKind::GELU:
      attr_string(node("Gelu", in, {out}), "approximate", n.attrs.s("approximate"));
      return;
    default:
      fail("internal error: ONNX backend cannot lower ", op_name(n.op));
  }
}

bool maps_natively(const Node& n) {
  return n.op == OpKind::Linear || n.op == OpKind::Embedding || n.op == OpKind::GELU;
}

class OnnxBackend final : public Backend {
 public:
  std::string_view format() const override { return "onnx"; }

  void check_options(const BackendOptions& opt) const override {
    if (opt.dtype == DType::BF16)
      fail("--dtype bfloat16: onnxruntime's CPU provider has no bfloat16 MatMul kernels; use float32 or float16");
  }

  WrittenComponent write(const std::string& name, Graph& graph, const std::filesystem::path& dir,
                         const BackendOptions& opt) override {
    decompose(graph, maps_natively);
    eliminate_dead_code(graph);
    verify(graph);

    onnx::ModelProto model;
    model.set_ir_version(kIrVersion);
    model.set_producer_name("hfexport");
    model.set_producer_version(HFEXPORT_VERSION);
    auto* opset = model.add_opset_import();
    opset->set_domain("");
    opset->set_version(kOpset);
    onnx::GraphProto& g = *model.mutable_graph();
    g.set_name(name);

    std::set<const Value*> transposed;  // weights some Linear reads: stored once, transposed
    for (const Node* n : graph.order)
      if (n->op == OpKind::Linear) transposed.insert(n->inputs[1]);
    Lowering lowering(g, transposed);
    WrittenComponent written;
    written.file = name + ".onnx";
    for (const Value* v : graph.inputs) {
      set_value_info(g.add_input(), v->name, v->dtype, v->shape);
      written.inputs.push_back({v->name, v->dtype, v->shape});
    }
    for (const Node* n : graph.order) lowering.lower(*n);
    for (const Value* v : graph.outputs) {
      set_value_info(g.add_output(), v->name, v->dtype, v->shape);
      written.outputs.push_back({v->name, v->dtype, v->shape});
    }
    const std::string data_name = written.file + ".data";
    write_initializers(g, lowering.initializers(), dir / data_name);
    written.extra_files.push_back(data_name);

    std::ofstream out(dir / written.file, std::ios::binary);
    if (!out || !model.SerializeToOstream(&out) || !out.flush())
      fail((dir / written.file).string(), ": cannot write model");
    (void)opt;
    return written;
  }

 private:
  static void write_initializers(onnx::GraphProto& g, const std::vector<Lowering::Init>& inits,
                                 const std::filesystem::path& data_path) {
    WeightFile data(data_path, kDataAlignment);
    std::vector<WeightFile::Item> external;
    std::vector<onnx::TensorProto*> external_protos;
    for (const auto& init : inits) {
      const Value& v = *init.value;
      auto* t = g.add_initializer();
      t->set_name(init.name);
      t->set_data_type(onnx_type(v.dtype));
      const auto& src_shape = v.constant->src_shape;
      if (init.transposed) {
        HFX_CHECK(src_shape.size() == 2, "transposed initializer ", init.name);
        t->add_dims(src_shape[1]);
        t->add_dims(src_shape[0]);
      } else {
        for (int64_t d : src_shape) t->add_dims(d);
      }
      const size_t out_bytes = v.constant->nbytes() / dtype_size(v.constant->src_dtype) * dtype_size(v.dtype);
      if (!v.constant->tensor && !init.transposed && out_bytes <= kInlineConstantLimit) {
        std::string raw(out_bytes, '\0');
        if (v.dtype == v.constant->src_dtype) std::memcpy(raw.data(), v.constant->bytes(), out_bytes);
        else convert_floats(v.constant->bytes(), v.constant->src_dtype, raw.data(), v.dtype, out_bytes / dtype_size(v.dtype));
        t->set_raw_data(raw);
        continue;
      }
      external.push_back({&v, init.transposed});
      external_protos.push_back(t);
    }
    const std::vector<WeightFile::Span> spans = data.append_all(external);
    for (size_t i = 0; i < spans.size(); ++i) {
      onnx::TensorProto* t = external_protos[i];
      t->set_data_location(onnx::TensorProto::EXTERNAL);
      auto add = [&](const char* key, const std::string& value) {
        auto* e = t->add_external_data();
        e->set_key(key);
        e->set_value(value);
      };
      add("location", data_path.filename().string());
      add("offset", std::to_string(spans[i].offset));
      add("length", std::to_string(spans[i].length));
    }
    data.close();
  }
};

}  // namespace

std::unique_ptr<Backend> make_onnx_backend() { return std::make_unique<OnnxBackend>(); }

}  // namespace hfx
