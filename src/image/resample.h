// Image resizing as Pillow 13.0 resizes 8-bit images (Image.resize with a filter other than
// NEAREST), so images preprocessed natively give the pixels transformers' Pillow-backed image
// processors give: per output pixel a filter window scaled up by the downscale factor
// (antialiasing), weights normalised in double then fixed point with 22 fraction bits, two
// separable passes each rounding to uint8, in the order Pillow 13.0 picks (vertical first when
// the height shrinks by more than twice the width's shrink). docs/notes/image-preprocessing-cpp.md.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace hfx {

// Pillow's Image.Resampling numbers (a preprocessor_config.json's `resample`).
enum class ResampleFilter : int { Lanczos = 1, Bilinear = 2, Bicubic = 3, Box = 4, Hamming = 5 };

// Whether `resample` names a filter resize_u8 implements (NEAREST, 0, is not one).
bool resample_filter_supported(int resample);

// `pixels` [height, width, channels] uint8, row-major, to [out_height, out_width, channels].
// Fails (hfx::Error) on empty sizes, a size over 2^16 a side, or a size mismatch.
std::vector<uint8_t> resize_u8(std::span<const uint8_t> pixels, int64_t height, int64_t width, int64_t channels,
                               int64_t out_height, int64_t out_width, ResampleFilter filter);

}  // namespace hfx
