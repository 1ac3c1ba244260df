// Blockwise weight quantization: each row of a [N, K] matrix is cut into groups of `group_size`
// consecutive values along K; a group stores one float scale and one unsigned code per value.
//   m = the group's value of largest magnitude (signed), scale = m / -2^(bits-1),
//   code = clamp(rint(w / scale), -2^(bits-1), 2^(bits-1) - 1) + 2^(bits-1)
//   w' = (code - 2^(bits-1)) * scale            (symmetric, round to nearest even)
// The signed scale maps m to code 0 exactly and uses all 2^bits codes (absmax / 7 leaves code 0
// unused), which lowers the reconstruction error (tests/unit/quantize_test.cpp measures it).
// 4-bit codes pack two per byte, the earlier value in the low nibble (onnxruntime MatMulNBits' layout).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace hfx {

struct WeightQuantization {
  int bits = 0;  // 0: weights stay floating point; else 4 or 8
  int64_t group_size = 32;
  // Int8: the runtime may quantize activations to int8 inside the MatMul (fastest); Float:
  // it multiplies by the dequantized weights; Auto: the backend's fastest.
  enum class Compute { Auto, Int8, Float } compute = Compute::Auto;
  // XNNPACK's blockwise 4-bit weights want every scale positive, normal and bfloat16: a group
  // whose extreme m is positive gets scale m / (2^(bits-1) - 1) (m maps to the top code) instead
  // of the negative m / -2^(bits-1), an all-zero group scale 1, and scales are rounded to
  // bfloat16 before the codes are computed. Off: the scheme above.
  bool positive_bf16_scales = false;
  // XNNPACK's per-channel int8 weights (qcint8): each linear's group is its whole row (one scale
  // per output channel, whatever group_size says), and 8-bit codes are stored as the signed
  // levels (two's complement, no offset) rather than level + 128.
  bool per_channel = false;
  bool signed_codes = false;

  bool enabled() const { return bits != 0; }
  int64_t zero_point() const { return int64_t{1} << (bits - 1); }
  // Bytes of codes per group.
  int64_t group_bytes() const { return group_size * bits / 8; }
};

// Rejects settings no backend can store, with a one-line reason naming the fields as the caller
// spells them.
void check_weight_quantization(const WeightQuantization& q, const std::string& bits_field = "quantization.weights",
                               const std::string& group_field = "quantization.group_size");

// Quantizes `rows` rows of `cols` floats (cols a multiple of group_size): codes gets
// rows * cols * bits / 8 bytes, scales rows * cols / group_size floats, both row-major.
void quantize_rows(const float* w, size_t rows, size_t cols, const WeightQuantization& q, uint8_t* codes,
                   float* scales);

}  // namespace hfx
