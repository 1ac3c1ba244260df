#include "core/quantize.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <cmath>

#include "core/error.h"

namespace hfx {

void check_weight_quantization(const WeightQuantization& q, const std::string& bits_field,
                               const std::string& group_field) {
  if (!q.enabled()) return;
  if (q.bits != 4 && q.bits != 8) fail(bits_field, ": ", q.bits, " bits is not supported (use 4 or 8)");
  if (q.group_size < 16 || (q.group_size & (q.group_size - 1)) != 0)
    fail(group_field, " must be a power of two of at least 16, got ", q.group_size);
}

namespace {

float round_to_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;  // round to nearest even
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

float positive_bf16_scale(float extreme, float zero) {
  if (extreme == 0.0f) return 1.0f;
  const float scale = round_to_bf16(extreme < 0.0f ? extreme / -zero : extreme / (zero - 1.0f));
  return std::max(scale, std::numeric_limits<float>::min());  // normal, as XNNPACK checks
}

}  // namespace

void quantize_rows(const float* w, size_t rows, size_t cols, const WeightQuantization& q, uint8_t* codes,
                   float* scales) {
  const auto group = static_cast<size_t>(q.group_size);
  HFX_CHECK(cols % group == 0, "quantize_rows: ", cols, " columns in groups of ", group);
  const auto zero = static_cast<float>(q.zero_point());
  const float qmax = zero - 1.0f;  // 7 or 127: the largest positive level
  const size_t groups = cols / group;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t gi = 0; gi < groups; ++gi) {
      const float* src = w + r * cols + gi * group;
      float extreme = 0.0f;  // the value of largest magnitude, with its sign
      for (size_t i = 0; i < group; ++i)
        if (std::fabs(src[i]) > std::fabs(extreme)) extreme = src[i];
      const float scale = q.positive_bf16_scales ? positive_bf16_scale(extreme, zero) : extreme / -zero;
      scales[r * groups + gi] = scale;
      uint8_t* dst = codes + (r * cols + gi * group) * static_cast<size_t>(q.bits) / 8;
      for (size_t i = 0; i < group; ++i) {
        const float level = scale == 0.0f ? 0.0f : std::clamp(std::nearbyint(src[i] / scale), -zero, qmax);
        const auto code = static_cast<uint8_t>(q.signed_codes && q.bits == 8 ? static_cast<int>(level) & 0xff
                                                                               : static_cast<int>(level + zero));
        if (q.bits == 8) dst[i] = code;
        else if (i % 2 == 0) dst[i / 2] = code;
        else dst[i / 2] = static_cast<uint8_t>(dst[i / 2] | (code << 4));
      }
    }
  }
}

}  // namespace hfx
