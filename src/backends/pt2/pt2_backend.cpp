// PyTorch program backend: lowers the IR to ATen and writes model.pt2, the archive
// torch.export.save writes (zip of models/<program>.json, raw weight records and their configs),
// with no torch involved. torch.export.load reads the program named `model`.
#include <fstream>
#include <iterator>
#include <map>
#include <tuple>

#include "backends/backend.h"
#include "backends/pt2/lowering.h"
#include "backends/pt2/stored_zip.h"
#include "backends/weight_file.h"
#include "core/error.h"
#include "core/python.h"
#include "io/manifest.h"
#include "passes/passes.h"

namespace hfx {
namespace {

constexpr const char* kArchive = "model.pt2";
// A generation export is named after the program torch.export.load returns from it (decode), as
// transformers.exporters names its decode.pt2; the prefill program, if any, is in the same archive.
constexpr const char* kGenerationArchive = "decode.pt2";
constexpr const char* kRoot = "model/";  // torch names the root folder after the file's stem

// A stored tensor record: weights (parameters) and lifted constants, each stored once.
struct Record {
  std::string path;  // relative to the root, e.g. data/weights/weight_0
  WeightFile::Span span;
};

constexpr const char* kInterfaceKey = "interface";
constexpr const char* kAotKey = "aot";

// backend.interface: how the decode program is called when the caller's pytree is not flat
// keyword arguments (the Python API's transformers StaticCache): {"in_spec", "forward_arg_names",
// "cache_lengths", "sample_inputs": a file of torch.save((args, kwargs))}.
struct Interface {
  Pt2Interface program;
  std::filesystem::path sample_inputs;
};

Interface interface_of(const ExportConfig& config, const FieldSpelling& spell = json_field) {
  Interface out;
  if (!config.backend.contains(kInterfaceKey)) return out;
  const std::string field = spell("backend") + "." + kInterfaceKey;
  const nlohmann::json& j = config.backend.at(kInterfaceKey);
  if (!j.is_object()) fail(field, ": expected an object {in_spec, forward_arg_names, cache_lengths, sample_inputs}");
  for (const auto& [key, value] : j.items()) {
    const bool ok = key == "in_spec" || key == "sample_inputs" ? value.is_string()
                    : key == "cache_lengths"                   ? value.is_boolean()
                    : key == "forward_arg_names"               ? value.is_array()
                                                               : false;
    if (!ok) fail(field, ".", key, ": unknown key or wrong type");
  }
  out.program.in_spec = j.value("in_spec", "");
  out.program.cache_lengths = j.value("cache_lengths", false);
  for (const auto& name : j.value("forward_arg_names", nlohmann::json::array())) {
    if (!name.is_string()) fail(field, ".forward_arg_names: expected strings");
    out.program.forward_arg_names.push_back(name);
  }
  out.sample_inputs = j.value("sample_inputs", "");
  if (out.program.in_spec.empty() != out.program.forward_arg_names.empty())
    fail(field, ": in_spec and forward_arg_names go together");
  if (!out.sample_inputs.empty() && !std::filesystem::is_regular_file(out.sample_inputs))
    fail(field, ".sample_inputs: ", out.sample_inputs.string(), ": no such file");
  if (out.program.cache_lengths && !config.generation.static_cache())
    fail(field, ".cache_lengths: needs a static cache");
  return out;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) fail(path.string(), ": cannot read");
  return bytes;
}

// A component's program name in the archive. torch.export.load returns the program named
// `model`: the forward, or the decode step (which serves every call of a multi-token or
// static-cache loop); other components keep their role's name.
std::string pt2_program(Role role) { return is_main_role(role) ? "model" : std::string(role_name(role)); }

class Pt2Writer final : public ExportWriter {
 public:
  Pt2Writer(const ExportConfig& config, const std::filesystem::path& dir)
      : path_(dir / (config.generation.enabled ? kGenerationArchive : kArchive)),
        data_(path_, StoredZip::kAlignment),
        interface_(interface_of(config)) {}

  WrittenComponent write(Role role, Graph& graph) override {
    const bool decode = role == Role::Decode;
    Pt2Lowering lowering(graph, decode ? interface_.program : Pt2Interface{});
    lowering.lower_graph();
    nlohmann::json weights = nlohmann::json::object(), constants = nlohmann::json::object();
    std::vector<WeightFile::Item> fresh;
    std::vector<std::string> fresh_paths;
    for (const Pt2Constant& c : lowering.constants()) {
      const Value& v = *c.value;
      const auto key = std::make_tuple(v.constant->key(), v.dtype, c.parameter);
      auto it = stored_.find(key);
      if (it == stored_.end()) {
        const std::string path = c.parameter ? "data/weights/weight_" + std::to_string(weight_count_++)
                                             : "data/constants/tensor_" + std::to_string(constant_count_++);
        it = stored_.emplace(key, fresh_paths.size() + records_.size()).first;
        fresh.push_back({&v, false, StoredZip::header_reserve(kRoot + path)});
        fresh_paths.push_back(path);
      }
      const std::string& path = it->second < records_.size() ? records_[it->second].path
                                                              : fresh_paths[it->second - records_.size()];
      nlohmann::json entry = {{"path_name", path.substr(path.rfind('/') + 1)}, {"is_param", c.parameter},
                              {"use_pickle", false}, {"tensor_meta", lowering.tensor_meta(v.dtype, v.shape)}};
      (c.parameter ? weights : constants)[c.fqn] = std::move(entry);
    }
    const auto spans = data_.append_all(fresh);
    for (size_t i = 0; i < spans.size(); ++i) records_.push_back({fresh_paths[i], spans[i]});

    const std::string program = pt2_program(role);
    programs_.push_back({program, lowering.program().dump(), nlohmann::json{{"config", weights}}.dump(),
                         nlohmann::json{{"config", constants}}.dump(),
                         decode && !interface_.sample_inputs.empty() ? read_file(interface_.sample_inputs) : ""});
    WrittenComponent written{path_.filename().string(), program, {}, {}, {}};
    for (const Pt2Input& in : lowering.user_inputs()) written.inputs.push_back({in.keyword, in.dtype, in.shape});
    for (const Value* v : graph.outputs)
      if (lowering.returned(v)) written.outputs.push_back({v->name, v->dtype, v->shape});
    return written;
  }

  void finish() override {
    data_.close();
    StoredZip zip(path_);
    std::vector<StoredZip::Adopted> adopted;
    uint64_t end = 0;  // each record's header fills the gap the weight file left before its data
    for (const Record& r : records_) {
      adopted.push_back({kRoot + r.path, end, r.span.offset, r.span.length});
      end = r.span.offset + r.span.length;
    }
    zip.adopt_all(adopted);
    for (const Program& p : programs_) {
      zip.append(std::string(kRoot) + "models/" + p.name + ".json", p.json);
      zip.append(std::string(kRoot) + "data/weights/" + p.name + "_weights_config.json", p.weights);
      zip.append(std::string(kRoot) + "data/constants/" + p.name + "_constants_config.json", p.constants);
      zip.append(std::string(kRoot) + "data/sample_inputs/" + p.name + ".pt", p.sample_inputs);  // empty: none
    }
    zip.append(std::string(kRoot) + "archive_format", "pt2");
    zip.append(std::string(kRoot) + "archive_version", "0");
    zip.append(std::string(kRoot) + ".data/version", "6\n");
    zip.append(std::string(kRoot) + "byteorder", "little");
    zip.finish();
  }

 private:
  struct Program {
    std::string name, json, weights, constants, sample_inputs;
  };
  std::filesystem::path path_;
  WeightFile data_;
  std::map<std::tuple<std::string, DType, bool>, size_t> stored_;  // -> index into records_ (+ pending)
  std::vector<Record> records_;
  std::vector<Program> programs_;
  Interface interface_;
  int weight_count_ = 0, constant_count_ = 0;
};

class Pt2Backend final : public Backend {
 public:
  std::string_view format() const override { return "pt2"; }

  BackendCapabilities capabilities() const override {
    return {{DType::F32, DType::F16, DType::BF16}, "", {manifest::cache::kDynamic, manifest::cache::kStatic}, "", false};
  }

  std::string_view runtime_package() const override { return "torch"; }

  std::vector<BackendOption> options() const override {
    return {decompose_option(),
            // transformers.exporters' calling convention (the Python API sets it).
            {kInterfaceKey, BackendOption::Type::Object},
            {kAotKey, BackendOption::Type::Bool, {}, "--aot", "pt2: also compile each program with AOTInductor (runs Python with torch)"}};
  }

  void check(const ExportConfig& config, const FieldSpelling& spell) const override {
    check_backend_options(*this, config, spell);
    forced_decompositions(config, spell);
    interface_of(config, spell);
    if (config.quantization.compute == WeightQuantization::Compute::Int8)
      fail(spell("quantization.compute"), " int8: a .pt2 program dequantizes its weights and computes in float; "
           "leave ", spell("quantization.compute"), " unset");
  }

  std::vector<Pass> passes(const ExportConfig& config) const override {
    WeightQuantization quantize = config.quantization;
    if (quantize.enabled()) quantize.compute = WeightQuantization::Compute::Float;
    return {
        // The cache as past/present pairs (dynamic) or input./output. pairs the lowering turns
        // into in-place updates of the caller's tensors (static).
        {"lower_state", [](Graph& g, PassReport&) { lower_state_as_io(g); }},
        {"quantize_linears", [quantize](Graph& g, PassReport& r) { r.quantization = quantize_linears(g, quantize); }},
        decompose_pass(pt2_maps_natively, forced_decompositions(config)),
        {"eliminate_dead_code", [](Graph& g, PassReport&) { eliminate_dead_code(g); }},
        // The inputs are the program's keyword arguments: Python identifiers
        // (past_key_values.0.key -> past_key_values_0_key), in the manifest too.
        {"identifier_names",
         [](Graph& g, PassReport&) {
           for (std::vector<Value*>* values : {&g.inputs, &g.outputs})
             for (Value* v : *values) v->name = python_identifier(v->name);
         }},
    };
  }

  std::unique_ptr<ExportWriter> writer(const ExportConfig& config, const std::filesystem::path& dir) const override {
    return std::make_unique<Pt2Writer>(config, dir);
  }

  // --aot: each component's program compiled by AOTInductor (torch._inductor, Python) into a
  // package beside the archive, recorded as the component's `aoti`; runners load that instead.
  void write_runtime_files(nlohmann::json& manifest, const JsonConfig&, const std::filesystem::path& dir) const override {
    const nlohmann::json& backend = manifest.at(manifest::key::kExportConfig).value("backend", nlohmann::json::object());
    if (!backend.value(kAotKey, false)) return;
    for (auto& [name, component] : manifest.at(manifest::key::kComponents).items()) {
      const std::string package = name + ".aoti.pt2";
      const std::string python = python_interpreter();
      std::string output;
      const int status = run_capturing({python, "-m", "hfexport.aot", (dir / component.at("file").get<std::string>()).string(),
                                        component.value(manifest::key::kProgram, "model"), (dir / package).string()},
                                       output);
      if (status != 0) {
        std::string last = output.substr(0, output.find_last_not_of("\n") + 1);
        last = last.substr(last.find_last_of('\n') + 1);
        fail("--aot: AOTInductor could not compile the ", name, " program (", python, " -m hfexport.aot, exit ",
             status, "): ", last.empty() ? "no output" : last);
      }
      component["aoti"] = package;
    }
  }
};

}  // namespace

HFX_REGISTER_BACKEND("pt2", Pt2Backend)

}  // namespace hfx
