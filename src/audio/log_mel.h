// Whisper's log-mel input features, computed natively as transformers' WhisperFeatureExtractor
// computes them (its torch path): the audio zero-padded or cut to chunk_length seconds, a centred
// STFT (reflect padding, periodic Hann window of n_fft, hop_length) by kissfft, the power of every
// frame but the last through a Slaney-normalised mel filter bank, log10 clamped at 1e-10, floored
// 8 below the maximum, then (x + 4) / 4.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace hfx {

struct LogMelConfig {
  // WhisperFeatureExtractor's preprocessor_config.json keys, with its defaults.
  int64_t feature_size = 80, sampling_rate = 16000, hop_length = 160, n_fft = 400, chunk_length = 30;
  // Zero-pad (or cut) the audio to chunk_length seconds, as the extractor's default padding
  // ("max_length") and truncation do; false: the audio's own length ("longest", no truncation).
  bool pad_to_chunk = true;
};

struct LogMel {
  int64_t mels = 0, frames = 0;
  std::vector<float> values;  // [mels, frames], row-major
};

// The features of mono `samples` at config.sampling_rate. Fails (hfx::Error) on a config it
// cannot compute or audio too short for the centred STFT's reflect padding.
LogMel whisper_log_mel(std::span<const float> samples, const LogMelConfig& config);

// mel_filter_bank(num_frequency_bins = n_fft / 2 + 1, feature_size, 0 Hz, 8000 Hz,
// sampling_rate, norm = "slaney", mel_scale = "slaney"): [bins, feature_size], in float64.
std::vector<double> slaney_mel_filters(const LogMelConfig& config);

}  // namespace hfx
