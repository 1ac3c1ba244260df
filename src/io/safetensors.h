// Safetensors reader: mmap'd, header validated before any tensor is used.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor_view.h"
#include "io/mapped_file.h"

namespace hfx {

// Largest header we accept; the reference implementation uses the same bound.
inline constexpr uint64_t kMaxSafetensorsHeader = 100u << 20;

// A tensor of a safetensors file: a view into the file's mapping.
struct TensorInfo : TensorView {
  const MappedFile* file = nullptr;
};

class SafetensorsFile {
 public:
  // Throws Error naming the file and the defect for anything malformed.
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_->path(); }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::unique_ptr<MappedFile> file_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace hfx
