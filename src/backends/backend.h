// Backend interface and registry. A backend declares what it can lower, the passes its graphs go
// through, and a writer that stores a whole export (every component, each weight once). Each
// backend registers itself by format name in its own file; nothing outside the registry switches
// on the format.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/export_config.h"
#include "io/json_config.h"
#include "ir/component.h"
#include "ir/graph.h"
#include "passes/passes.h"

namespace hfx {

struct BackendCapabilities {
  std::vector<DType> dtypes;           // what the config's dtype may be
  std::string dtype_note;              // why others are refused, for the error
  std::vector<std::string_view> caches;  // generation caches it lowers (manifest::cache::*)
  std::string cache_note;
  // Generation is one graph whose cache lives inside the runtime (serves prefill and decode).
  bool stateful_generation = false;
  // The runtime pipelines whose own component layouts this format writes where a model offers one
  // (ExportModel::pipeline_layouts): "openvino_genai".
  std::vector<std::string_view> pipeline_layouts;
};

// A fused kernel a backend prefers that a graph fails a runtime precondition of, why, and the
// form written instead.
struct KernelFallback {
  std::string kernel, reason, instead;
};

// What passes found, for the manifest.
struct PassReport {
  QuantizeReport quantization;
  std::vector<KernelFallback> kernel_fallbacks;
};

struct Pass {
  std::string name;
  std::function<void(Graph&, PassReport&)> run;
};

struct TensorSpec {
  std::string name;
  DType dtype;
  Shape shape;
};

struct WrittenComponent {
  std::string file;  // relative to the output directory
  std::string program;  // the program's name inside `file` when it holds several (.pt2)
  std::vector<std::string> data_files;
  std::vector<TensorSpec> inputs, outputs;
  bool stateful = false;  // the graph's state lives inside the runtime (no cache inputs/outputs)
  // Each past/present pair may be bound to one buffer of the cache's full capacity, which the
  // graph updates in place (onnxruntime's GroupQueryAttention owns every append).
  bool cache_shares_buffer = false;
  // The attention rotates the keys it stores by cache slot (not by position_ids).
  bool cache_keys_rotated_by_slot = false;
  // Fused kernels the backend prefers that this graph could not use: export.json's `kernel_fallbacks`.
  std::vector<KernelFallback> kernel_fallbacks;
};

// Stores one export: components are written one after another; weights they share are stored
// once, in files finish() completes.
class ExportWriter {
 public:
  virtual ~ExportWriter() = default;
  // The checkpoint's special tokens, for formats whose runners read them from the program itself
  // (ExecuTorch's metadata methods); given before the first component is written.
  struct TokenIds {
    std::vector<int64_t> eos;
    std::optional<int64_t> bos;
  };
  virtual void set_token_ids(const TokenIds& ids) { (void)ids; }
  // Lowers `graph` (its passes have run; lowering may add small constants) and writes its files.
  virtual WrittenComponent write(Role role, Graph& graph) = 0;
  virtual void finish() = 0;
};

// One of a backend's options (the config's `backend` object), declared once: its key and type,
// and the flag the command line spells it with. The CLI makes each flag from these (and refuses it
// with a format that does not declare it), errors name the field by its flag, and
// check_backend_options refuses unknown keys and values of the wrong type.
struct BackendOption {
  enum class Type {
    Choice,   // a string, one of `choices`
    Bool,     // true or false; the flag sets `flag_sets`
    Strings,  // a list of strings (the flag takes a comma list); the backend checks the items
    Object,   // JSON the backend reads itself (no flag)
  };
  std::string key;
  Type type = Type::Choice;
  std::vector<std::string> choices;  // Choice
  std::string flag;                  // empty: set through --config or the Python API only
  std::string help;                  // the flag's help
  bool flag_sets = true;             // Bool
  std::string choices_note;          // Choice: what each choice means, for the error
};
// The `decompose` option every backend takes.
BackendOption decompose_option();

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view format() const = 0;
  // The format as errors name it ("ONNX", "OpenVINO").
  virtual std::string_view display_name() const { return format(); }
  // Its `backend` options, in the order errors list them.
  virtual std::vector<BackendOption> options() const = 0;
  virtual BackendCapabilities capabilities() const = 0;
  // What the generic checks cannot see: the `backend` sub-object and this format's own limits.
  virtual void check(const ExportConfig& config, const FieldSpelling& spell) const = 0;
  // The config the frontend builds the graphs for (e.g. a dtype the backend widens weights to).
  virtual ExportConfig graph_config(const ExportConfig& config) const { return config; }
  virtual std::vector<Pass> passes(const ExportConfig& config) const = 0;
  virtual std::unique_ptr<ExportWriter> writer(const ExportConfig& config, const std::filesystem::path& dir) const = 0;
  // The Python package of the runtime that runs this format's exports (version pinning: see
  // tested_runtimes); empty when none is pinned.
  virtual std::string_view runtime_package() const { return {}; }
  // Files a runtime of this format reads beside the export (onnxruntime-genai's config, compiled
  // packages), from the finished manifest (which may record them) and the checkpoint's
  // config.json; written before the export is committed.
  virtual void write_runtime_files(nlohmann::json& manifest, const JsonConfig& hf_config,
                                   const std::filesystem::path& dir) const {
    (void)manifest, (void)hf_config, (void)dir;
  }
};

// Refuses keys of `config.backend` the backend does not declare and values of the wrong type or
// outside their choices (one line naming the field as `spell` does).
void check_backend_options(const Backend& backend, const ExportConfig& config, const FieldSpelling& spell);

// The `decompose` option every backend takes: high-level ops (by name, or "all") to replace by
// their reference decomposition even where the backend has a fused op. Ops not named keep the
// backend's choice. Throws for names that are not high-level ops.
std::set<OpKind> forced_decompositions(const ExportConfig& config, const FieldSpelling& spell = json_field);
// The decompose pass for a backend whose native predicate is `native`, honouring `decompose`.
Pass decompose_pass(std::function<bool(const Node&)> native, std::set<OpKind> forced);

using BackendFactory = std::function<std::unique_ptr<Backend>()>;
// Adds `format` to the registry; returns true so that it can initialise a namespace-scope constant.
bool register_backend(const std::string& format, BackendFactory make);
// Throws Error listing the supported formats when `format` is unknown.
// {package: version} for the backend's runtime package as this build's tests ran it (empty when
// the build did not see it installed); the manifest records it, and a runner warns when it runs
// under another minor version.
nlohmann::json tested_runtimes(const Backend& backend);

std::unique_ptr<Backend> make_backend(const std::string& format, const std::string& option = "--format");
std::vector<std::string> supported_formats();

#define HFX_REGISTER_BACKEND(format, BackendClass)                                                  \
  namespace {                                                                                       \
  const bool HFX_BACKEND_CONCAT(hfx_registered_backend_, __LINE__) =                                \
      ::hfx::register_backend(format, [] { return std::unique_ptr<::hfx::Backend>(new BackendClass()); }); \
  }
#define HFX_BACKEND_CONCAT_INNER(a, b) a##b
#define HFX_BACKEND_CONCAT(a, b) HFX_BACKEND_CONCAT_INNER(a, b)

}  // namespace hfx
