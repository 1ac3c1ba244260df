// OpenVINO backend: lowers the IR to public opsets and writes IR v11 (openvino_model.xml + .bin).
#include <deque>
#include <limits>
#include <map>
#include <set>

#include "backends/backend.h"
#include "backends/openvino/ir_xml.h"
#include "backends/openvino/lowering.h"
#include "backends/weight_file.h"
#include "core/error.h"
#include "io/manifest.h"
#include "ir/builder.h"
#include "passes/passes.h"

namespace hfx {
namespace {

constexpr uint64_t kBinAlignment = 4096;  // page-aligned: unaligned chunk writes cost the kernel dearly

// A component's file name without `.xml` / `.bin`, as optimum-intel names them and OpenVINO GenAI's
// pipelines look for them: openvino_model for the model, openvino_<role>_model for the others, and
// the vision-language pipeline's own names for its parts.
std::string openvino_file_stem(Role role) {
  if (is_main_role(role)) return "openvino_model";
  switch (role) {
    case Role::TextDecoder: return "openvino_language_model";
    case Role::TokenEmbedding: return "openvino_text_embeddings_model";
    case Role::VisionEncoder: return "openvino_vision_embeddings_model";
    default: return "openvino_" + std::string(role_name(role)) + "_model";
  }
}

// One export's OpenVINO files: an .xml per component and its .bin (OpenVINO reads weights from
// the .bin named after the .xml; generation is one stateful model, so weights are stored once).
class OpenVinoWriter final : public ExportWriter {
 public:
  OpenVinoWriter(const ExportConfig& config, const std::filesystem::path& dir) : dtype_(config.dtype), dir_(dir) {}

  WrittenComponent write(Role role, Graph& graph) override {
    const std::string name(role_name(role));
    OvNetwork net;
    OvLowering lowering(graph, net, dtype_);
    lowering.lower_graph();

    const std::string stem = openvino_file_stem(role);
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

    WrittenComponent written{stem + ".xml", "", {stem + ".bin"}, {}, {}, lowering.stateful()};
    std::set<const Value*> state_values;
    for (const StatePair& s : graph.state_pairs)
      if (s.carried() || s.self_initialised()) state_values.insert({s.input, s.output});
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
            true,
            {"openvino_genai"}};
  }

  std::string_view runtime_package() const override { return "openvino"; }

  std::string_view display_name() const override { return "OpenVINO"; }
  std::vector<BackendOption> options() const override { return {decompose_option()}; }

  void check(const ExportConfig& config, const FieldSpelling& spell) const override {
    check_backend_options(*this, config, spell);
    forced_decompositions(config, spell);
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
    // An encoder-decoder's decoder projects its cross-attention state into variables on the first
    // call, from encoder_hidden_states, as optimum-intel writes it and OpenVINO GenAI's
    // WhisperPipeline runs it.
    if (graph.generation.enabled) {
      graph.generation.cross_state = GenerationConfig::CrossState::DecoderVariable;
      graph.generation.decoder_mask = false;  // its callers pass none
    }
    return graph;
  }

  std::vector<Pass> passes(const ExportConfig& config) const override {
    WeightQuantization quantize = config.quantization;
    if (quantize.enabled()) quantize.compute = WeightQuantization::Compute::Float;  // the IR holds no choice
    return {
        // The cache as past/present pairs first; the writer turns each pair into a variable.
        {"lower_state", [](Graph& g, PassReport&) { lower_state_as_io(g); }},
        {"quantize_linears", [quantize](Graph& g, PassReport& r) { r.quantization = quantize_linears(g, quantize); }},
        decompose_pass(ov_maps_natively, forced_decompositions(config)),
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
