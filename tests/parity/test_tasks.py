"""Task heads: the base model's `last_hidden_state` (feature-extraction) from every decoder family,
on every backend, against transformers' AutoModel, at the real positions of a left-padded batch;
the task from `--task` or from config.json's `architectures` (a base-model checkpoint), recorded in
export.json; tasks a family has no head for refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import TINY_CONFIG, assert_clean_error
from test_onnx_parity import make_inputs
from tiny_configs import cases

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
FAMILIES = []
for c in cases("forward"):  # one configuration per family
    if c.model_type not in {f.model_type for f in FAMILIES}:
        FAMILIES.append(c)


def reference_hidden(model, inputs) -> np.ndarray:
    input_ids, attention_mask, position_ids = (torch.from_numpy(a) for a in inputs)
    with torch.no_grad():
        out = model.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    return out.last_hidden_state.float().numpy()


def run_export(out, inputs) -> np.ndarray:
    from hfexport import ExportedModel

    input_ids, attention_mask, position_ids = inputs
    result = ExportedModel(out)(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    return np.asarray(result["last_hidden_state"], dtype=np.float32)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", FAMILIES, ids=lambda c: c.model_type)
def test_feature_extraction_matches_transformers(tmp_path, make_tiny_model, export_model, case, fmt):
    model_dir, model = make_tiny_model(tmp_path / "model", case.model_type, {**TINY_CONFIG, **case.overrides})
    out = export_model(model_dir, tmp_path / "out", "--format", fmt, "--task", "feature-extraction")
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "feature-extraction"
    assert [o["name"] for o in manifest["components"]["model"]["outputs"]] == ["last_hidden_state"]
    # A .pte's plain forward takes batch 1 (its memory is planned at each dim's bound).
    inputs = make_inputs(model.config.vocab_size, lengths=(9,) if fmt == "executorch" else (12, 9, 5))
    ours, reference = run_export(out, inputs), reference_hidden(model, inputs)
    real = inputs[1].astype(bool)
    assert ours.shape == reference.shape
    np.testing.assert_allclose(ours[real], reference[real], rtol=1e-4, atol=1e-4)


def test_task_from_a_base_model_checkpoint(tmp_path, make_tiny_model, export_model):
    """A checkpoint saved from AutoModel (architectures LlamaModel, weights without the model.
    prefix and no lm_head) exports its hidden states without --task."""
    _, model = make_tiny_model(tmp_path / "lm", "llama", dict(TINY_CONFIG))
    base_dir = tmp_path / "base"
    model.base_model.save_pretrained(base_dir)
    assert json.loads((base_dir / "config.json").read_text())["architectures"] == ["LlamaModel"]
    out = export_model(base_dir, tmp_path / "out", "--format", "onnx")
    assert json.loads((out / "export.json").read_text())["task"] == "feature-extraction"
    inputs = make_inputs(model.config.vocab_size)
    real = inputs[1].astype(bool)
    np.testing.assert_allclose(run_export(out, inputs)[real], reference_hidden(model, inputs)[real], rtol=1e-4, atol=1e-4)
    # and a causal LM checkpoint stays text-generation
    lm = export_model(tmp_path / "lm", tmp_path / "lm-out", "--format", "onnx")
    assert json.loads((lm / "export.json").read_text())["task"] == "text-generation"


@pytest.mark.parametrize("args,mentions", [
    (["--task", "text-classification"], ["task", "text-classification", "feature-extraction"]),
    (["--task", "translation"], ["--task", "translation", "feature-extraction"]),
    (["--task", "feature-extraction", "--for-generation"], ["feature-extraction", "decode loop"]),
])
def test_tasks_without_a_head_are_refused(tmp_path, make_tiny_model, run_hfexport, args, mentions):
    model_dir, _ = make_tiny_model(tmp_path / "model", "llama", dict(TINY_CONFIG))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", model_dir, "-o", out, *args), out, *mentions)
