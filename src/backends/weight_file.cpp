#include "backends/weight_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace hfx {

namespace {
constexpr size_t kChunkBytes = 8u << 20;  // bounds the converted data held in memory at once
}

WeightFile::WeightFile(const std::filesystem::path& path, uint64_t alignment)
    : path_(path), alignment_(alignment) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(path.string(), ": cannot create: ", std::strerror(errno));
}

WeightFile::~WeightFile() {
  if (fd_ >= 0) ::close(fd_);
}

void WeightFile::close() {
  if (fd_ >= 0 && ::ftruncate(fd_, static_cast<off_t>(end_)) != 0)
    fail(path_.string(), ": cannot finish: ", std::strerror(errno));
  if (fd_ >= 0 && ::close(fd_) != 0) fail(path_.string(), ": cannot close: ", std::strerror(errno));
  fd_ = -1;
}

void WeightFile::write_at(const void* data, size_t n, uint64_t offset) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(path_.string(), ": write failed: ", std::strerror(errno));
    }
    p += w, n -= static_cast<size_t>(w), offset += static_cast<uint64_t>(w);
  }
}

WeightFile::Span WeightFile::append(const Value& v) {
  HFX_CHECK(v.is_constant(), "append of non-constant ", v.name);
  const ConstantData& c = *v.constant;
  const size_t in_size = dtype_size(c.src_dtype), out_size = dtype_size(v.dtype);
  const size_t numel = c.nbytes() / in_size;
  const bool convert = c.src_dtype != v.dtype;
  HFX_CHECK(!convert || (is_float(c.src_dtype) && is_float(v.dtype)), "cast of ", v.name);
  const uint64_t offset = (end_ + alignment_ - 1) / alignment_ * alignment_;
  const std::byte* src = c.bytes();
  if (!c.transpose) {
    const size_t chunk = std::max<size_t>(1, kChunkBytes / std::max(in_size, out_size));
    for (size_t i = 0; i < numel; i += chunk) {
      const size_t n = std::min(chunk, numel - i);
      if (convert) {
        buffer_.resize(n * out_size);
        convert_floats(src + i * in_size, c.src_dtype, buffer_.data(), v.dtype, n);
        write_at(buffer_.data(), n * out_size, offset + i * out_size);
      } else {
        write_at(src + i * in_size, n * in_size, offset + i * in_size);
      }
      if (c.tensor) c.tensor->file->release(src + i * in_size, n * in_size);
    }
  } else {
    // Source [rows, cols] -> destination [cols, rows]: take a band of source rows, transpose it in
    // memory, and write each destination row's segment for that band.
    HFX_CHECK(c.src_shape.size() == 2, "transpose of non-matrix ", v.name);
    const auto rows = static_cast<size_t>(c.src_shape[0]), cols = static_cast<size_t>(c.src_shape[1]);
    const size_t band = std::max<size_t>(1, kChunkBytes / std::max<size_t>(1, cols * std::max(in_size, out_size)));
    for (size_t r0 = 0; r0 < rows; r0 += band) {
      const size_t nr = std::min(band, rows - r0);
      buffer_.resize(nr * cols * out_size);
      convert_floats(src + r0 * cols * in_size, c.src_dtype, buffer_.data(), v.dtype, nr * cols);
      transposed_.resize(buffer_.size());
      for (size_t r = 0; r < nr; ++r)
        for (size_t col = 0; col < cols; ++col)
          std::memcpy(transposed_.data() + (col * nr + r) * out_size, buffer_.data() + (r * cols + col) * out_size,
                      out_size);
      for (size_t col = 0; col < cols; ++col)
        write_at(transposed_.data() + col * nr * out_size, nr * out_size, offset + (col * rows + r0) * out_size);
      if (c.tensor) c.tensor->file->release(src + r0 * cols * in_size, nr * cols * in_size);
    }
  }
  const uint64_t length = numel * out_size;
  end_ = offset + length;
  return {offset, length};
}

}  // namespace hfx
