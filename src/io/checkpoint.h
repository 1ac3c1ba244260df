// A Hugging Face checkpoint directory: config.json, optional generation_config.json, and one
// model.safetensors or a sharded set described by model.safetensors.index.json.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/json_config.h"
#include "io/safetensors.h"

namespace hfx {

class Checkpoint {
 public:
  explicit Checkpoint(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const JsonConfig& config() const { return *config_; }
  const std::optional<JsonConfig>& generation_config() const { return generation_config_; }
  const TensorInfo* find(const std::string& name) const;
  // Every tensor, sorted by name.
  std::vector<const TensorInfo*> tensors() const;
  // Largest source dtype of the floating tensors (what the checkpoint "is").
  DType dominant_float_dtype() const;

 private:
  void open_shards(const std::vector<std::filesystem::path>& files);
  void open_index(const std::filesystem::path& index_path);

  std::filesystem::path dir_;
  std::optional<JsonConfig> config_;
  std::optional<JsonConfig> generation_config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> tensors_;
};

}  // namespace hfx
