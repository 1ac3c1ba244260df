"""Masks by pattern: gemma3_text with `use_bidirectional_attention` (EmbeddingGemma's encoder) sees
every key on full layers and keys less than `sliding_window // 2 + 1` away on either side on
sliding ones, with padding. Its hidden states (feature-extraction) and logits on every backend
against transformers eager at the real positions of a left-padded batch; onnxruntime's
GroupQueryAttention, causal by construction, is not used for it; a decode loop is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import TINY_CONFIG, assert_clean_error
from test_onnx_parity import make_inputs

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
# Three layers, sliding ones around a full one; a window of 3 on either side (4 // 2 + 1) is
# narrower than the prompts, so both patterns show in the hidden states.
BIDIRECTIONAL = dict(num_hidden_layers=3, num_key_value_heads=2, head_dim=16, sliding_window=4,
                     layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                     rope_local_base_freq=100.0, query_pre_attn_scalar=16, use_bidirectional_attention=True)


def run_export(out, inputs, name):
    from hfexport import ExportedModel

    input_ids, attention_mask, position_ids = inputs
    result = ExportedModel(out)(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    return np.asarray(result[name], dtype=np.float32)


def reference(model, inputs, base: bool) -> np.ndarray:
    input_ids, attention_mask, position_ids = (torch.from_numpy(a) for a in inputs)
    module = model.base_model if base else model
    with torch.no_grad():
        module(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)  # see hf_logits
        out = module(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    return (out.last_hidden_state if base else out.logits).float().numpy()


@pytest.fixture(scope="module")
def bidirectional_model(tmp_path_factory):
    from conftest import build_tiny_model

    model_dir = tmp_path_factory.mktemp("gemma3-bidirectional")
    _, model = build_tiny_model(model_dir, "gemma3_text", {**TINY_CONFIG, **BIDIRECTIONAL})
    assert model.config.sliding_window == 3  # transformers' conversion of the saved 4
    return model_dir, model


@pytest.mark.parametrize("task,output", [("feature-extraction", "last_hidden_state"), ("text-generation", "logits")])
@pytest.mark.parametrize("fmt", FORMATS)
def test_bidirectional_matches_transformers(tmp_path, bidirectional_model, export_model, fmt, task, output):
    model_dir, model = bidirectional_model
    out = export_model(model_dir, tmp_path / "out", "--format", fmt, "--task", task)
    assert [o["name"] for o in json.loads((out / "export.json").read_text())["components"]["model"]["outputs"]] == [output]
    # A .pte's plain forward takes batch 1 (its memory is planned at each dim's bound).
    inputs = make_inputs(model.config.vocab_size, lengths=(9,) if fmt == "executorch" else (12, 9, 5))
    ours, expected = run_export(out, inputs, output), reference(model, inputs, task == "feature-extraction")
    real = inputs[1].astype(bool)
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours[real], expected[real], rtol=1e-4, atol=1e-4)


def test_the_pattern_is_not_causal(bidirectional_model):
    """The test above would pass for a causal export if transformers ignored the flag: it must not."""
    from transformers import AutoModelForCausalLM

    model_dir, model = bidirectional_model
    causal = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32,
                                                  use_bidirectional_attention=False).eval()
    inputs = make_inputs(model.config.vocab_size, lengths=(12, 9, 5))
    real = inputs[1].astype(bool)
    assert np.abs(reference(model, inputs, True)[real] - reference(causal, inputs, True)[real]).max() > 1e-2


def test_groupqueryattention_is_not_used(tmp_path, bidirectional_model, export_model):
    import onnx

    model_dir, model = bidirectional_model
    out = export_model(model_dir, tmp_path / "out", "--format", "onnx", "--onnx-ops", "ort-gqa",
                       "--task", "feature-extraction")
    ops = {n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node}
    assert "GroupQueryAttention" not in ops and "Attention" in ops
    inputs = make_inputs(model.config.vocab_size, lengths=(12, 9, 5))
    real = inputs[1].astype(bool)
    np.testing.assert_allclose(run_export(out, inputs, "last_hidden_state")[real],
                               reference(model, inputs, True)[real], rtol=1e-4, atol=1e-4)


def test_a_decode_loop_is_refused(tmp_path, bidirectional_model, run_hfexport):
    model_dir, _ = bidirectional_model
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", model_dir, "-o", out, "--for-generation"), out,
                       "use_bidirectional_attention", "decode loop")
