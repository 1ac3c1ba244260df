"""The reference decompositions define every high-level op's semantics (passes/decompose.cpp);
most exports use the backends' fused ops instead, so `--decompose` (backend option `decompose`)
exports them decomposed: each must still match transformers, on onnxruntime and OpenVINO alike.
Includes the quantized weights' dequantization (uint8 bit operations) on OpenVINO."""

from __future__ import annotations

import onnx
import pytest
from test_onnx_parity import FP32_TOL, hf_logits, make_inputs, masked_max_abs_diff, ort_logits
from test_quantized import ov_compile, quantized_reference
from tiny_configs import case

# Together: GQA + q/k norm + yarn, a sliding window, tied embeddings with biases and llama3 rope.
NAMES = ["qwen3-mqa-head_dim24-rope_yarn", "mistral-gqa-sliding_window4", "llama-gqa-head_dim32-tied-attn_bias-mlp_bias-rope_llama3",
         # LayerNorm, partial rotary; attention and final softcaps, 1 + w norms; MoE and sinks
         "gpt_neox-parallel-rotary_pct0.25", "gemma2-gqa-softcaps-sliding_window4", "gpt_oss-gqa-sinks-window4-experts4-top2",
         # the gated delta rule (onnxruntime's LinearAttention under the ort profiles)
         "qwen3_5_text-gqa-khead2-vhead4-conv4-rope_half",
         # Mamba2's SSD beside attention (onnxruntime's GatedDeltaNet under the ort profiles)
         "granitemoehybrid-mamba-groups2-rope-moe4-4x_names"]
FUSED_ONNX_OPS = {"RMSNormalization", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization",
                  "LayerNormalization", "SkipLayerNormalization", "MoE", "QMoE",
                  "RotaryEmbedding", "Attention", "GroupQueryAttention", "Gelu", "LinearAttention",
                  "GatedDeltaNet", "CausalConvWithState"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, make_tiny_model):
    built = {}

    def get(name):
        if name not in built:
            c = case(name)
            built[name] = make_tiny_model(tmp_path_factory.mktemp("decomp") / "hf", c.model_type, c.config)
        return built[name]

    return get


def ov_logits(out, inputs):
    compiled = ov_compile(out / "openvino_model.xml")
    names = [i.get_any_name() for i in compiled.inputs]
    return compiled, compiled(dict(zip(names, inputs)))[compiled.output("logits")]


@pytest.mark.parametrize("profile", ["standard", "ort"])
@pytest.mark.parametrize("name", NAMES)
def test_onnx_decomposed_matches_transformers(name, profile, tiny, tmp_path, export_model):
    model_dir, model = tiny(name)
    out = export_model(model_dir, tmp_path / "out", "--onnx-ops", profile, "--decompose", "all")
    ops = {n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node}
    assert not ops & FUSED_ONNX_OPS, f"fused ops left: {ops & FUSED_ONNX_OPS}"
    assert "MatMul" in ops and "Softmax" in ops
    inputs = make_inputs(model.config.vocab_size)
    assert masked_max_abs_diff(ort_logits(out / "model.onnx", inputs), hf_logits(model, inputs), inputs[1]) <= FP32_TOL


@pytest.mark.parametrize("name", NAMES)
def test_openvino_decomposed_matches_transformers(name, tiny, tmp_path, export_model):
    model_dir, model = tiny(name)
    out = export_model(model_dir, tmp_path / "out", "--format", "openvino", "--decompose", "all")
    xml = (out / "openvino_model.xml").read_text()
    assert "ScaledDotProductAttention" not in xml and 'type="Gather"' in xml
    inputs = make_inputs(model.config.vocab_size)
    _, got = ov_logits(out, inputs)
    assert masked_max_abs_diff(got, hf_logits(model, inputs), inputs[1]) <= FP32_TOL


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_decomposed_dequantization_matches_transformers(fmt, tiny, tmp_path, export_model):
    """int4 codes unpacked by the reference decomposition (BitwiseAnd / BitShift on uint8)."""
    model_dir, model = tiny(NAMES[2])
    extra = ["--onnx-ops", "ort"] if fmt == "onnx" else []
    out = export_model(model_dir, tmp_path / "out", "--format", fmt, *extra, "--quantize", "int4",
                       "--quantize-compute", "float", "--decompose", "QuantizedLinear")
    inputs = make_inputs(model.config.vocab_size)
    if fmt == "onnx":
        ops = {n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node}
        assert "MatMulNBits" not in ops and "BitShift" in ops
        got = ort_logits(out / "model.onnx", inputs)
    else:
        assert 'type="BitwiseRightShift"' in (out / "openvino_model.xml").read_text()
        _, got = ov_logits(out, inputs)
    want = hf_logits(quantized_reference(model, 4, 32), inputs)
    assert masked_max_abs_diff(got, want, inputs[1]) <= FP32_TOL


@pytest.mark.parametrize("args,mention", [
    (["--decompose", "Softmax"], "'Softmax' is not a high-level op"),
    (["--decompose", "Atention"], "--decompose"),
])
def test_bad_decompose_option(args, mention, tiny, tmp_path, run_hfexport):
    from conftest import assert_clean_error

    model_dir, _ = tiny(NAMES[0])
    out = tmp_path / "exports" / "out"
    assert_clean_error(run_hfexport("export", model_dir, "-o", out, *args), out, mention)
