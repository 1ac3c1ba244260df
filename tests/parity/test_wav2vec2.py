"""wav2vec2 (issue 31): raw samples through the convolutional feature encoder, the weight-normalised
positional convolution and the transformer layers to Wav2Vec2ForCTC's logits (or Wav2Vec2Model's
last_hidden_state), against transformers on every backend — the base layout (GroupNorm after the
first convolution, post-norm layers, an even positional kernel) and the large-lv60 layout
(LayerNorm after each convolution, conv biases, pre-norm layers, an odd kernel), torch's
parametrized weight norm and the Hub's older weight_g / weight_v names —; `hfexport transcribe`
prints the CTC-decoded text as Wav2Vec2CTCTokenizer decodes the argmax."""

from __future__ import annotations

import json
import wave

import numpy as np
import pytest
import torch

from conftest import assert_clean_error

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
TINY = dict(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            conv_dim=(16, 24, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 2), pad_token_id=0)
LAYOUTS = {
    "base": dict(feat_extract_norm="group", do_stable_layer_norm=False, num_conv_pos_embeddings=16,
                 num_conv_pos_embedding_groups=4),
    "large-lv60": dict(feat_extract_norm="layer", do_stable_layer_norm=True, conv_bias=True,
                       num_conv_pos_embeddings=15, num_conv_pos_embedding_groups=2),
}
LETTERS = "abcdefghijklmnopqrstuvwxyz'"


def build(folder, layout: str, head: str = "ForCTC", old_weight_norm: bool = False):
    import safetensors.torch as st
    import transformers

    torch.manual_seed(0)
    config = transformers.Wav2Vec2Config(**TINY, **LAYOUTS[layout])
    config._attn_implementation = "eager"
    model = getattr(transformers, "Wav2Vec2" + head)(config)
    with torch.no_grad():  # norms without offsets and a head without bias: the frames' tokens vary
        for name, p in model.named_parameters():
            if "norm" in name and "pos_conv" not in name:
                p.uniform_(0.5, 1.5) if name.endswith("weight") else p.zero_()
            elif name == "lm_head.bias":
                p.zero_()
            elif p.dim() > 1 or "bias" in name:
                p.normal_(0.0, 0.3)
    model.eval().save_pretrained(folder)
    if old_weight_norm:  # the Hub's checkpoints from before torch's parametrizations
        path = folder / "model.safetensors"
        tensors = st.load_file(path)
        renamed = {k.replace("parametrizations.weight.original0", "weight_g").replace("parametrizations.weight.original1",
                                                                                      "weight_v"): v
                   for k, v in tensors.items()}
        assert renamed != tensors
        st.save_file(renamed, path, metadata={"format": "pt"})
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4, **{c: 5 + i for i, c in enumerate(LETTERS)}}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = transformers.Wav2Vec2CTCTokenizer(str(folder / "vocab.json"))
    tokenizer.save_pretrained(folder)
    transformers.Wav2Vec2FeatureExtractor(do_normalize=True, return_attention_mask=False).save_pretrained(folder)
    return model, tokenizer


def audio(batch: int, length: int = 6400) -> np.ndarray:
    rng = np.random.default_rng(2)
    t = np.arange(length) / 16000
    tone = 0.4 * np.sin(2 * np.pi * 300 * t)
    return np.stack([tone + 0.1 * rng.standard_normal(length) for _ in range(batch)]).astype(np.float32)


def check(out, model, values, output: str) -> float:
    from hfexport import ExportedModel

    got = np.asarray(ExportedModel(out)(input_values=values)[output], np.float32)
    with torch.no_grad():
        result = model(torch.from_numpy(values))
    expected = (result.logits if output == "logits" else result.last_hidden_state).numpy()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    return float(np.abs(got - expected).max())


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_ctc_logits_match_transformers(tmp_path, export_model, support_matrix, fmt, layout):
    model, _ = build(tmp_path / "model", layout)
    args = ["--dim", "samples=400:16000"] if fmt == "executorch" else []
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt, *args)
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "automatic-speech-recognition"
    err = max(check(out, model, audio(1 if fmt == "executorch" else 2, n), "logits") for n in (6400, 3211))
    support_matrix.record("wav2vec2", f"CTC logits ({layout})", True, err, backend=fmt)


def test_base_model_and_old_weight_norm_names(tmp_path, export_model):
    model, _ = build(tmp_path / "model", "base", head="Model", old_weight_norm=True)
    out = export_model(tmp_path / "model", tmp_path / "out")
    assert json.loads((out / "export.json").read_text())["task"] == "feature-extraction"
    check(out, model, audio(2), "last_hidden_state")


def test_transcribe_prints_the_ctc_text(tmp_path, export_model, run_hfexport):
    model, tokenizer = build(tmp_path / "model", "large-lv60")
    out = export_model(tmp_path / "model", tmp_path / "out")
    t = np.arange(12000) / 16000
    samples = (0.4 * np.sin(2 * np.pi * (100 + 4000 * t) * t)).astype(np.float32)  # a chirp
    with wave.open(str(tmp_path / "clip.wav"), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes((samples * 32767).astype("<i2").tobytes())
    proc = run_hfexport("transcribe", out, tmp_path / "clip.wav")
    assert proc.returncode == 0, proc.stderr
    from transformers import Wav2Vec2FeatureExtractor

    pcm = (samples * 32767).astype(np.int16).astype(np.float32) / 32768
    values = Wav2Vec2FeatureExtractor.from_pretrained(tmp_path / "model")(pcm, sampling_rate=16000,
                                                                         return_tensors="pt").input_values
    with torch.no_grad():
        ids = model(values).logits.argmax(-1)[0]
    expected = tokenizer.decode(ids)
    assert len(expected) > 3, "the tiny model should spell something"
    assert proc.stdout.strip() == expected


def test_bad_config_and_transcribe_refusals(tmp_path, export_model, run_hfexport):
    build(tmp_path / "model", "base")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    (tmp_path / "model" / "config.json").write_text(json.dumps({**config, "conv_kernel": [10, 3]}))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out), out, "conv_kernel")
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    base = export_model(tmp_path / "model", tmp_path / "base", "--task", "feature-extraction")
    (tmp_path / "clip.wav").write_bytes(b"")
    assert_clean_error(run_hfexport("transcribe", base, tmp_path / "clip.wav"), None, "not a speech recognition export")


@pytest.mark.parametrize("args,mentions", [
    (["--for-generation"], ["decode loop"]),
    (["--task", "text-classification"], ["task", "automatic-speech-recognition"]),
])
def test_refusals(tmp_path, run_hfexport, args, mentions):
    build(tmp_path / "model", "base")
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out, *args), out, *mentions)
