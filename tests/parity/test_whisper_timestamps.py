"""Whisper with timestamps and long-form audio (issue 31), against transformers'
WhisperForConditionalGeneration.generate: `return_timestamps=True` (its timestamp logits rules:
pairs, never decreasing, the first one bounded by max_initial_timestamp_index, timestamps forced
when their total probability wins) and audio longer than 30 s (its sequential decoding: 30 s
windows, each starting at the last complete segment's end; a batch of two lengths by its
attention mask) give the same tokens and the same segments (start, end, tokens), in ONNX (shared
buffer and static cache), OpenVINO and ExecuTorch. `hfexport transcribe` prints the text of a
70 s WAV, and its segments with --timestamps."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_clean_error
from test_whisper_generation import (EN, EOS, FR, MULTILINGUAL, NO_TIMESTAMPS, RATE, START, TRANSCRIBE, TRANSLATE,
                                     WHISPER, write_wav)

STAMPS = 1501  # <|0.00|> ... <|30.00|>, after <|notimestamps|> as in a real vocabulary
BEGIN = NO_TIMESTAMPS + 1
GENERATION = dict(MULTILINGUAL, max_initial_timestamp_index=50, max_length=40, suppress_tokens=[0, 3, 7, 11])
FORMATS = {"onnx": [], "onnx-static": ["--static-cache", "--max-cache-len", "48", "--batch-size", "2"],
           "openvino": ["--format", "openvino"], "executorch": ["--format", "executorch"]}


def build(folder):
    import transformers
    from tokenizers import AddedToken, Tokenizer, models

    torch.manual_seed(0)
    config = transformers.WhisperConfig(**dict(WHISPER, vocab_size=BEGIN + STAMPS), num_mel_bins=80)
    config._attn_implementation = "eager"
    model = transformers.WhisperForConditionalGeneration(config)
    with torch.no_grad():  # sharp cross-attention and positions: each window gets its own tokens
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.5 if "embed_positions" in name or "encoder_attn" in name else 0.03)
    model.generation_config = transformers.GenerationConfig(**GENERATION)
    model.eval().save_pretrained(folder)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(config.vocab_size)}, unk_token="w0"))
    tok.add_special_tokens([AddedToken(f"w{i}", special=True) for i in (0, 1, EOS, START, EN, FR, TRANSLATE,
                                                                        TRANSCRIBE, NO_TIMESTAMPS)])
    tok.save(str(folder / "tokenizer.json"))
    return model, tok


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whisper-ts") / "model"
    model, tok = build(folder)
    return folder, model, tok


def audio(seconds: float, seed: int) -> np.ndarray:
    """A tone gliding in pitch under noise that swells and fades: every window looks different."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    tone = 0.3 * np.sin(2 * np.pi * (200 + 15 * t) * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 0.3 * t))
    return (tone + 0.1 * np.sin(2 * np.pi * 0.05 * t) * rng.standard_normal(t.size)).astype(np.float32)


def hf_features(clips, long_form: bool):
    from transformers import WhisperFeatureExtractor

    extract = WhisperFeatureExtractor(feature_size=80)
    if not long_form:
        return extract(clips, sampling_rate=RATE, return_tensors="np").input_features, None
    out = extract(clips, sampling_rate=RATE, truncation=False, padding="longest", return_attention_mask=True,
                  return_tensors="np")
    return out.input_features, out.attention_mask


def reference(model, feats, mask=None, **kwargs):
    with torch.no_grad():
        out = model.generate(torch.from_numpy(feats), attention_mask=None if mask is None else torch.from_numpy(mask),
                             return_timestamps=True, return_segments=True, **kwargs)
    return out["sequences"].numpy(), out["segments"]


def assert_same(ours, segments, expected, expected_segments):
    np.testing.assert_array_equal(ours, expected)
    assert len(segments) == len(expected_segments)
    for row, row_expected in zip(segments, expected_segments):
        assert [list(map(int, s["tokens"])) for s in row] == [s["tokens"].tolist() for s in row_expected]
        np.testing.assert_allclose([(s["start"], s["end"]) for s in row],
                                   [(float(s["start"]), float(s["end"])) for s in row_expected], atol=1e-9)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_timestamps_and_long_form_match_transformers(tmp_path, whisper, export_model, fmt):
    from hfexport.runner import open_runner
    from hfexport.seq2seq import whisper_generate

    folder, model, _ = whisper
    out = export_model(folder, tmp_path / "out", "--for-generation", *FORMATS[fmt])
    gen = json.loads((out / "generation_config.json").read_text())
    batch = 1 if fmt == "executorch" else 2
    windows = 0
    cases = [(hf_features([audio(28, 1), audio(25, 2)][:batch], long_form=False), {}),
             (hf_features([audio(28, 1), audio(25, 2)][:batch], long_form=False), {"language": "fr", "max_new_tokens": 20}),
             (hf_features([audio(70, 3), audio(45, 4)][:batch], long_form=True), {}),
             (hf_features([audio(70, 3), audio(45, 4)][:batch], long_form=True), {"language": "en", "task": "translate"})]
    for (feats, mask), kwargs in cases:
        expected, expected_segments = reference(model, feats, mask, **kwargs)
        segments = []
        ours = whisper_generate(open_runner(out), feats, gen, kwargs.pop("max_new_tokens", None), attention_mask=mask,
                                return_timestamps=True, segments=segments, **kwargs)
        assert_same(ours, segments, expected, expected_segments)
        windows = max(windows, max(len(s) for s in segments))
    # The audio exercises what it claims: several segments per row (pairs of timestamps).
    assert windows >= 3


def test_long_form_without_timestamps_argument(tmp_path, whisper, export_model):
    """Audio over 30 s is decoded sequentially with timestamps whether or not they are asked for,
    as transformers does; ExportedModel.generate takes the attention mask and returns the segments."""
    from hfexport import ExportedModel

    folder, model, _ = whisper
    out = export_model(folder, tmp_path / "out", "--for-generation")
    feats, mask = hf_features([audio(70, 3), audio(45, 4)], long_form=True)
    expected, expected_segments = reference(model, feats, mask, language="fr")
    api = ExportedModel(out).generate(input_features=torch.from_numpy(feats), attention_mask=torch.from_numpy(mask),
                                      language="fr", return_segments=True)
    assert_same(api["sequences"].numpy(), api["segments"], expected, expected_segments)
    short, _ = hf_features([audio(28, 1)], long_form=False)
    with torch.no_grad():
        plain = model.generate(torch.from_numpy(short), language="fr", return_timestamps=True).numpy()
    np.testing.assert_array_equal(ExportedModel(out).generate(input_features=short, language="fr",
                                                              return_timestamps=True), plain)


def test_transcribe_long_audio(tmp_path, whisper, export_model, run_hfexport):
    """`hfexport transcribe` of 70 s: native features over the whole file, sequential decoding, the
    text without timestamp tokens; --timestamps prints each segment's times and text."""
    from transformers import WhisperFeatureExtractor

    folder, model, tok = whisper
    out = export_model(folder, tmp_path / "out", "--for-generation")
    clip = audio(70, 3)
    write_wav(tmp_path / "long.wav", clip)
    pcm = np.round(np.clip(clip, -1, 1) * 32767).astype(np.int16).astype(np.float32) / 32768
    feats = WhisperFeatureExtractor()(pcm, sampling_rate=RATE, truncation=False, padding="longest",
                                      return_tensors="np").input_features
    ids, segments = reference(model, feats, language="fr")
    text = tok.decode([int(i) for i in ids[0] if i < BEGIN], skip_special_tokens=True).strip()
    proc = run_hfexport("transcribe", out, tmp_path / "long.wav", "--language", "fr")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == text and text
    proc = run_hfexport("transcribe", out, tmp_path / "long.wav", "--language", "fr", "--timestamps")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(segments[0]) > 1
    for line, segment in zip(lines, segments[0]):
        words = tok.decode([int(i) for i in segment["tokens"] if i < BEGIN], skip_special_tokens=True).strip()
        assert line == f"[{float(segment['start']):.2f} --> {float(segment['end']):.2f}] {words}".rstrip()


def test_timestamps_need_the_token(tmp_path, whisper, export_model, run_hfexport):
    """A generation config without no_timestamps_token_id cannot place timestamps: one line."""
    folder, _, _ = whisper
    out = export_model(folder, tmp_path / "out", "--for-generation")
    gen = json.loads((out / "generation_config.json").read_text())
    del gen["no_timestamps_token_id"]
    (out / "generation_config.json").write_text(json.dumps(gen))
    write_wav(tmp_path / "long.wav", audio(40, 5))
    assert_clean_error(run_hfexport("transcribe", out, tmp_path / "long.wav", "--language", "fr"), None,
                       "no_timestamps_token_id")
