// PyTorch program backend: lowers the IR to ATen and writes model.pt2, the archive
// torch.export.save writes (zip of models/<program>.json, raw weight records and their configs),
// with no torch involved. torch.export.load reads the program named `model`.
#include <map>
#include <tuple>

#include "backends/backend.h"
#include "backends/pt2/lowering.h"
#include "backends/pt2/stored_zip.h"
#include "backends/weight_file.h"
#include "core/error.h"
#include "io/manifest.h"
#include "passes/passes.h"

namespace hfx {
namespace {

constexpr const char* kArchive = "model.pt2";
constexpr const char* kRoot = "model/";  // torch names the root folder after the file's stem

// A stored tensor record: weights (parameters) and lifted constants, each stored once.
struct Record {
  std::string path;  // relative to the root, e.g. data/weights/weight_0
  WeightFile::Span span;
};

class Pt2Writer final : public ExportWriter {
 public:
  explicit Pt2Writer(const std::filesystem::path& dir) : path_(dir / kArchive), data_(path_, StoredZip::kAlignment) {}

  WrittenComponent write(const std::string& name, Graph& graph) override {
    Pt2Lowering lowering(graph);
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

    programs_.push_back({name, lowering.program().dump(), nlohmann::json{{"config", weights}}.dump(),
                         nlohmann::json{{"config", constants}}.dump()});
    WrittenComponent written{kArchive, {}, {}, {}};
    for (const Value* v : graph.inputs) written.inputs.push_back({v->name, v->dtype, v->shape});
    for (const Value* v : graph.outputs) written.outputs.push_back({v->name, v->dtype, v->shape});
    return written;
  }

  void finish() override {
    data_.close();
    StoredZip zip(path_);
    uint64_t end = 0;
    for (const Record& r : records_) {
      zip.adopt(kRoot + r.path, end, r.span.offset, r.span.length);
      end = r.span.offset + r.span.length;
    }
    for (const Program& p : programs_) {
      zip.append(std::string(kRoot) + "models/" + p.name + ".json", p.json);
      zip.append(std::string(kRoot) + "data/weights/" + p.name + "_weights_config.json", p.weights);
      zip.append(std::string(kRoot) + "data/constants/" + p.name + "_constants_config.json", p.constants);
      zip.append(std::string(kRoot) + "data/sample_inputs/" + p.name + ".pt", "");  // no example inputs
    }
    zip.append(std::string(kRoot) + "archive_format", "pt2");
    zip.append(std::string(kRoot) + "archive_version", "0");
    zip.append(std::string(kRoot) + ".data/version", "6\n");
    zip.append(std::string(kRoot) + "byteorder", "little");
    zip.finish();
  }

 private:
  struct Program {
    std::string name, json, weights, constants;
  };
  std::filesystem::path path_;
  WeightFile data_;
  std::map<std::tuple<std::string, DType, bool>, size_t> stored_;  // -> index into records_ (+ pending)
  std::vector<Record> records_;
  std::vector<Program> programs_;
  int weight_count_ = 0, constant_count_ = 0;
};

class Pt2Backend final : public Backend {
 public:
  std::string_view format() const override { return "pt2"; }

  BackendCapabilities capabilities() const override {
    return {{DType::F32, DType::F16, DType::BF16}, "", {}, "generation programs are not written yet", false};
  }

  std::string_view runtime_package() const override { return "torch"; }

  void check(const ExportConfig& config, const FieldSpelling& spell) const override {
    for (const auto& [key, value] : config.backend.items())
      if (key != "decompose") fail(spell("backend"), ": unknown pt2 option '", key, "' (known: decompose)");
    forced_decompositions(config, spell);
    if (config.quantization.compute == WeightQuantization::Compute::Int8)
      fail(spell("quantization.compute"), " int8: a .pt2 program dequantizes its weights and computes in float; "
           "leave ", spell("quantization.compute"), " unset");
  }

  std::vector<Pass> passes(const ExportConfig& config) const override {
    WeightQuantization quantize = config.quantization;
    if (quantize.enabled()) quantize.compute = WeightQuantization::Compute::Float;
    return {
        {"quantize_linears", [quantize](Graph& g, PassReport& r) { r.quantization = quantize_linears(g, quantize); }},
        decompose_pass(pt2_maps_natively, forced_decompositions(config)),
        {"eliminate_dead_code", [](Graph& g, PassReport&) { eliminate_dead_code(g); }},
    };
  }

  std::unique_ptr<ExportWriter> writer(const ExportConfig&, const std::filesystem::path& dir) const override {
    return std::make_unique<Pt2Writer>(dir);
  }
};

}  // namespace

HFX_REGISTER_BACKEND("pt2", Pt2Backend)

}  // namespace hfx
