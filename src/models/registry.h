// Architecture registry: HF model_type -> graph builder. Adding an architecture is one file plus
// one line in registry.cpp.
#pragma once
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

using ArchBuilder = ExportModel (*)(const Checkpoint&, const BuildOptions&);

// Throws Error listing the supported model types when `model_type` is unknown.
ArchBuilder find_arch(const std::string& model_type);
std::vector<std::string> supported_model_types();

ExportModel build_llama_family(const Checkpoint& ckpt, const BuildOptions& opt);

}  // namespace hfx
