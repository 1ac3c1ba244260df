"""OpenVINO parity: the tiny random models of the ONNX parity suite exported with
``--format openvino`` and run in the OpenVINO runtime (CPU, f32 inference precision), against
transformers eager on the same left-padded batch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import test_onnx_parity as onnx_parity
from test_onnx_parity import BASE, CASES, FP32_TOL, hf_logits, make_inputs, masked_max_abs_diff

ov = pytest.importorskip("openvino")


def ov_logits(xml: Path, inputs) -> np.ndarray:
    compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    ids, mask, pos = inputs
    return compiled({"input_ids": ids, "attention_mask": mask, "position_ids": pos})["logits"]


def check_openvino_export(out: Path, vocab: int) -> None:
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["format"] == "openvino"
    comp = manifest["components"]["model"]
    assert comp["file"] == "openvino_model.xml" and comp["data_files"] == ["openvino_model.bin"]
    assert (out / "openvino_model.xml").is_file() and (out / "openvino_model.bin").is_file()
    assert [i["name"] for i in comp["inputs"]] == ["input_ids", "attention_mask", "position_ids"]
    assert comp["outputs"] == [{"name": "logits", "dtype": "float32", "shape": ["batch", "sequence", vocab]}]
    model = ov.Core().read_model(str(out / "openvino_model.xml"))
    assert {p.get_any_name() for p in model.inputs} == {"input_ids", "attention_mask", "position_ids"}
    assert [p.get_any_name() for p in model.outputs] == ["logits"]


def run_case(model_type, variant, model_dir, model, out, export_model, support_matrix, *extra, tol=FP32_TOL):
    name = variant
    try:
        export_model(model_dir, out, "--format", "openvino", *extra)
        vocab = model.config.vocab_size
        check_openvino_export(out, vocab)
        inputs = make_inputs(vocab)
        diff = masked_max_abs_diff(ov_logits(out / "openvino_model.xml", inputs), hf_logits(model, inputs), inputs[1])
        assert diff <= tol, f"{model_type}/{variant} in OpenVINO: max abs diff {diff:.3e} > {tol:.0e}"
    except Exception as e:
        support_matrix.record(model_type, name, False, None, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}",
                              backend="openvino")
        raise
    support_matrix.record(model_type, name, True, diff, backend="openvino")


@pytest.mark.parametrize("model_type,variant,overrides", CASES, ids=[f"{m}-{v}" for m, v, _ in CASES])
def test_openvino_parity_fp32(model_type, variant, overrides, tmp_path, make_tiny_model, export_model,
                              support_matrix):
    model_dir, model = make_tiny_model(tmp_path / "hf", model_type, {**BASE, **overrides})
    run_case(model_type, variant, model_dir, model, tmp_path / "out", export_model, support_matrix)


def test_openvino_bf16_checkpoint(tmp_path, make_tiny_model, export_model, support_matrix):
    model_dir, model = make_tiny_model(tmp_path / "hf", "qwen3", dict(BASE), dtype="bfloat16")
    import torch
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager",
                                                     dtype=torch.float32).eval()
    run_case("qwen3", "bf16-checkpoint-to-fp32", model_dir, reference, tmp_path / "out", export_model,
             support_matrix)


@pytest.mark.parametrize("name,gemms", [("mixtral-gqa-experts4-top2", 3 * 2),
                                        ("qwen3_moe-mha-experts5-top3-sparse_step2-mlp_only0", 3 * 2),
                                        ("gpt_oss-gqa-sinks-window4-experts4-top2", 2 * 2),
                                        ("gpt_oss-mqa-swiglu_limit0.3-top1-layer_types", 2 * 3)])
def test_openvino_cpu_plugin_runs_moe_sparsely(name, gemms, tmp_path, make_tiny_model, export_model):
    """The MoE block is the tiled form OpenVINO's CPU plugin rewrites into sparse GatherMatmul
    nodes (each token through its top-k experts only): three per SwiGLU MoE layer, two per gpt-oss
    one (fused gate_up), no Tile of the tokens left, and the logits still transformers'."""
    from collections import Counter

    from tiny_configs import case

    c = case(name)
    model_dir, model = make_tiny_model(tmp_path / "hf", c.model_type, {**BASE, **c.overrides})
    out = export_model(model_dir, tmp_path / "out", "--format", "openvino")
    compiled = ov.Core().compile_model(str(out / "openvino_model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    types = Counter(op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops())
    assert types["GatherMatmul"] == gemms, dict(types)
    assert types["Tile"] == 0, dict(types)
    inputs = make_inputs(model.config.vocab_size)
    ids, mask, pos = inputs
    got = compiled({"input_ids": ids, "attention_mask": mask, "position_ids": pos})["logits"]
    assert masked_max_abs_diff(got, hf_logits(model, inputs), inputs[1]) <= FP32_TOL
