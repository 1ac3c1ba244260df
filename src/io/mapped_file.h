// A read-only memory map of a whole file. Pages can be released after use so that streaming
// a checkpoint through the exporter does not grow the resident set to the checkpoint's size.
#pragma once
#include <cstddef>
#include <filesystem>
#include <string>

#include "core/tensor_view.h"

namespace hfx {

class MappedFile final : public TensorStorage {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile() override;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // Drops the pages of [ptr, ptr + n) from this process's resident set (they stay in page cache).
  void release(const std::byte* ptr, size_t n) const override;
  std::string location() const override { return path_.string(); }
  // copy_file_range from the file itself: an export's straight weight copies skip user space.
  bool copy_to(const std::byte* ptr, size_t n, int fd, uint64_t offset) const override;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hfx
