"""A decoder that takes `inputs_embeds` in place of `input_ids` (`--inputs inputs_embeds,...`): every
family on every backend against transformers' `model(inputs_embeds=...)` at the real positions
of a left-padded batch (what the forward does to given embeddings differs by family: Granite
multiplies them, GPT-2 adds its position embeddings, Gemma's scale is the embedding module's);
the seed-shaped Python export from sample inputs holding inputs_embeds; misuse refused."""

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
EMBEDS_INPUTS = "inputs_embeds,attention_mask,position_ids"


def embeddings(model, input_ids: np.ndarray) -> np.ndarray:
    """What a caller passes: the embedding module's output, nudged so that a graph looking the
    tokens up itself could not match."""
    with torch.no_grad():
        e = model.get_input_embeddings()(torch.from_numpy(input_ids))
    noise = np.random.default_rng(0).normal(0.0, 0.05, e.shape).astype(np.float32)
    return e.float().numpy() + noise


def reference(model, embeds, attention_mask, position_ids) -> np.ndarray:
    kwargs = dict(inputs_embeds=torch.from_numpy(embeds), attention_mask=torch.from_numpy(attention_mask),
                  position_ids=torch.from_numpy(position_ids))
    with torch.no_grad():
        model(**kwargs)  # the first eager forward of a process may differ at padded rows (see hf_logits)
        return model(**kwargs).logits.float().numpy()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", FAMILIES, ids=lambda c: c.model_type)
def test_inputs_embeds_match_transformers(tmp_path, make_tiny_model, export_model, case, fmt):
    from hfexport import ExportedModel

    model_dir, model = make_tiny_model(tmp_path / "model", case.model_type, {**TINY_CONFIG, **case.overrides})
    out = export_model(model_dir, tmp_path / "out", "--format", fmt, "--inputs", EMBEDS_INPUTS)
    entry = json.loads((out / "export.json").read_text())["components"]["model"]
    assert [i["name"] for i in entry["inputs"]] == EMBEDS_INPUTS.split(",")
    batch = 1 if fmt == "executorch" else "batch"  # a .pte's plain forward is batch 1 by default
    assert entry["inputs"][0]["shape"] == [batch, "sequence", model.config.hidden_size]
    # A .pte's plain forward takes batch 1 (its memory is planned at each dim's bound).
    input_ids, attention_mask, position_ids = make_inputs(model.config.vocab_size,
                                                          lengths=(9,) if fmt == "executorch" else (12, 9, 5))
    embeds = embeddings(model, input_ids)
    ours = ExportedModel(out)(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=position_ids)["logits"]
    expected = reference(model, embeds, attention_mask, position_ids)
    real = attention_mask.astype(bool)
    np.testing.assert_allclose(np.asarray(ours)[real], expected[real], rtol=1e-4, atol=1e-4)


def test_python_export_from_sample_inputs_embeds(tmp_path, make_tiny_model):
    """transformers.exporters' shape: exporter.export(model, sample inputs) with inputs_embeds in
    them; the export takes exactly those inputs and verifies itself against the eager model."""
    from hfexport import OnnxConfig, OnnxExporter

    _, model = make_tiny_model(tmp_path / "model", "granite", dict(TINY_CONFIG))
    input_ids, attention_mask, position_ids = make_inputs(model.config.vocab_size)
    embeds = embeddings(model, input_ids)
    sample = {"inputs_embeds": torch.from_numpy(embeds), "attention_mask": torch.from_numpy(attention_mask)}
    exported = OnnxExporter().export(model, sample, config=OnnxConfig(dynamic=True))
    assert [i["name"] for i in exported.manifest["components"]["model"]["inputs"]] == ["inputs_embeds", "attention_mask"]
    assert exported.manifest["verification"]["passed"]
    ours = exported(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=position_ids)["logits"]
    real = attention_mask.astype(bool)
    np.testing.assert_allclose(np.asarray(ours)[real], reference(model, embeds, attention_mask, position_ids)[real],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("args,mentions", [
    (["--inputs", "input_ids,inputs_embeds"], ["inputs", "input_ids or inputs_embeds"]),
    (["--inputs", "inputs_embeds", "--for-generation"], ["--inputs", "plain forward"]),
    (["--inputs", "pixel_values"], ["pixel_values", "inputs_embeds", "attention_mask"]),
])
def test_misuse_is_refused(tmp_path, make_tiny_model, run_hfexport, args, mentions):
    model_dir, _ = make_tiny_model(tmp_path / "model", "llama", dict(TINY_CONFIG))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", model_dir, "-o", out, *args), out, *mentions)
