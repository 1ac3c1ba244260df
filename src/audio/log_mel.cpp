#include "audio/log_mel.h"

#include <kissfft/kissfft.hh>

#include <algorithm>
#include <cmath>
#include <complex>
#include <numbers>

#include "core/error.h"

namespace hfx {
namespace {

// audio_utils.hertz_to_mel / mel_to_hertz on the Slaney scale: linear below 1 kHz, logarithmic above.
constexpr double kMinLogHertz = 1000.0, kMinLogMel = 15.0;
double hertz_to_mel(double hz) {
  const double logstep = 27.0 / std::log(6.4);
  return hz >= kMinLogHertz ? kMinLogMel + std::log(hz / kMinLogHertz) * logstep : 3.0 * hz / 200.0;
}
double mel_to_hertz(double mel) {
  const double logstep = std::log(6.4) / 27.0;
  return mel >= kMinLogMel ? kMinLogHertz * std::exp(logstep * (mel - kMinLogMel)) : 200.0 * mel / 3.0;
}

// numpy.linspace(start, stop, count): start + i * step, the last point exactly stop.
std::vector<double> linspace(double start, double stop, int64_t count) {
  std::vector<double> out(static_cast<size_t>(count));
  const double step = (stop - start) / static_cast<double>(count - 1);
  for (int64_t i = 0; i < count; ++i) out[static_cast<size_t>(i)] = static_cast<double>(i) * step + start;
  out.back() = stop;
  return out;
}

void check_config(const LogMelConfig& c) {
  HFX_CHECK(c.feature_size > 0 && c.sampling_rate > 0 && c.hop_length > 0 && c.n_fft >= 2 && c.chunk_length > 0,
            "log-mel: feature_size, sampling_rate, hop_length, chunk_length must be positive and n_fft at least 2");
}

// torch.stft(center=True)'s input: n_fft / 2 samples reflected on each side (the edge sample not repeated).
std::vector<double> reflect_pad(std::span<const float> x, int64_t pad) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<double> out(static_cast<size_t>(n + 2 * pad));
  for (int64_t i = 0; i < n + 2 * pad; ++i) {
    int64_t j = i - pad;
    if (j < 0) j = -j;
    if (j >= n) j = 2 * (n - 1) - j;
    out[static_cast<size_t>(i)] = static_cast<double>(x[static_cast<size_t>(j)]);
  }
  return out;
}

}  // namespace

std::vector<double> slaney_mel_filters(const LogMelConfig& c) {
  check_config(c);
  const int64_t bins = c.n_fft / 2 + 1, mels = c.feature_size;
  const std::vector<double> mel_points = linspace(hertz_to_mel(0.0), hertz_to_mel(8000.0), mels + 2);
  std::vector<double> edges(mel_points.size());
  std::transform(mel_points.begin(), mel_points.end(), edges.begin(), mel_to_hertz);
  const std::vector<double> fft_freqs = linspace(0.0, static_cast<double>(c.sampling_rate / 2), bins);
  std::vector<double> filters(static_cast<size_t>(bins * mels));
  for (int64_t k = 0; k < bins; ++k)
    for (int64_t m = 0; m < mels; ++m) {
      const auto i = static_cast<size_t>(m);
      const double f = fft_freqs[static_cast<size_t>(k)];
      const double down = -(edges[i] - f) / (edges[i + 1] - edges[i]);
      const double up = (edges[i + 2] - f) / (edges[i + 2] - edges[i + 1]);
      const double area = 2.0 / (edges[i + 2] - edges[i]);  // Slaney: constant energy per channel
      filters[static_cast<size_t>(k * mels + m)] = std::max(0.0, std::min(down, up)) * area;
    }
  return filters;
}

LogMel whisper_log_mel(std::span<const float> samples, const LogMelConfig& c) {
  check_config(c);
  const int64_t pad = c.n_fft / 2, bins = c.n_fft / 2 + 1;
  std::vector<float> audio(samples.begin(), samples.end());
  if (c.pad_to_chunk) audio.resize(static_cast<size_t>(c.chunk_length * c.sampling_rate), 0.0f);
  if (static_cast<int64_t>(audio.size()) <= pad)
    fail("log-mel: ", audio.size(), " samples are too few for a centred STFT of n_fft ", c.n_fft, " (at least ",
         pad + 1, ")");
  const std::vector<double> padded = reflect_pad(audio, pad);
  // torch.stft's frame count is 1 + length / hop; the extractor drops the last frame.
  const int64_t frames = static_cast<int64_t>(audio.size()) / c.hop_length;
  std::vector<double> window(static_cast<size_t>(c.n_fft));  // torch.hann_window: periodic
  for (int64_t n = 0; n < c.n_fft; ++n)
    window[static_cast<size_t>(n)] =
        0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * static_cast<double>(n) / static_cast<double>(c.n_fft));
  const std::vector<double> filters = slaney_mel_filters(c);
  const kissfft<double> fft(static_cast<size_t>(c.n_fft), false);
  std::vector<std::complex<double>> in(static_cast<size_t>(c.n_fft)), out(in.size());
  std::vector<double> power(static_cast<size_t>(bins));
  LogMel result{c.feature_size, frames, std::vector<float>(static_cast<size_t>(c.feature_size * frames))};
  std::vector<double> log_mel(result.values.size());
  for (int64_t t = 0; t < frames; ++t) {
    for (int64_t n = 0; n < c.n_fft; ++n)
      in[static_cast<size_t>(n)] = padded[static_cast<size_t>(t * c.hop_length + n)] * window[static_cast<size_t>(n)];
    fft.transform(in.data(), out.data());
    for (int64_t k = 0; k < bins; ++k) power[static_cast<size_t>(k)] = std::norm(out[static_cast<size_t>(k)]);
    for (int64_t m = 0; m < c.feature_size; ++m) {
      double mel = 0.0;
      for (int64_t k = 0; k < bins; ++k)
        mel += filters[static_cast<size_t>(k * c.feature_size + m)] * power[static_cast<size_t>(k)];
      log_mel[static_cast<size_t>(m * frames + t)] = std::log10(std::max(mel, 1e-10));
    }
  }
  const double floor = *std::max_element(log_mel.begin(), log_mel.end()) - 8.0;
  for (size_t i = 0; i < log_mel.size(); ++i)
    result.values[i] = static_cast<float>((std::max(log_mel[i], floor) + 4.0) / 4.0);
  return result;
}

}  // namespace hfx
