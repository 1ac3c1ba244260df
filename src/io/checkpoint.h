// A Hugging Face checkpoint: config.json, optional generation_config.json, and the tensors — from
// a directory (one model.safetensors or a sharded set described by model.safetensors.index.json),
// or from any TensorSource (a live model's buffers).
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor_view.h"
#include "io/json_config.h"
#include "io/safetensors.h"

namespace hfx {

// The tensors of a checkpoint directory's safetensors files, validated and mmap'd.
class SafetensorsSource final : public TensorSource {
 public:
  explicit SafetensorsSource(const std::filesystem::path& dir);
  const TensorView* find(const std::string& name) const override;
  std::vector<const TensorView*> tensors() const override;
  std::string where() const override { return dir_.string(); }

 private:
  void open_shards(const std::vector<std::filesystem::path>& files);
  void open_index(const std::filesystem::path& index_path);

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> tensors_;
};

class Checkpoint {
 public:
  explicit Checkpoint(const std::filesystem::path& dir);
  // A checkpoint whose tensors come from `tensors`; `dir` (optional) holds its companion files.
  Checkpoint(JsonConfig config, std::optional<JsonConfig> generation_config, std::unique_ptr<TensorSource> tensors,
             std::filesystem::path dir = {});

  // Empty for a checkpoint that lives only in memory.
  const std::filesystem::path& dir() const { return dir_; }
  // Where config.json, the weights and the tokenizer files are: dir(), or in a
  // sentence-transformers folder of the older layout its Transformer module's folder
  // (0_Transformer/, named in modules.json) while dir() holds modules.json.
  const std::filesystem::path& model_dir() const { return model_dir_.empty() ? dir_ : model_dir_; }
  const JsonConfig& config() const { return *config_; }
  const std::optional<JsonConfig>& generation_config() const { return generation_config_; }
  const TensorView* find(const std::string& name) const { return tensors_->find(name); }
  // Every tensor, sorted by name.
  std::vector<const TensorView*> tensors() const { return tensors_->tensors(); }
  // Where the tensors are, for errors (the directory, or the source's own name).
  std::string where() const { return tensors_->where(); }
  // Largest source dtype of the floating tensors (what the checkpoint "is").
  DType dominant_float_dtype() const;

 private:
  std::filesystem::path dir_, model_dir_;
  std::optional<JsonConfig> config_;
  std::optional<JsonConfig> generation_config_;
  std::unique_ptr<TensorSource> tensors_;
};

}  // namespace hfx
