// Backend interface and registry. A backend lowers an IR graph to its runtime's ops and writes
// the component's files; nothing outside the registry switches on the format.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/passes.h"

namespace hfx {

struct BackendOptions {
  DType dtype = DType::F32;
  bool static_cache = false;
  std::string op_profile;  // backend-specific op set (ONNX: standard | ort); empty = the default
  WeightQuantization quantize;  // Linear weights stored as blockwise int4/int8 codes
};

struct TensorSpec {
  std::string name;
  DType dtype;
  Shape shape;
};

struct WrittenComponent {
  std::string file;  // relative to the output directory
  std::vector<std::string> extra_files;
  std::vector<TensorSpec> inputs, outputs;
  bool stateful = false;  // the graph's state pairs live inside the runtime (no cache inputs/outputs)
  QuantizeReport quantization;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view format() const = 0;
  // Rejects options this backend cannot honour, with a one-line reason.
  virtual void check_options(const BackendOptions& opt) const = 0;
  // The dtype the frontend builds the graph in (a backend may keep weights narrower than this).
  virtual DType graph_dtype(const BackendOptions& opt) const { return opt.dtype; }
  // Whether generation is one graph serving prefill and decode (a stateful model) rather than the
  // requested components.
  virtual bool single_generation_graph() const { return false; }
  // Lowers `graph` (consumed: passes rewrite it) and writes `name`'s files under `dir`.
  virtual WrittenComponent write(const std::string& name, Graph& graph, const std::filesystem::path& dir,
                                 const BackendOptions& opt) = 0;
};

std::unique_ptr<Backend> make_backend(const std::string& format);
std::vector<std::string> supported_formats();

std::unique_ptr<Backend> make_onnx_backend();
std::unique_ptr<Backend> make_openvino_backend();

}  // namespace hfx
