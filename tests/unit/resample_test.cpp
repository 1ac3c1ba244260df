// The native resize's contract; its pixels are compared with Pillow's in
// tests/parity/test_image_resize.py.
#include <gtest/gtest.h>

#include "core/error.h"
#include "image/resample.h"

namespace hfx {
namespace {

TEST(Resample, ConstantImageStaysConstantForEveryFilter) {
  const std::vector<uint8_t> image(7 * 5 * 3, 123);
  for (int f = 1; f <= 5; ++f)
    for (const auto& [h, w] : {std::pair<int64_t, int64_t>{3, 11}, {14, 2}, {7, 5}}) {
      const auto out = resize_u8(image, 7, 5, 3, h, w, static_cast<ResampleFilter>(f));
      ASSERT_EQ(out.size(), static_cast<size_t>(h * w * 3));
      for (uint8_t v : out) EXPECT_EQ(v, 123) << "filter " << f << " to " << h << "x" << w;
    }
}

TEST(Resample, SameSizeIsACopy) {
  std::vector<uint8_t> image(4 * 6);
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<uint8_t>(i * 37);
  EXPECT_EQ(resize_u8(image, 4, 6, 1, 4, 6, ResampleFilter::Bicubic), image);
}

TEST(Resample, RefusesBadSizes) {
  const std::vector<uint8_t> image(4 * 4 * 3, 0);
  EXPECT_THROW(resize_u8(image, 4, 4, 3, 0, 4, ResampleFilter::Bilinear), Error);
  EXPECT_THROW(resize_u8(image, 4, 4, 3, 4, 70000, ResampleFilter::Bilinear), Error);
  EXPECT_THROW(resize_u8(image, 4, 5, 3, 4, 4, ResampleFilter::Bilinear), Error);  // 48 bytes, not 60
  EXPECT_FALSE(resample_filter_supported(0));  // NEAREST
  EXPECT_TRUE(resample_filter_supported(3));
}

}  // namespace
}  // namespace hfx
