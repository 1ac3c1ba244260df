"""Whisper's log-mel input features computed natively (hfexport.audio.whisper_features, C++ with
kissfft) against transformers' WhisperFeatureExtractor on generated audio — tones, noise, a
chirp, silence, clicks; lengths below, at and above 30 s (padded / cut to 30 s by default, the
audio's own length with padding="longest"); 80 and 128 mel channels (issue 31).

The extractor has two paths: NumPy in float64 (used without torch) and torch.stft in float32 (its
default where torch is installed). Ours equals the float64 path within 1e-6 (one float32 step,
1.2e-7, measured). The float32 path differs from the float64 one by up to ~7e-5 where the power
is near the floor (max - 8 decades): its own rounding. There, ours is asserted to be no further
from it than the extractor's float64 path is, plus 1e-6; everywhere else within 1e-5."""

from __future__ import annotations

import json

import numpy as np
import pytest

RATE = 16000


def tone(seconds, hz, amplitude=0.5):
    t = np.arange(int(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def signals():
    rng = np.random.default_rng(0)
    t = np.arange(8 * RATE) / RATE
    clicks = np.zeros(3 * RATE, np.float32)
    clicks[::4000] = 0.9
    return {
        "tone-440-2s": tone(2, 440),
        "tones-mixed-7s": tone(7, 300) + tone(7, 2500, 0.2) + tone(7, 7000, 0.05),
        "noise-5s": (0.1 * rng.standard_normal(5 * RATE)).astype(np.float32),
        "chirp-8s": (0.3 * np.sin(2 * np.pi * (50 + 450 * t) * t)).astype(np.float32),
        "silence-1s": np.zeros(RATE, np.float32),
        "clicks-3s": clicks,
        "quiet-noise-30s": (1e-4 * rng.standard_normal(30 * RATE)).astype(np.float32),
        "speechlike-42s": (tone(42, 180, 0.3) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * np.arange(42 * RATE) / RATE))
                           + (0.02 * rng.standard_normal(42 * RATE))).astype(np.float32),
        "short-0.3s": tone(0.3, 1000),
    }


def check_both_paths(extractor, ours, torch_path, wave):
    """`ours` against the extractor's float64 path (within 1e-6) and its float32 torch path (within
    1e-5, or no further than the float64 path is from it, plus 1e-6)."""
    float64_path = extractor._np_extract_fbank_features(wave[None].astype(np.float64), "cpu")[0]
    assert ours.shape == float64_path.shape == torch_path.shape
    np.testing.assert_allclose(ours, float64_path, rtol=0, atol=1e-6)
    allowed = np.maximum(1e-5, np.abs(float64_path - torch_path) + 1e-6)
    assert (np.abs(ours - torch_path) <= allowed).all(), float(np.abs(ours - torch_path).max())


@pytest.mark.parametrize("feature_size", [80, 128])
@pytest.mark.parametrize("name", list(signals()))
def test_matches_whisper_feature_extractor(name, feature_size):
    from transformers import WhisperFeatureExtractor

    from hfexport.audio import whisper_features

    audio = signals()[name]
    extractor = WhisperFeatureExtractor(feature_size=feature_size)
    expected = extractor(audio, sampling_rate=RATE, return_tensors="np").input_features[0]
    ours = whisper_features(audio, feature_size=feature_size)
    assert ours.shape == (feature_size, 3000)
    padded = np.pad(audio, (0, max(0, 30 * RATE - len(audio))))[: 30 * RATE]  # the extractor's max_length
    check_both_paths(extractor, ours, expected, padded)


@pytest.mark.parametrize("name", ["tone-440-2s", "noise-5s", "speechlike-42s", "short-0.3s"])
def test_unpadded_length(name):
    """padding="longest" without truncation: the audio's own frames (length // hop), past 30 s too."""
    from transformers import WhisperFeatureExtractor

    from hfexport.audio import whisper_features

    audio = signals()[name]
    extractor = WhisperFeatureExtractor()
    expected = extractor(audio, sampling_rate=RATE, padding="longest", truncation=False,
                         return_tensors="np").input_features[0]
    ours = whisper_features(audio, pad_to_chunk=False)
    assert ours.shape == (80, len(audio) // 160)
    check_both_paths(extractor, ours, expected, audio)


def test_preprocessor_config_file(tmp_path):
    """A saved preprocessor_config.json (large-v3's 128 channels) sets the features; dither, which
    adds random noise, is refused."""
    from transformers import WhisperFeatureExtractor

    from hfexport.audio import whisper_features

    extractor = WhisperFeatureExtractor(feature_size=128)
    extractor.save_pretrained(tmp_path)
    audio = signals()["chirp-8s"]
    ours = whisper_features(audio, preprocessor_config=tmp_path / "preprocessor_config.json")
    expected = extractor(audio, sampling_rate=RATE, return_tensors="np").input_features[0]
    check_both_paths(extractor, ours, expected, np.pad(audio, (0, 30 * RATE - len(audio))))
    config = json.loads((tmp_path / "preprocessor_config.json").read_text())
    with pytest.raises(ValueError, match="dither"):
        whisper_features(audio, preprocessor_config={**config, "dither": 1e-5})


def test_bad_input_is_a_clear_error():
    from hfexport.audio import whisper_features

    with pytest.raises(ValueError, match="mono"):
        whisper_features(np.zeros((2, 16000), np.float32))
    with pytest.raises(ValueError, match="too few"):
        whisper_features(np.zeros(100, np.float32), pad_to_chunk=False)
    with pytest.raises(TypeError, match="unknown option"):
        whisper_features(np.zeros(16000, np.float32), mel_bins=80)
