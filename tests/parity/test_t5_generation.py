"""T5-family text-to-text generation (issue 31): the `encoder` component (input_ids,
attention_mask -> last_hidden_state, and every decoder block's cross-attention keys and values,
written once) and the `decoder` component (its self-attention cache with causal relative buckets,
cross-attention over the encoder's state under encoder_attention_mask), against transformers'
T5ForConditionalGeneration / MT5 / UMT5: encoder output and first-step logits within 1e-4, greedy
generation token-identical to `model.generate` for a padded batch, in each ONNX cache mechanic —
t5 (ReLU, tied embeddings: outputs scaled by d_model^-0.5), T5 v1.1 / flan (gated-GELU, an own
lm_head, no scaling), mt5 and umt5 (a bias table per block) —, and in OpenVINO, .pt2 and
ExecuTorch; the Python API and `hfexport generate` over it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_clean_error

CLASSES = {"t5": "T5", "mt5": "MT5", "umt5": "UMT5"}
# d_kv 24 x 4 heads != d_model 64; 16 buckets reaching 20 positions; a decoder deeper than the
# encoder (transformers' cache then sizes itself by the encoder: the references run without one).
T5 = dict(vocab_size=120, d_model=64, d_kv=24, d_ff=128, num_layers=2, num_decoder_layers=3, num_heads=4,
          relative_attention_num_buckets=16, relative_attention_max_distance=20, pad_token_id=0, eos_token_id=1,
          decoder_start_token_id=0)
VARIANTS = {
    "t5-relu-tied": ("t5", dict(feed_forward_proj="relu")),
    "t5v1.1-gated-untied": ("t5", dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)),
    "mt5": ("mt5", dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)),
    "umt5": ("umt5", dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)),
}
MODES = {"gqa-shared-buffer": [], "standard": ["--onnx-ops", "standard"], "ort": ["--onnx-ops", "ort"],
         "static": ["--static-cache", "--max-cache-len", "32", "--batch-size", "2"]}
# The other formats, with their static caches (ExecuTorch's programs serve batch 1).
FORMATS = {"openvino": ["--format", "openvino"], "pt2": ["--format", "pt2"], "executorch": ["--format", "executorch"],
           "pt2-static": ["--format", "pt2", "--static-cache", "--max-cache-len", "32", "--batch-size", "2"],
           "executorch-static": ["--format", "executorch", "--static-cache", "--max-cache-len", "32"]}


def build(folder, model_type: str, overrides: dict):
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, CLASSES[model_type] + "Config")(**{**T5, **overrides})
    config._attn_implementation = "eager"
    model = getattr(transformers, CLASSES[model_type] + "ForConditionalGeneration")(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.6 if "relative_attention_bias" in name else 0.2)
        if "lm_head.weight" in dict(model.named_parameters()) and model.lm_head.weight is not model.shared.weight:
            model.lm_head.weight.normal_(0.0, 0.2)
    model.eval().save_pretrained(folder)
    return model


def batch():
    """Two rows, the second right-padded (T5 tokenizers pad on the right)."""
    rng = np.random.default_rng(3)
    ids = rng.integers(2, T5["vocab_size"], size=(2, 9)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    ids[1, 6:] = 0
    return ids, mask


def reference(model, ids, mask, new: int) -> np.ndarray:
    with torch.no_grad():
        return model.generate(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                              max_new_tokens=new, do_sample=False, use_cache=False).numpy()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    built = {}
    for name, (model_type, overrides) in VARIANTS.items():
        folder = tmp_path_factory.mktemp("t5") / name
        built[name] = (folder, build(folder, model_type, overrides))
    return built


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("mode", list(MODES))
def test_generation_matches_transformers(tmp_path, models, export_model, support_matrix, variant, mode):
    from hfexport.runner import open_runner
    from hfexport.seq2seq import text2text_generate

    folder, model = models[variant]
    out = export_model(folder, tmp_path / "out", "--for-generation", *MODES[mode])
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "text2text-generation"
    assert manifest["generation"]["components"] == ["encoder", "decoder"]
    ids, mask = batch()
    runner = open_runner(out)
    encoded = runner.encode(input_ids=ids, attention_mask=mask)
    prompt = np.array([[0, 17, 33], [0, 17, 33]], np.int64)
    with torch.no_grad():
        expected = model.get_encoder()(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
        first = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                      decoder_input_ids=torch.from_numpy(prompt), use_cache=False).logits[:, -1].numpy()
    real = mask.astype(bool)
    np.testing.assert_allclose(encoded["last_hidden_state"][real], expected.last_hidden_state.numpy()[real],
                               rtol=1e-4, atol=1e-4)
    logits = runner.prefill(prompt, np.ones_like(prompt), 1)
    np.testing.assert_allclose(logits, first, rtol=1e-4, atol=1e-4)
    expected_ids = reference(model, ids, mask, 14)
    assert len({tuple(r) for r in expected_ids}) == 2, "rows should differ for the test to mean something"
    ours = text2text_generate(open_runner(out), ids, mask, {}, 14)
    np.testing.assert_array_equal(ours, expected_ids)
    support_matrix.record(VARIANTS[variant][0], f"text2text-generation ({variant}, {mode})", True,
                          float(np.abs(logits - first).max()), backend="onnx")


def test_python_api_and_cli(tmp_path, models, export_model, run_hfexport):
    from hfexport import ExportedModel

    folder, model = models["t5v1.1-gated-untied"]
    out = export_model(folder, tmp_path / "out", "--for-generation")
    ids, mask = batch()
    expected = reference(model, ids, mask, 10)
    got = ExportedModel(out).generate(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=10)
    np.testing.assert_array_equal(got.numpy(), expected)
    proc = run_hfexport("generate", out, "--input-ids", ",".join(map(str, ids[0])), "--max-new-tokens", "10",
                        "--ignore-eos")
    assert proc.returncode == 0, proc.stderr
    with torch.no_grad():
        single = model.generate(input_ids=torch.from_numpy(ids[:1]), max_new_tokens=10, do_sample=False,
                                eos_token_id=None, min_new_tokens=10, use_cache=False).numpy()[0, 1:]
    assert proc.stdout.split() == [str(t) for t in single]


@pytest.mark.parametrize("variant", ["t5-relu-tied", "umt5"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_matches_transformers(tmp_path, models, export_model, support_matrix, variant, fmt):
    from hfexport.runner import open_runner
    from hfexport.seq2seq import text2text_generate

    folder, model = models[variant]
    out = export_model(folder, tmp_path / "out", "--for-generation", *FORMATS[fmt])
    ids, mask = batch()
    if fmt.startswith("executorch"):  # its programs serve batch 1
        ids, mask = ids[1:], mask[1:]
    prompt = np.array([[0, 17, 33]] * len(ids), np.int64)
    runner = open_runner(out)
    runner.encode(input_ids=ids, attention_mask=mask)
    with torch.no_grad():
        first = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                      decoder_input_ids=torch.from_numpy(prompt), use_cache=False).logits[:, -1].numpy()
    logits = runner.prefill(prompt, np.ones_like(prompt), 1)
    np.testing.assert_allclose(logits, first, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(text2text_generate(open_runner(out), ids, mask, {}, 14), reference(model, ids, mask, 14))
    support_matrix.record(VARIANTS[variant][0], f"text2text-generation ({variant}, {fmt})", True,
                          float(np.abs(logits - first).max()), backend=fmt.split("-")[0])


def test_python_api_export_for_generation(models):
    """export_for_generation(model, inputs) on the live model: verified, and generating as it does."""
    from hfexport.exporters import OnnxExporter

    _, model = models["umt5"]
    ids, mask = batch()
    exported = OnnxExporter().export_for_generation(model, {"input_ids": torch.from_numpy(ids),
                                                            "attention_mask": torch.from_numpy(mask)})
    assert list(exported) == ["encoder", "decoder"]
    assert exported.manifest["verification"]["passed"] is True
    np.testing.assert_array_equal(exported.generate(ids, attention_mask=mask, max_new_tokens=8), reference(model, ids, mask, 8))


@pytest.mark.parametrize("args,mentions", [
    ([], ["text2text-generation", "--for-generation"]),
    (["--task", "text2text-generation"], ["--for-generation"]),
])
def test_refusals(tmp_path, models, run_hfexport, args, mentions):
    folder, _ = models["t5-relu-tied"]
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", folder, "-o", out, *args), out, *mentions)
