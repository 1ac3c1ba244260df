// Architecture registry: HF model_type -> graph builder. Each family registers itself in its own
// file (HFX_REGISTER_ARCH / HFX_REGISTER_DECODER); CMake compiles every file under src/models, so
// adding an architecture touches no shared file.
#pragma once
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/export_config.h"
#include "core/task.h"
#include "io/checkpoint.h"
#include "ir/component.h"
#include "ir/graph.h"

namespace hfx {

// One exported graph and its role (which names it in export.json and in the backend's files).
struct Component {
  Role role;
  std::unique_ptr<Graph> graph;
  std::string_view name() const { return role_name(role); }
};

// Components a runtime's own pipeline wants in place of some of the export's (OpenVINO GenAI's
// VLMPipeline takes a Qwen-VL tower as patch embedding and merger, computing RoPE and masks itself).
struct PipelineLayout {
  std::string pipeline;        // as BackendCapabilities::pipeline_layouts names it
  std::vector<Role> replaces;  // the components it stands for
  std::vector<Component> components;
};

struct ExportModel {
  std::string model_type;
  std::vector<std::string> architectures;
  std::vector<Component> components;
  std::set<std::string> dims;  // every dim name the graphs' interfaces have (fixed ones included)
  // A decode loop must rebuild its cache (run the whole sequence again) when the sequence first
  // reaches this length: Phi-3's longrope switches factors there, as transformers' generate does.
  int64_t rebuild_cache_at_length = 0;
  Task task = Task::TextGeneration;  // what the components compute (export.json's `task`)
  // What a sentence-transformers checkpoint's Pooling / Normalize modules do (export.json's
  // `sentence_pooling`), for pipelines that pool a feature-extraction export themselves.
  nlohmann::json sentence_pooling;
  // What a vision-language model's runner needs to merge images into the prompt (export.json's
  // `image_tokens`: image_token_id, the features per image).
  nlohmann::json image_tokens;
  // Written instead of the components they replace by the formats that declare their pipeline.
  std::vector<PipelineLayout> pipeline_layouts;
};

// Builds the components `config` asks for. The config is the one the graphs are built for, as the
// backend resolved it (its dtype is the graph dtype; a stateful backend asks for one decode graph).
using ArchBuilder = std::function<ExportModel(const Checkpoint&, const ExportConfig&)>;

// Adds `model_type` to the registry (a second registration of one type is a bug); returns true
// so that it can initialise a namespace-scope constant.
bool register_arch(const std::string& model_type, ArchBuilder builder);
// Throws Error listing the supported model types when `model_type` is unknown.
const ArchBuilder& find_arch(const std::string& model_type);
// Sorted.
std::vector<std::string> supported_model_types();

#define HFX_CONCAT_INNER(a, b) a##b
#define HFX_CONCAT(a, b) HFX_CONCAT_INNER(a, b)
#define HFX_REGISTER_ARCH(model_type, builder) \
  namespace {                                  \
  const bool HFX_CONCAT(hfx_registered_arch_, __LINE__) = ::hfx::register_arch(model_type, builder); \
  }

}  // namespace hfx
