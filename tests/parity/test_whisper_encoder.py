"""Whisper's encoder (issue 31, its first component): audio in, through hfexport's own log-mel
features, to WhisperEncoder's last_hidden_state on every backend, against transformers
(WhisperFeatureExtractor, then the model's encoder) — WhisperForConditionalGeneration and
WhisperModel checkpoints, 80 and 128 mel channels, a batch of two clips —; the generation
default without --for-generation, and other tasks, refused (generation: test_whisper_generation.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_clean_error

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
RATE = 16000
WHISPER = dict(vocab_size=100, d_model=64, encoder_layers=2, encoder_attention_heads=4, decoder_layers=2,
               decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_target_positions=64,
               pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)


def build(folder, head: str = "ForConditionalGeneration", mels: int = 80):
    import transformers

    torch.manual_seed(0)
    config = transformers.WhisperConfig(**WHISPER, num_mel_bins=mels)
    config._attn_implementation = "eager"
    model = getattr(transformers, "Whisper" + head)(config)
    with torch.no_grad():  # wider than the default init, so that every term shows
        for name, p in model.named_parameters():
            p.uniform_(0.5, 1.5) if "norm" in name else p.normal_(0.0, 0.1)
    model.eval().save_pretrained(folder)
    return model.get_encoder()


def clips(count: int):
    rng = np.random.default_rng(1)
    t = np.arange(3 * RATE) / RATE
    voiced = (0.3 * np.sin(2 * np.pi * 220 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))).astype(np.float32)
    noisy = (0.05 * rng.standard_normal(5 * RATE)).astype(np.float32)
    return [voiced, noisy][:count]


def check(out, encoder, audio, mels: int) -> float:
    """Our features through our export against the extractor's through transformers' encoder."""
    from transformers import WhisperFeatureExtractor

    from hfexport import ExportedModel
    from hfexport.audio import whisper_features

    ours = np.stack([whisper_features(a, feature_size=mels) for a in audio])
    got = np.asarray(ExportedModel(out)(input_features=ours)["last_hidden_state"], np.float32)
    features = WhisperFeatureExtractor(feature_size=mels)(audio, sampling_rate=RATE, return_tensors="pt").input_features
    with torch.no_grad():
        expected = encoder(features).last_hidden_state.numpy()
    assert got.shape == expected.shape == (len(audio), 1500, WHISPER["d_model"])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    return float(np.abs(got - expected).max())


@pytest.mark.parametrize("fmt", FORMATS)
def test_encoder_matches_transformers(tmp_path, export_model, support_matrix, fmt):
    encoder = build(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt, "--task", "feature-extraction")
    entry = json.loads((out / "export.json").read_text())["components"]["model"]
    assert [i["name"] for i in entry["inputs"]] == ["input_features"]
    assert [o["name"] for o in entry["outputs"]] == ["last_hidden_state"]
    err = check(out, encoder, clips(1 if fmt == "executorch" else 2), 80)
    support_matrix.record("whisper", "encoder feature-extraction", True, err, backend=fmt)


def test_whisper_model_checkpoint_with_128_mel_channels(tmp_path, export_model):
    """WhisperModel (no "model." prefix) with large-v3's 128 channels."""
    encoder = build(tmp_path / "model", head="Model", mels=128)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx", "--task", "feature-extraction")
    check(out, encoder, clips(2), 128)


@pytest.mark.parametrize("args,mentions", [
    ([], ["automatic-speech-recognition", "--for-generation", "--task feature-extraction"]),
    (["--task", "text-classification"], ["task", "feature-extraction"]),
    (["--task", "feature-extraction", "--for-generation"], ["decode loop"]),
])
def test_refusals(tmp_path, run_hfexport, args, mentions):
    build(tmp_path / "model")
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out, *args), out, *mentions)
