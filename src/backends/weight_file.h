// Streams constants from the checkpoint mmap into one data file (ONNX external data, OpenVINO
// .bin, ...): converted to the target dtype, optionally transposed, in bounded chunks whose
// source pages are released as soon as they are written.
#pragma once
#include <cstdint>
#include <filesystem>
#include <vector>

#include "ir/graph.h"
#include "io/output_dir.h"  // pwrite_fully, check_room

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
  // Appends `v` (a constant) as v.dtype, transposed when `transpose` is set (2-D only).
  Span append(const Value& v, bool transpose = false);
  struct Item {
    const Value* value;
    bool transpose;
    uint64_t reserve_before = 0;  // bytes kept free ahead of the item (a container's record header)
  };
  // The bytes `v` (a constant of static shape) takes in the file, as v.dtype.
  static uint64_t stored_bytes(const Value& v);
  // Appends all items, converting and writing them on several threads; spans in item order.
  std::vector<Span> append_all(const std::vector<Item>& items);
  void close();
  const std::filesystem::path& path() const { return path_; }

 private:
  struct Scratch {
    std::vector<std::byte> converted, transposed;
    std::vector<float> scales;
  };
  void write_at(const void* data, size_t n, uint64_t offset) const;
  void write_item(const Item& item, uint64_t offset, Scratch& scratch) const;
  void write_quantized(const Value& v, uint64_t offset, Scratch& scratch) const;

  std::filesystem::path path_;
  uint64_t alignment_;
  int fd_ = -1;
  uint64_t end_ = 0;
};

}  // namespace hfx
