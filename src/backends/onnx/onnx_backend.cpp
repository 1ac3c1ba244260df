// ONNX backend: lowers the IR to opset 23 (plus onnxruntime contrib ops in the `ort` profile)
// and writes the model with one external data file.
#include <cstring>
#include <fstream>
#include <set>

#include "backends/backend.h"
#include "backends/onnx/lowering.h"
#include "backends/weight_file.h"
#include "core/error.h"
#include "passes/passes.h"

namespace hfx {
namespace {

constexpr int64_t kOpset = 23;
constexpr int64_t kIrVersion = 11;
constexpr uint64_t kDataAlignment = 4096;          // page-aligned so runtimes can mmap
constexpr size_t kInlineConstantLimit = 1024;      // smaller constants live inside the .onnx

// The ort profile runs quantized Linears as MatMulNBits, int8 compute unless asked otherwise; the
// standard profile writes the reference dequantization (DequantizeLinear has no int4 row layout
// shared with MatMulNBits), which runtimes constant-fold or run in float.
WeightQuantization resolve_compute(WeightQuantization q, OnnxOpProfile profile) {
  using Compute = WeightQuantization::Compute;
  if (q.compute == Compute::Auto) q.compute = profile_has_contrib_ops(profile) ? Compute::Int8 : Compute::Float;
  return q;
}

class OnnxBackend final : public Backend {
 public:
  std::string_view format() const override { return "onnx"; }

  void check_options(const BackendOptions& opt) const override {
    const OnnxOpProfile profile = parse_onnx_op_profile(opt.op_profile);
    check_weight_quantization(opt.quantize);
    if (opt.quantize.enabled() && !profile_has_contrib_ops(profile) &&
        opt.quantize.compute == WeightQuantization::Compute::Int8)
      fail("--quantize-compute int8 needs --onnx-ops ort (onnxruntime's MatMulNBits); the standard op set "
           "dequantizes the weights and computes in float");
    if (opt.dtype == DType::BF16)
      fail("--dtype bfloat16: onnxruntime's CPU provider has no bfloat16 MatMul kernels; use float32 or float16");
  }

  WrittenComponent write(const std::string& name, Graph& graph, const std::filesystem::path& dir,
                         const BackendOptions& opt) override {
    const OnnxOpProfile profile = parse_onnx_op_profile(opt.op_profile);
    // onnxruntime runs each MatMul as its own thread-pool round; batch-1 decode gains from fewer,
    // wider ones. (OpenVINO's CPU plugin fuses q/k/v itself: packing measured no different there.)
    pack_linears(graph);
    const QuantizeReport quantization = quantize_linears(graph, resolve_compute(opt.quantize, profile));
    decompose(graph, [profile](const Node& n) { return maps_natively(n, profile); });
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
    Lowering lowering(g, graph, profile, transposed);
    WrittenComponent written;
    written.file = name + ".onnx";
    written.quantization = quantization;
    for (const Value* v : graph.inputs) {
      set_value_info(g.add_input(), v->name, v->dtype, v->shape);
      written.inputs.push_back({v->name, v->dtype, v->shape});
    }
    for (const Node* n : graph.order) lowering.lower(*n);
    if (lowering.uses_contrib_ops()) {
      auto* contrib = model.add_opset_import();
      contrib->set_domain("com.microsoft");
      contrib->set_version(1);
    }
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
        for (const Dim& d : v.shape) t->add_dims(d.value());  // a derived (quantized) one differs from its source
      }
      const size_t out_bytes = v.constant->nbytes() / dtype_size(v.constant->src_dtype) * dtype_size(v.dtype);
      if (!v.constant->from_checkpoint() && !init.transposed && out_bytes <= kInlineConstantLimit) {
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
