// Streams constants from the checkpoint mmap into one data file (ONNX external data, OpenVINO
// .bin, ...): converted to the target dtype, optionally transposed, in bounded chunks whose
// source pages are released as soon as they are written.
#pragma once
#include <cstdint>
#include <filesystem>
#include <vector>

#include "ir/graph.h"

namespace hfx {

class WeightFile {
 public:
  WeightFile(const std::filesystem::path& path, uint64_t alignment);
  ~WeightFile();
  WeightFile(const WeightFile&) = delete;
  WeightFile& operator=(const WeightFile&) = delete;

  struct Span {
    uint64_t offset, length;
  };
  // Appends `v` (a constant) as v.dtype, transposed when its ConstantData says so.
  Span append(const Value& v);
  void close();
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_at(const void* data, size_t n, uint64_t offset);

  std::filesystem::path path_;
  uint64_t alignment_;
  int fd_ = -1;
  uint64_t end_ = 0;
  std::vector<std::byte> buffer_;
  std::vector<std::byte> transposed_;
};

}  // namespace hfx
