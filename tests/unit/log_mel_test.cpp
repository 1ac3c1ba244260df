// Whisper's log-mel features: properties that hold whatever the reference (the parity test
// tests/parity/test_audio_features.py compares against WhisperFeatureExtractor itself).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "audio/log_mel.h"
#include "core/error.h"

namespace hfx {
namespace {

TEST(LogMel, SilenceIsTheClampedFloorEverywhere) {
  const std::vector<float> silence(16000, 0.0f);
  const LogMel mel = whisper_log_mel(silence, {});
  EXPECT_EQ(mel.mels, 80);
  EXPECT_EQ(mel.frames, 3000);  // padded to 30 s: 480000 / 160
  for (float v : mel.values) ASSERT_FLOAT_EQ(v, (-10.0f + 4.0f) / 4.0f);
}

TEST(LogMel, AToneIsLoudestInTheChannelAroundIt) {
  LogMelConfig config;
  config.pad_to_chunk = false;
  std::vector<float> tone(8000);
  for (size_t i = 0; i < tone.size(); ++i)
    tone[i] = static_cast<float>(0.5 * std::sin(2.0 * std::numbers::pi * 1000.0 * static_cast<double>(i) / 16000.0));
  const LogMel mel = whisper_log_mel(tone, config);
  EXPECT_EQ(mel.frames, 50);
  const std::vector<double> filters = slaney_mel_filters(config);
  // the channel whose filter weighs the tone's bin (1000 Hz: bin 25) most
  int64_t expected = 0;
  for (int64_t m = 0; m < 80; ++m)
    if (filters[static_cast<size_t>(25 * 80 + m)] > filters[static_cast<size_t>(25 * 80 + expected)]) expected = m;
  const int64_t t = 25;
  int64_t loudest = 0;
  for (int64_t m = 0; m < mel.mels; ++m)
    if (mel.values[static_cast<size_t>(m * mel.frames + t)] > mel.values[static_cast<size_t>(loudest * mel.frames + t)])
      loudest = m;
  EXPECT_EQ(loudest, expected);
}

TEST(LogMel, SlaneyFiltersAreTrianglesOfEqualArea) {
  const LogMelConfig config;
  const std::vector<double> filters = slaney_mel_filters(config);
  ASSERT_EQ(filters.size(), size_t{201 * 80});
  for (double w : filters) EXPECT_GE(w, 0.0);
}

TEST(LogMel, AudioTooShortForTheCentredWindowIsAnError) {
  LogMelConfig config;
  config.pad_to_chunk = false;
  const std::vector<float> short_audio(200, 0.1f);
  EXPECT_THROW(whisper_log_mel(short_audio, config), Error);
}

}  // namespace
}  // namespace hfx
