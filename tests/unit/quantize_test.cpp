// Blockwise weight quantization: the scheme (core/quantize.h), the quantize_linears pass, the
// derived codes/scales WeightFile writes, and the reference decomposition's dequantized weight.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "backends/weight_file.h"
#include "core/quantize.h"
#include "io/safetensors.h"
#include "ir/builder.h"
#include "passes/passes.h"
#include "test_util.h"

namespace hfx {
namespace {

using test::error_of;
using test::read_file;
using test::SafetensorsWriter;
using test::TempDir;
using test::values_of;

WeightQuantization scheme(int bits, int64_t group) {
  WeightQuantization q;
  q.bits = bits;
  q.group_size = group;
  q.compute = WeightQuantization::Compute::Float;  // as a backend resolves it
  return q;
}

TEST(Quantize, Int8GroupScalesAndCodes) {
  // One row, two groups of 16: the first spans [-1.27, 1.27], the second is all zero.
  std::vector<float> w(32, 0.0f);
  for (int i = 0; i < 16; ++i) w[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i * 17 % 255 - 127);
  w[0] = -1.27f;
  std::vector<uint8_t> codes(32);
  std::vector<float> scales(2);
  quantize_rows(w.data(), 1, 32, scheme(8, 16), codes.data(), scales.data());
  EXPECT_FLOAT_EQ(scales[0], 1.27f / 128.0f);  // the signed extreme over -128
  EXPECT_EQ(scales[1], 0.0f);
  for (int i = 0; i < 16; ++i) {
    const float level = std::clamp(std::nearbyint(w[static_cast<size_t>(i)] / scales[0]), -128.0f, 127.0f);
    EXPECT_EQ(codes[static_cast<size_t>(i)], static_cast<uint8_t>(level + 128.0f)) << i;
  }
  EXPECT_EQ(codes[0], 0);  // the extreme takes level -128: every code is used
  for (int i = 16; i < 32; ++i) EXPECT_EQ(codes[static_cast<size_t>(i)], 128) << i;  // zero group -> zero point
}

TEST(Quantize, Int4PacksLowNibbleFirstAndRoundsToEven) {
  // Extreme -8 -> scale 1: codes are w + 8. 2.5 and -0.5 round to even (2, -0).
  const std::vector<float> w{-8, 7, 2.5f, -0.5f, 0, 1, 3, -3, 4, -4, 5, -5, 6, -6, 1.5f, 0.4f};
  std::vector<uint8_t> codes(8);
  std::vector<float> scales(1);
  quantize_rows(w.data(), 1, 16, scheme(4, 16), codes.data(), scales.data());
  EXPECT_EQ(scales[0], 1.0f);
  const int want[16] = {0, 15, 10, 8, 8, 9, 11, 5, 12, 4, 13, 3, 14, 2, 10, 8};
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(codes[static_cast<size_t>(i)], want[2 * i] | (want[2 * i + 1] << 4)) << "byte " << i;
}

TEST(Quantize, PositiveExtremeGivesNegativeScale) {
  // Extreme +8 -> scale -1: 8 takes code 0, -7 code 15; -8 would need level +8 and clamps to 7.
  std::vector<float> w(16, 0.0f);
  w[0] = 8, w[1] = -7, w[2] = 1, w[3] = -8;
  std::vector<uint8_t> codes(8);
  std::vector<float> scales(1);
  quantize_rows(w.data(), 1, 16, scheme(4, 16), codes.data(), scales.data());
  EXPECT_EQ(scales[0], -1.0f);
  EXPECT_EQ(codes[0], 0 | (15 << 4));
  EXPECT_EQ(codes[1], 7 | (15 << 4));
}

TEST(Quantize, PositiveBf16ScalesForXnnpack) {
  // XNNPACK's variant: extreme +7 -> scale +1 (7 takes the top code); extreme -8 -> scale +1 as
  // before; an all-zero group -> scale 1; a scale rounded to bfloat16 before the codes.
  WeightQuantization q = scheme(4, 16);
  q.positive_bf16_scales = true;
  std::vector<float> w(64, 0.0f);
  w[0] = 7, w[1] = -7, w[2] = 1;           // group 0: extreme +7
  w[16] = -8, w[17] = 8;                   // group 1: extreme -8 (the first largest)
  w[48] = 0.1f;                            // group 3: 0.1 / 7 is not bfloat16
  std::vector<uint8_t> codes(32);
  std::vector<float> scales(4);
  quantize_rows(w.data(), 1, 64, q, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 1.0f);
  EXPECT_EQ(codes[0], (7 + 8) | ((-7 + 8) << 4));
  EXPECT_EQ(scales[1], 1.0f);
  EXPECT_EQ(codes[8], (-8 + 8) | ((7 + 8) << 4));  // +8 clamps to the top code
  EXPECT_EQ(scales[2], 1.0f);                    // all zero
  uint32_t bits;
  std::memcpy(&bits, &scales[3], sizeof bits);
  EXPECT_GT(scales[3], 0.0f);
  EXPECT_EQ(bits & 0xFFFFu, 0u);  // bfloat16-exact
  EXPECT_NEAR(scales[3], 0.1f / 7, 0.1f / 7 / 128);
}

TEST(Quantize, SignedInt8CodesForXnnpack) {
  // qcint8: the 8-bit levels as two's complement bytes (no +128 offset), positive scales.
  WeightQuantization q = scheme(8, 4);
  q.positive_bf16_scales = q.signed_codes = true;
  const std::vector<float> w = {127, -127, 1, 0};
  std::vector<uint8_t> codes(4);
  std::vector<float> scales(1);
  quantize_rows(w.data(), 1, 4, q, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 1.0f);
  EXPECT_EQ(static_cast<int8_t>(codes[0]), 127);
  EXPECT_EQ(static_cast<int8_t>(codes[1]), -127);
  EXPECT_EQ(static_cast<int8_t>(codes[2]), 1);
  EXPECT_EQ(codes[3], 0);
  q.signed_codes = false;  // the documented scheme: level + 128
  quantize_rows(w.data(), 1, 4, q, codes.data(), scales.data());
  EXPECT_EQ(codes[0], 255);
  EXPECT_EQ(codes[3], 128);
}

// The mean reconstruction error of the previous scheme (scale = max|w| / 7 or 127, code 0 unused).
double absmax_scheme_error(const std::vector<float>& w, int bits, size_t group) {
  const double zero = static_cast<double>(1 << (bits - 1));
  double total = 0;
  for (size_t g0 = 0; g0 < w.size(); g0 += group) {
    double absmax = 0;
    for (size_t i = 0; i < group; ++i) absmax = std::max(absmax, std::fabs(double{w[g0 + i]}));
    const double scale = absmax / (zero - 1);
    for (size_t i = 0; i < group; ++i) {
      const double level = scale == 0 ? 0 : std::clamp(std::nearbyint(w[g0 + i] / scale), -zero, zero - 1);
      total += std::fabs(w[g0 + i] - level * scale);
    }
  }
  return total / static_cast<double>(w.size());
}

TEST(Quantize, FullSignedRangeReconstructsBetterThanAbsmaxOverSeven) {
  // Gaussian weights, as trained layers roughly are: using all 2^bits codes must cut int4's mean
  // reconstruction error clearly below the absmax / (2^(bits-1) - 1) scheme's.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const size_t rows = 256, cols = 512;
  std::vector<float> w(rows * cols);
  for (float& x : w) x = normal(rng);
  for (const int bits : {4, 8}) {
    const WeightQuantization q = scheme(bits, 32);
    std::vector<uint8_t> codes(rows * cols * static_cast<size_t>(bits) / 8);
    std::vector<float> scales(rows * cols / 32);
    quantize_rows(w.data(), rows, cols, q, codes.data(), scales.data());
    double total = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      const int code = bits == 8 ? codes[i] : (codes[i / 2] >> (i % 2 ? 4 : 0)) & 0xF;
      total += std::fabs(w[i] - static_cast<float>(code - (1 << (bits - 1))) * scales[i / 32]);
    }
    const double ours = total / static_cast<double>(w.size()), before = absmax_scheme_error(w, bits, 32);
    // 16 levels instead of 15 for int4; 256 instead of 255 for int8 gains under 1 %.
    EXPECT_LT(ours, (bits == 4 ? 0.95 : 1.0) * before) << bits << " bits: " << ours << " vs " << before;
    std::printf("int%d mean reconstruction error %.4g vs %.4g before (%.3fx)\n", bits, ours, before, ours / before);
  }
}

TEST(Quantize, RejectsUnsupportedSchemes) {
  EXPECT_NO_THROW(check_weight_quantization(WeightQuantization{}));
  EXPECT_NO_THROW(check_weight_quantization(scheme(4, 128)));
  EXPECT_NE(error_of([] { check_weight_quantization(scheme(3, 32)); }).find("3 bits"), std::string::npos);
  EXPECT_NE(error_of([] { check_weight_quantization(scheme(4, 24)); }).find("power of two"), std::string::npos);
  EXPECT_NE(error_of([] { check_weight_quantization(scheme(8, 8)); }).find("at least 16"), std::string::npos);
}

struct Fixture {
  TempDir dir;
  std::unique_ptr<SafetensorsFile> file;
  Graph g;
  Builder b{g};
  std::vector<float> a, c;
  Fixture() {
    a.resize(3 * 32);
    c.resize(2 * 32);
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(static_cast<float>(i)) * 0.5f;
    for (size_t i = 0; i < c.size(); ++i) c[i] = std::cos(static_cast<float>(i) * 0.7f);
    SafetensorsWriter w;
    w.add_f32("m.a_proj.weight", {3, 32}, a).add_f32("m.c_proj.weight", {2, 32}, c).add_f32("m.odd.weight", {2, 24},
                                                                                             std::vector<float>(48, 1));
    w.write(dir / "m.safetensors");
    file = std::make_unique<SafetensorsFile>(dir / "m.safetensors");
  }
  Value* weight(const std::string& name) { return b.weight(*file->find(name), DType::F32); }
};

TEST(QuantizeLinears, RewritesLinearsAndKeepsIndivisibleOnesFloat) {
  Fixture f;
  Value* x = f.b.input("x", DType::F32, {1, 32});
  Value* y = f.b.linear(x, f.weight("m.a_proj.weight"));
  Value* x24 = f.b.input("x24", DType::F32, {1, 24});
  Value* z = f.b.linear(x24, f.weight("m.odd.weight"));
  f.b.output(y, "y");
  f.b.output(z, "z");
  const QuantizeReport report = quantize_linears(f.g, scheme(4, 16));
  ASSERT_NO_THROW(verify(f.g));
  EXPECT_EQ(report.quantized, 1);
  EXPECT_EQ(report.kept_float, std::vector<std::string>{"m.odd.weight"});
  const Node* n = y->producer;
  ASSERT_EQ(n->op, OpKind::QuantizedLinear);
  EXPECT_EQ(n->attrs_as<QuantizedLinearAttrs>().bits, 4);
  EXPECT_EQ(n->attrs_as<QuantizedLinearAttrs>().group_size, 16);
  EXPECT_EQ(n->inputs[1]->name, "m.a_proj.qweight");
  EXPECT_EQ(n->inputs[1]->dtype, DType::U8);
  EXPECT_EQ(n->inputs[1]->shape, Shape({3, 2, 8}));
  EXPECT_EQ(n->inputs[2]->name, "m.a_proj.scales");
  EXPECT_EQ(n->inputs[2]->shape, Shape({3, 2}));
  EXPECT_EQ(z->producer->op, OpKind::Linear);
  EXPECT_EQ(quantize_linears(f.g, WeightQuantization{}).quantized, 0);  // disabled: a no-op
}

// The writer derives codes and scales from the (stacked) checkpoint rows exactly as
// quantize_rows does, in the value's dtype.
TEST(QuantizeLinears, WeightFileWritesDerivedCodesAndScales) {
  Fixture f;
  Value* x = f.b.input("x", DType::F16, {1, 32});
  f.b.output(f.b.linear(x, f.b.weight(*f.file->find("m.a_proj.weight"), DType::F16)), "a");
  f.b.output(f.b.linear(x, f.b.weight(*f.file->find("m.c_proj.weight"), DType::F16)), "c");
  pack_linears(f.g);
  quantize_linears(f.g, scheme(8, 16));
  const Node* q = f.g.order.front();
  ASSERT_EQ(q->op, OpKind::QuantizedLinear);
  EXPECT_EQ(q->inputs[2]->dtype, DType::F16);  // scales in the activations' dtype

  std::vector<float> rows = f.a;
  rows.insert(rows.end(), f.c.begin(), f.c.end());
  std::vector<uint8_t> want_codes(5 * 32);
  std::vector<float> want_scales(5 * 2);
  quantize_rows(rows.data(), 5, 32, scheme(8, 16), want_codes.data(), want_scales.data());

  const auto path = f.dir / "w.data";
  WeightFile wf(path, 64);
  const auto spans = wf.append_all({{q->inputs[1], false}, {q->inputs[2], false}});
  wf.close();
  const std::string data = read_file(path);
  ASSERT_EQ(spans[0].length, 5u * 32);
  ASSERT_EQ(spans[1].length, 5u * 2 * 2);
  EXPECT_EQ(values_of<uint8_t>(data.substr(spans[0].offset, spans[0].length)), want_codes);
  const auto scales = values_of<uint16_t>(data.substr(spans[1].offset, spans[1].length));
  for (size_t i = 0; i < want_scales.size(); ++i) EXPECT_EQ(scales[i], f32_to_f16(want_scales[i])) << i;
}

TEST(QuantizeLinears, ReferenceDecompositionKeepsTypes) {
  Fixture f;
  Value* x = f.b.input("x", DType::F32, {f.g.symbol("seq", 1, 8), 32});
  f.b.output(f.b.linear(x, f.weight("m.a_proj.weight")), "y");
  quantize_linears(f.g, scheme(4, 16));
  decompose(f.g, [](const Node&) { return false; });
  eliminate_dead_code(f.g);
  ASSERT_NO_THROW(verify(f.g));
  for (const Node* n : f.g.order) EXPECT_FALSE(op_is_high_level(n->op)) << op_name(n->op);
  EXPECT_EQ(f.g.outputs[0]->shape, Shape({Dim(f.g.symbol("seq", 1, 8)), 3}));
}

}  // namespace
}  // namespace hfx
