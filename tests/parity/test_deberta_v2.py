"""DeBERTa-v2/v3 (issue 30) beyond the shared encoder tests (which run a v3-shaped config in every
format and head): the config variants real checkpoints carry — v2-xlarge's convolution after the
first layer and its own pos_key_proj / pos_query_proj without buckets, a single disentangled term,
embeddings narrower than the layers, absolute positions only — against transformers on left-padded
batches; relative distances past every log-bucket edge; a left-padded classifier, whose pooler
reads a padding row (transformers gives those rows the mean of every value, and so does the
export); the masked-LM heads (legacy tied / untied, lm_predictions) with DeBERTa-v3's
replaced-token-detection weights in the checkpoint; refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_clean_error
from test_encoder_heads import build_head_model, check_logits_at_real_positions
from test_encoders import BERT, build_encoder, check, encoder_inputs, reference, run_export

VARIANTS = {
    # microsoft/deberta-v2-xlarge: ConvLayer (kernel 3, gelu), separate relative projections, the
    # 4.x string pos_att_type, distances unbucketed up to max_position_embeddings.
    "v2-xlarge": {"relative_attention": True, "pos_att_type": "p2c|c2p", "conv_kernel_size": 3, "conv_act": "gelu",
                  "position_biased_input": False, "max_relative_positions": -1, "share_att_key": False},
    "c2p-narrow-embeddings": {"relative_attention": True, "pos_att_type": ["c2p"], "position_buckets": 6,
                              "max_relative_positions": 16, "embedding_size": 48, "type_vocab_size": 0},
    "p2c-grouped-conv": {"relative_attention": True, "pos_att_type": ["p2c"], "position_buckets": 16,
                         "max_relative_positions": 24, "conv_kernel_size": 5, "conv_groups": 4, "conv_act": "tanh",
                         "norm_rel_ebd": "layer_norm", "share_att_key": True},
    # deberta-v1-like: absolute positions; the terms still set the scale, though nothing computes them
    "absolute-only": {"relative_attention": False, "pos_att_type": ["c2p", "p2c"]},
}


def deberta_inputs(config: dict, lengths, left=True):
    inputs = encoder_inputs(BERT["vocab_size"], lengths=lengths, left=left)
    if config.get("type_vocab_size", BERT["type_vocab_size"]) == 0:
        inputs.pop("token_type_ids")
    return inputs


@pytest.mark.parametrize("fmt", ["onnx", "openvino", "pt2", "executorch"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_config_variants_match_transformers(tmp_path, export_model, variant, fmt):
    config = {**BERT, **VARIANTS[variant]}
    model_dir, model = build_encoder(tmp_path / "model", config, model_type="deberta-v2")
    out = export_model(model_dir, tmp_path / "out", "--format", fmt)
    inputs = deberta_inputs(config, (9,) if fmt == "executorch" else (12, 9, 5))
    ours, expected = run_export(out, inputs), reference(model, inputs)
    check(ours, expected, inputs["attention_mask"])
    # the padding rows too: transformers averages every value there, and so does the export
    np.testing.assert_allclose(ours["last_hidden_state"], expected["last_hidden_state"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_relative_distances_past_every_bucket_edge(tmp_path, export_model, fmt):
    """64 buckets (log from distance 32) reaching 256, over rows of 280 and 190 tokens: the
    buckets are transformers' float32 ones."""
    config = {**BERT, "max_position_embeddings": 300, "position_buckets": 64, "max_relative_positions": 256,
              "num_hidden_layers": 1}
    model_dir, model = build_encoder(tmp_path / "model", config, model_type="deberta-v2")
    out = export_model(model_dir, tmp_path / "out", "--format", fmt)
    inputs = deberta_inputs(config, (280, 190), left=False)
    check(run_export(out, inputs), reference(model, inputs), inputs["attention_mask"])


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_left_padded_classifier(tmp_path, export_model, fmt):
    from hfexport import ExportedModel

    model = build_head_model(tmp_path / "model", "deberta-v2", "ForSequenceClassification",
                             {"num_labels": 3, "pooler_hidden_act": "tanh"})
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    inputs = encoder_inputs(BERT["vocab_size"], left=True)
    with torch.no_grad():
        expected = model(**{k: torch.from_numpy(v) for k, v in inputs.items()}).logits.numpy()
    np.testing.assert_allclose(np.asarray(ExportedModel(out)(**inputs)["logits"]), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("overrides", [{"legacy": False}, {"tie_word_embeddings": False}, {"embedding_size": 48}],
                         ids=["lm_predictions", "legacy-untied", "legacy-narrow-embeddings"])
def test_masked_lm_heads(tmp_path, export_model, overrides):
    """Each masked-LM head, from a checkpoint that also holds DeBERTa-v3's replaced-token-detection
    head (mask_predictions.*, which transformers ignores as it loads)."""
    from safetensors.torch import load_file, save_file

    model = build_head_model(tmp_path / "model", "deberta-v2", "ForMaskedLM", overrides)
    weights = load_file(tmp_path / "model" / "model.safetensors")
    hidden = BERT["hidden_size"]
    extra = {"mask_predictions.dense.weight": torch.randn(hidden, hidden), "mask_predictions.dense.bias": torch.randn(hidden),
             "mask_predictions.classifier.weight": torch.randn(1, hidden)}
    save_file({**weights, **extra}, tmp_path / "model" / "model.safetensors", metadata={"format": "pt"})
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx")
    check_logits_at_real_positions(model, out, encoder_inputs(BERT["vocab_size"]))


@pytest.mark.parametrize("overrides,mentions", [
    ({"conv_kernel_size": 2}, ["conv_kernel_size", "odd"]),
    ({"legacy": False, "embedding_size": 48}, ["legacy", "embedding_size"]),
    ({"pooler_hidden_size": 32}, ["pooler_hidden_size", "hidden_size"]),
    ({"attention_head_size": 24}, ["attention_head_size", "hidden_size"]),
    ({"pos_att_type": 3}, ["pos_att_type"]),
    ({"position_buckets": 1}, ["position_buckets"]),
])
def test_refusals(tmp_path, run_hfexport, overrides, mentions):
    model_dir, _ = build_encoder(tmp_path / "model", BERT, model_type="deberta-v2")
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, **overrides}))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", model_dir, "-o", out), out, *mentions)


def test_float16_in_onnxruntime(tmp_path, export_model):
    """--dtype float16 with both disentangled terms: onnxruntime sets the session up (it crashed on
    a float16 MatMul of a 4-D by a transposed 3-D operand) and gives transformers' numbers to
    float16 precision."""
    model_dir, model = build_encoder(tmp_path / "model", BERT, model_type="deberta-v2")
    out = export_model(model_dir, tmp_path / "out", "--format", "onnx", "--dtype", "float16")
    inputs = encoder_inputs(BERT["vocab_size"], left=True)
    real = inputs["attention_mask"].astype(bool)
    got = run_export(out, inputs)["last_hidden_state"][real]
    np.testing.assert_allclose(got, reference(model, inputs)["last_hidden_state"][real], rtol=2e-2, atol=2e-2)
