#include "image/resample.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hfx {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's: 8 bits of result, 2 of headroom
constexpr int64_t kMaxSide = 65536;

struct Filter {
  double (*weight)(double);
  double support;
};

double box(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }
double bilinear(double x) {
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}
double hamming(double x) {
  x = std::abs(x);
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x *= M_PI;
  return std::sin(x) / x * (0.54f + 0.46f * std::cos(x));  // Pillow mixes float constants in
}
double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}
double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}
double lanczos(double x) { return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3) : 0.0; }

Filter filter_of(ResampleFilter f) {
  switch (f) {
    case ResampleFilter::Box: return {box, 0.5};
    case ResampleFilter::Bilinear: return {bilinear, 1.0};
    case ResampleFilter::Hamming: return {hamming, 1.0};
    case ResampleFilter::Bicubic: return {bicubic, 2.0};
    case ResampleFilter::Lanczos: return {lanczos, 3.0};
  }
  fail("internal error: resample filter");
}

// One axis's windows: for each output index its first input index and fixed-point weights.
struct Windows {
  int64_t size = 0;  // weights per output (the largest window)
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;  // [outputs, size]
};

Windows windows(int64_t in, int64_t out, const Filter& filter) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double filterscale = std::max(scale, 1.0);
  const double support = filter.support * filterscale;
  Windows w;
  w.size = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  w.first.resize(static_cast<size_t>(out));
  w.count.resize(static_cast<size_t>(out));
  w.weights.assign(static_cast<size_t>(out * w.size), 0);
  std::vector<double> k(static_cast<size_t>(w.size));
  const double inverse = 1.0 / filterscale;
  for (int64_t o = 0; o < out; ++o) {
    const double center = (static_cast<double>(o) + 0.5) * scale;
    const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(center - support + 0.5));
    const int64_t n = std::min<int64_t>(in, static_cast<int64_t>(center + support + 0.5)) - lo;
    double sum = 0.0;
    for (int64_t x = 0; x < n; ++x) sum += k[static_cast<size_t>(x)] = filter.weight((static_cast<double>(x + lo) - center + 0.5) * inverse);
    for (int64_t x = 0; x < n; ++x) {
      const double v = sum != 0.0 ? k[static_cast<size_t>(x)] / sum : k[static_cast<size_t>(x)];
      const double fixed = v * static_cast<double>(1 << kPrecisionBits);
      w.weights[static_cast<size_t>(o * w.size + x)] = static_cast<int32_t>(v < 0 ? fixed - 0.5 : fixed + 0.5);
    }
    w.first[static_cast<size_t>(o)] = lo;
    w.count[static_cast<size_t>(o)] = n;
  }
  return w;
}

uint8_t clip8(int64_t sum) { return static_cast<uint8_t>(std::clamp<int64_t>(sum >> kPrecisionBits, 0, 255)); }

// Resamples the axis of `stride` elements between neighbours: `lines` lines of `in` samples
// (consecutive lines `line_step` apart in the input, out_line_step in the output).
struct Pass {
  int64_t lines, line_step, out_line_step, stride, channels;
};

void resample(const uint8_t* src, uint8_t* dst, const Windows& w, const Pass& p, int64_t out) {
  for (int64_t line = 0; line < p.lines; ++line)
    for (int64_t o = 0; o < out; ++o) {
      const int32_t* k = &w.weights[static_cast<size_t>(o * w.size)];
      const uint8_t* in = src + line * p.line_step + w.first[static_cast<size_t>(o)] * p.stride;
      uint8_t* result = dst + line * p.out_line_step + o * p.stride;
      for (int64_t c = 0; c < p.channels; ++c) {
        int64_t sum = int64_t{1} << (kPrecisionBits - 1);
        for (int64_t x = 0; x < w.count[static_cast<size_t>(o)]; ++x) sum += int64_t{in[x * p.stride + c]} * k[x];
        result[c] = clip8(sum);
      }
    }
}

std::vector<uint8_t> horizontal(const std::vector<uint8_t>& src, int64_t h, int64_t w, int64_t c, int64_t out_w,
                                const Filter& f) {
  std::vector<uint8_t> dst(static_cast<size_t>(h * out_w * c));
  resample(src.data(), dst.data(), windows(w, out_w, f), {h, w * c, out_w * c, c, c}, out_w);
  return dst;
}

std::vector<uint8_t> vertical(const std::vector<uint8_t>& src, int64_t h, int64_t w, int64_t c, int64_t out_h,
                              const Filter& f) {
  // Each column of each channel is a line; neighbours along it are a row (w * c) apart.
  std::vector<uint8_t> dst(static_cast<size_t>(out_h * w * c));
  resample(src.data(), dst.data(), windows(h, out_h, f), {w, c, c, w * c, c}, out_h);
  return dst;
}

}  // namespace

bool resample_filter_supported(int resample) { return resample >= 1 && resample <= 5; }

std::vector<uint8_t> resize_u8(std::span<const uint8_t> pixels, int64_t height, int64_t width, int64_t channels,
                               int64_t out_height, int64_t out_width, ResampleFilter filter) {
  for (const int64_t side : {height, width, out_height, out_width})
    if (side < 1 || side > kMaxSide) fail("resize: image sides must be in [1, ", kMaxSide, "], got ", side);
  if (channels < 1 || channels > 4) fail("resize: 1 to 4 channels, got ", channels);
  if (static_cast<int64_t>(pixels.size()) != height * width * channels)
    fail("resize: ", pixels.size(), " bytes for a ", height, "x", width, "x", channels, " image");
  const Filter f = filter_of(filter);
  std::vector<uint8_t> image(pixels.begin(), pixels.end());
  // Pillow 13.0's order: vertical first when the height shrinks by more than twice the width's shrink.
  if (height - out_height > 0 && height - out_height > (width - out_width) * 2) {
    if (out_height != height) image = vertical(image, height, width, channels, out_height, f);
    if (out_width != width) image = horizontal(image, out_height, width, channels, out_width, f);
    return image;
  }
  if (out_width != width) image = horizontal(image, height, width, channels, out_width, f);
  if (out_height != height) image = vertical(image, height, out_width, channels, out_height, f);
  return image;
}

}  // namespace hfx
