// Source tensors, wherever their bytes live: views into mmap'd safetensors files, or buffers a
// caller owns (the Python API hands a live model's weights over without copying). The IR's lazy
// weights read them through this interface only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace hfx {

// What holds a tensor's bytes: where they come from (for errors) and how to let consumed pages go.
class TensorStorage {
 public:
  virtual ~TensorStorage() = default;
  // Lets the pages behind [p, p + n) leave the resident set once they have been consumed.
  virtual void release(const std::byte* p, size_t n) const = 0;
  virtual std::string location() const = 0;
  // Copies [p, p + n) into file `fd` at `offset` inside the kernel (no page of it mapped or
  // copied here); false when the storage cannot, and the caller writes the bytes itself.
  virtual bool copy_to(const std::byte* p, size_t n, int fd, uint64_t offset) const {
    (void)p, (void)n, (void)fd, (void)offset;
    return false;
  }
};

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  const TensorStorage* storage = nullptr;  // null: plain memory, nothing to release

  int64_t numel() const;
  void release(const std::byte* p, size_t n) const {
    if (storage) storage->release(p, n);
  }
  void release() const { release(data, nbytes); }
  std::string location() const { return storage ? storage->location() : "memory"; }
};

// A checkpoint's tensors by name.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual const TensorView* find(const std::string& name) const = 0;
  virtual std::vector<const TensorView*> tensors() const = 0;  // sorted by name
  virtual std::string where() const = 0;                       // the checkpoint, for errors
};

// Tensors in buffers the caller owns and keeps alive for as long as the source is used (a live
// model's parameters, shared without a copy).
class MemoryTensorSource final : public TensorSource {
 public:
  explicit MemoryTensorSource(std::string where = "memory") : where_(std::move(where)) {}
  // Throws when the byte count does not match dtype x shape or the name is taken.
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data, size_t nbytes);
  const TensorView* find(const std::string& name) const override;
  std::vector<const TensorView*> tensors() const override;
  std::string where() const override { return where_; }

 private:
  std::string where_;
  std::map<std::string, std::unique_ptr<TensorView>> tensors_;
};

}  // namespace hfx
