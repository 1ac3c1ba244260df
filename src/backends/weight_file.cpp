#include "backends/weight_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/progress.h"
#include "core/quantize.h"

namespace hfx {

namespace {
// Straight copies go in 1 MiB chunks (measured: 16 MiB pwrites cost several times more kernel
// time); a transposed band is larger so that each destination row's segment stays long.
constexpr size_t kChunkBytes = 1u << 20;
constexpr size_t kBandBytes = 16u << 20;

// dst[c * rows + r] = src[r * cols + c], in square tiles so both sides stay in cache. Elements
// are copied as bytes: the source may be a checkpoint's mapping, whose tensors need not be
// aligned to their element size (the copies compile to plain loads and stores).
template <size_t N>
void transpose_tiles(const std::byte* src, std::byte* dst, size_t rows, size_t cols) {
  constexpr size_t kTile = 32;
  for (size_t r0 = 0; r0 < rows; r0 += kTile)
    for (size_t c0 = 0; c0 < cols; c0 += kTile) {
      const size_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (size_t r = r0; r < r1; ++r)
        for (size_t c = c0; c < c1; ++c) std::memcpy(dst + (c * rows + r) * N, src + (r * cols + c) * N, N);
    }
}

void transpose_matrix(const std::byte* src, std::byte* dst, size_t rows, size_t cols, size_t elem_size) {
  switch (elem_size) {
    case 1: return transpose_tiles<1>(src, dst, rows, cols);
    case 2: return transpose_tiles<2>(src, dst, rows, cols);
    case 4: return transpose_tiles<4>(src, dst, rows, cols);
    case 8: return transpose_tiles<8>(src, dst, rows, cols);
    default: fail("internal error: transpose of ", elem_size, "-byte elements");
  }
}

}  // namespace

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

void WeightFile::write_at(const void* data, size_t n, uint64_t offset) const {
  pwrite_fully(fd_, data, n, offset, path_);
  progress::add(n);
}

namespace {

// What the item occupies in the file: its value's (static) shape in its dtype.
uint64_t output_bytes(const WeightFile::Item& item) {
  const Value& v = *item.value;
  HFX_CHECK(v.is_constant(), "weight file item '", v.name, "' is not a constant");
  uint64_t numel = 1;
  for (const Dim& d : v.shape) numel *= static_cast<uint64_t>(d.value());
  return numel * dtype_size(v.dtype);
}

// The contiguous pieces of a constant that is its source bytes as they are (a tensor, owned bytes,
// or a stack of those): streamed without evaluating anything. Empty for other expressions.
struct Segment {
  const std::byte* data;
  size_t nbytes;
  const TensorView* tensor;  // null for owned bytes
};

bool segments(const ConstantData& c, std::vector<Segment>& out) {
  using Op = ConstantData::Op;
  switch (c.op) {
    case Op::Tensor: out.push_back({c.tensor->data, c.tensor->nbytes, c.tensor}); return true;
    case Op::Owned: out.push_back({c.owned.data(), c.owned.size(), nullptr}); return true;
    case Op::Stack:
      for (const auto& part : c.args)
        if (!segments(*part, out)) return false;
      return true;
    case Op::View: return segments(*c.args[0], out);
    default: return false;
  }
}

void release(const Segment& s, const std::byte* p, size_t n) {
  if (s.tensor) s.tensor->release(p, n);
}

// Writes rows [first, first + count) of what `c` yields into `out`, as `dtype`; source pages are
// released once read. Expressions evaluate their operands' rows (a transpose reads its operand's
// columns in bands), so memory stays bounded by the band.
void read_rows(const ConstantData& c, size_t first, size_t count, DType dtype, std::byte* out) {
  using Op = ConstantData::Op;
  const size_t elems = c.row_elems(), out_size = dtype_size(dtype);
  switch (c.op) {
    case Op::Tensor:
    case Op::Owned: {
      const size_t row_bytes = elems * dtype_size(c.src_dtype);
      const std::byte* src = c.bytes() + first * row_bytes;
      if (dtype == c.src_dtype) std::memcpy(out, src, count * row_bytes);
      else convert_floats(src, c.src_dtype, out, dtype, count * elems);
      if (c.op == Op::Tensor) c.tensor->release(src, count * row_bytes);
      return;
    }
    case Op::Stack: {
      size_t start = 0;  // first row of the current part in the whole
      for (const auto& part : c.args) {
        const size_t rows = part->rows();
        const size_t lo = std::max(first, start), hi = std::min(first + count, start + rows);
        if (lo < hi) read_rows(*part, lo - start, hi - lo, dtype, out + (lo - first) * elems * out_size);
        start += rows;
      }
      return;
    }
    case Op::SliceRows:
      return read_rows(*c.args[0], static_cast<size_t>(c.begin) + first, count, dtype, out);
    case Op::AddScalar: {
      std::vector<float> values(count * elems);
      read_rows(*c.args[0], first, count, DType::F32, reinterpret_cast<std::byte*>(values.data()));
      for (float& v : values) v += static_cast<float>(c.scalar);
      convert_floats(values.data(), DType::F32, out, dtype, values.size());
      return;
    }
    case Op::Transpose: {  // out[i][r] = x[r][first + i] for x = [R, C]
      const ConstantData& x = *c.args[0];
      const size_t rows = x.rows(), cols = x.row_elems();
      const size_t band = std::max<size_t>(1, kBandBytes / std::max<size_t>(1, cols * out_size));
      std::vector<std::byte> tmp;
      for (size_t r0 = 0; r0 < rows; r0 += band) {
        const size_t nr = std::min(band, rows - r0);
        tmp.resize(nr * cols * out_size);
        read_rows(x, r0, nr, dtype, tmp.data());
        for (size_t i = 0; i < count; ++i)
          for (size_t r = 0; r < nr; ++r)
            std::memcpy(out + (i * rows + r0 + r) * out_size, tmp.data() + (r * cols + first + i) * out_size, out_size);
      }
      return;
    }
    case Op::View: {  // the same elements, grouped into rows of another length
      const ConstantData& x = *c.args[0];
      const size_t in_elems = x.row_elems();
      if (elems % in_elems == 0) return read_rows(x, first * (elems / in_elems), count * (elems / in_elems), dtype, out);
      const size_t per = in_elems / elems;  // rows of the view per row of x
      const size_t x_first = first / per, x_last = (first + count + per - 1) / per;
      std::vector<std::byte> tmp((x_last - x_first) * in_elems * out_size);
      read_rows(x, x_first, x_last - x_first, dtype, tmp.data());
      std::memcpy(out, tmp.data() + (first - x_first * per) * elems * out_size, count * elems * out_size);
      return;
    }
    case Op::InterleaveRows: {
      const size_t row_bytes = elems * out_size;
      for (size_t r = first; r < first + count; ++r)
        read_rows(*c.args[r % 2], r / 2, 1, dtype, out + (r - first) * row_bytes);
      return;
    }
    case Op::StridedRows: {
      const size_t row_bytes = elems * out_size;
      for (size_t r = first; r < first + count; ++r)
        read_rows(*c.args[0], static_cast<size_t>(c.begin + c.end * static_cast<int64_t>(r)), 1, dtype,
                  out + (r - first) * row_bytes);
      return;
    }
    case Op::Mxfp4: {
      // E2M1 values by their 4-bit code (sign in bit 3); two per byte, the low nibble first; each
      // block of 32 scaled by 2^(e - 127) for its E8M0 exponent e.
      static constexpr float kFp4[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
      const ConstantData &blocks = *c.args[0], &scales = *c.args[1];
      const size_t groups = scales.row_elems();
      std::vector<std::byte> codes(count * groups * 16), exps(count * groups);
      read_rows(blocks, first, count, DType::U8, codes.data());
      read_rows(scales, first, count, DType::U8, exps.data());
      std::vector<float> values(count * elems);
      for (size_t g = 0; g < count * groups; ++g) {
        const float scale = std::ldexp(1.0f, static_cast<int>(exps[g]) - 127);
        for (size_t j = 0; j < 16; ++j) {
          const auto byte = static_cast<uint8_t>(codes[g * 16 + j]);
          values[g * 32 + 2 * j] = kFp4[byte & 0x0f] * scale;
          values[g * 32 + 2 * j + 1] = kFp4[byte >> 4] * scale;
        }
      }
      convert_floats(values.data(), DType::F32, out, dtype, values.size());
      return;
    }
    case Op::Quantize:
      fail("internal error: rows of a quantized constant are written by write_quantized");
  }
}

// Calls fn(band, first_row, rows) for consecutive bands of at most `band` rows of what `c` yields,
// each converted to `dtype` in `scratch`.
template <class Fn>
void for_each_row_band(const ConstantData& c, DType dtype, size_t band, std::vector<std::byte>& scratch, Fn&& fn) {
  const size_t rows = c.rows(), row_bytes = c.row_elems() * dtype_size(dtype);
  if (row_bytes == 0) return;  // no columns: nothing to write
  for (size_t r0 = 0; r0 < rows; r0 += band) {
    const size_t nr = std::min(band, rows - r0);
    scratch.resize(nr * row_bytes);
    read_rows(c, r0, nr, dtype, scratch.data());
    fn(scratch.data(), r0, nr);
  }
}

}  // namespace

void WeightFile::write_item(const Item& item, uint64_t offset, Scratch& scratch) const {
  const Value& v = *item.value;
  HFX_CHECK(v.is_constant(), "append of non-constant ", v.name);
  const ConstantData* c = v.constant.get();
  if (c->quantized) {
    HFX_CHECK(!item.transpose, "transposed quantized constant ", v.name);
    return write_quantized(v, offset, scratch);
  }
  HFX_CHECK(c->src_dtype == v.dtype || (is_float(c->src_dtype) && is_float(v.dtype)), "cast of ", v.name, " from ", dtype_name(c->src_dtype), " to ", dtype_name(v.dtype));
  bool transpose = item.transpose;
  if (transpose && c->op == ConstantData::Op::Transpose) {  // stored transposed: the two cancel
    c = c->args[0].get();
    transpose = false;
  }
  const size_t in_size = dtype_size(c->src_dtype), out_size = dtype_size(v.dtype);
  std::vector<Segment> pieces;
  if (!transpose && segments(*c, pieces)) {  // the source bytes as they are: stream them
    const bool convert = c->src_dtype != v.dtype;
    const size_t chunk = std::max<size_t>(1, kChunkBytes / std::max(in_size, out_size));
    for (const Segment& s : pieces) {
      if (!convert && s.tensor && s.tensor->storage && s.tensor->storage->copy_to(s.data, s.nbytes, fd_, offset)) {
        progress::add(s.nbytes);
        offset += s.nbytes;
        continue;
      }
      const size_t numel = s.nbytes / in_size;
      for (size_t i = 0; i < numel; i += chunk) {
        const size_t n = std::min(chunk, numel - i);
        const std::byte* src = s.data + i * in_size;
        if (convert) {
          scratch.converted.resize(n * out_size);
          convert_floats(src, c->src_dtype, scratch.converted.data(), v.dtype, n);
          write_at(scratch.converted.data(), n * out_size, offset + i * out_size);
        } else {
          write_at(src, n * in_size, offset + i * in_size);
        }
        release(s, src, n * in_size);
      }
      offset += numel * out_size;
    }
    return;
  }
  const size_t rows = c->rows(), cols = c->row_elems();
  const size_t band = std::max<size_t>(1, kBandBytes / std::max<size_t>(1, cols * std::max(in_size, out_size)));
  if (!transpose) {  // an expression: evaluate it band by band
    for_each_row_band(*c, v.dtype, band, scratch.converted, [&](const std::byte* rows_data, size_t first, size_t nr) {
      write_at(rows_data, nr * cols * out_size, offset + first * cols * out_size);
    });
    return;
  }
  // Source [rows, cols] -> destination [cols, rows]: take a band of source rows, transpose it in
  // memory, and write each destination row's segment for that band.
  HFX_CHECK(c->src_shape.size() == 2, "transpose of non-matrix ", v.name);
  auto write_band = [&](const std::byte* rows_data, size_t first, size_t nr) {
    scratch.transposed.resize(nr * cols * out_size);
    transpose_matrix(rows_data, scratch.transposed.data(), nr, cols, out_size);
    for (size_t col = 0; col < cols; ++col)
      write_at(scratch.transposed.data() + col * nr * out_size, nr * out_size, offset + (col * rows + first) * out_size);
  };
  if (c->op == ConstantData::Op::Tensor && c->src_dtype == v.dtype) {  // transposed straight from the mapping
    const Segment whole{c->tensor->data, c->tensor->nbytes, c->tensor};
    for (size_t first = 0; first < rows; first += band) {
      const size_t nr = std::min(band, rows - first);
      const std::byte* src = whole.data + first * cols * in_size;
      write_band(src, first, nr);
      release(whole, src, nr * cols * in_size);
    }
    return;
  }
  for_each_row_band(*c, v.dtype, band, scratch.converted, write_band);
}

// Quantizes bands of the source matrix's rows ([N, K]) and writes the requested half: codes
// (K * bits / 8 bytes per row) or scales (K / group values per row, in v.dtype).
void WeightFile::write_quantized(const Value& v, uint64_t offset, Scratch& scratch) const {
  const ConstantData& c = *v.constant;
  const ConstantData& matrix = *c.args.at(0);
  const WeightQuantization& q = c.quantized->scheme;
  HFX_CHECK(matrix.src_shape.size() == 2 && is_float(matrix.src_dtype), "quantization of ", v.name);
  const size_t cols = matrix.row_elems();
  const size_t groups = cols / static_cast<size_t>(q.group_size);
  const size_t row_bytes = c.quantized->scales ? groups * dtype_size(v.dtype) : cols * static_cast<size_t>(q.bits) / 8;
  const size_t band = std::max<size_t>(1, kBandBytes / (cols * sizeof(float)));
  for_each_row_band(matrix, DType::F32, band, scratch.converted, [&](const std::byte* rows_data, size_t first, size_t nr) {
    scratch.transposed.resize(nr * cols * static_cast<size_t>(q.bits) / 8);
    scratch.scales.resize(nr * groups);
    quantize_rows(reinterpret_cast<const float*>(rows_data), nr, cols, q,
                  reinterpret_cast<uint8_t*>(scratch.transposed.data()), scratch.scales.data());
    const std::byte* out = scratch.transposed.data();
    std::vector<std::byte> converted_scales;
    if (c.quantized->scales) {
      converted_scales.resize(nr * groups * dtype_size(v.dtype));
      convert_floats(scratch.scales.data(), DType::F32, converted_scales.data(), v.dtype, nr * groups);
      out = converted_scales.data();
    }
    write_at(out, nr * row_bytes, offset + first * row_bytes);
  });
}

uint64_t WeightFile::stored_bytes(const Value& v) { return output_bytes({&v, false}); }

std::vector<WeightFile::Span> WeightFile::append_all(const std::vector<Item>& items) {
  std::vector<Span> spans;
  for (const Item& item : items) {
    const uint64_t offset = (end_ + item.reserve_before + alignment_ - 1) / alignment_ * alignment_;
    spans.push_back({offset, output_bytes(item)});
    end_ = offset + spans.back().length;
  }
  check_room(fd_, end_, path_);  // refused before writing, rather than when the disk fills
  uint64_t total = 0;
  for (const Span& s : spans) total += s.length;
  progress::expect(total);
  // Items are independent byte ranges of one file: workers take the next item and pwrite it.
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    Scratch scratch;
    for (size_t i = next++; i < items.size(); i = next++) {
      try {
        write_item(items[i], spans[i].offset, scratch);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next = items.size();
      }
    }
  };
  // A worker per 64 MiB written, up to 4: each holds a band of scratch, which a small export's
  // few milliseconds do not repay.
  const size_t workers = std::clamp<size_t>(std::min<size_t>(std::thread::hardware_concurrency(), total >> 26), 1, 4);
  std::vector<std::thread> threads;
  for (size_t i = 1; i < std::min(workers, items.size()); ++i) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  return spans;
}

WeightFile::Span WeightFile::append(const Value& v, bool transpose) {
  return append_all({{&v, transpose}}).front();
}

}  // namespace hfx
