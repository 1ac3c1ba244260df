// Architecture registry: HF model_type -> graph builder. Each family registers itself in its own
// file (HFX_REGISTER_ARCH / HFX_REGISTER_DECODER); CMake compiles every file under src/models, so
// adding an architecture touches no shared file.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/checkpoint.h"
#include "ir/graph.h"

namespace hfx {

struct GenerationOptions {
  bool enabled = false;        // export the components a decode loop needs
  bool multi_token = false;    // one decode graph with a symbolic query length
  bool static_cache = false;   // fixed-size cache buffers written in place
  int64_t max_cache_len = 0;   // static cache: upper bound of the cache dim
  int64_t batch_size = 1;      // static cache: fixed batch
};

struct BuildOptions {
  DType dtype = DType::F32;  // compute and weight dtype of the exported graph
  GenerationOptions generation;
};

// One exported graph and the name it is published under in export.json.
struct Component {
  std::string name;
  std::unique_ptr<Graph> graph;
};

struct ExportModel {
  std::string model_type;
  std::vector<std::string> architectures;
  std::vector<Component> components;
};

using ArchBuilder = std::function<ExportModel(const Checkpoint&, const BuildOptions&)>;

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
