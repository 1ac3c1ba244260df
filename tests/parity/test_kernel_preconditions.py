"""Every fused kernel an export picks has preconditions in the runtime that runs it (head size,
rotary width, group size vs the input features, kv-head ratio, ...). An export checks them from
the config and falls back where one fails; it never writes a graph its runtime refuses.

This sweeps shapes that break the usual assumptions (head sizes that are not multiples of 8 or 16,
odd and extreme kv-head ratios, MQA, a single layer with a single head, sizes the quantization
group does not divide) over every backend's and profile's generation path: each export is loaded
and run by its runtime through the decode loop, and its greedy tokens and step logits are
transformers' (float) or transformers' with the same dequantized weights (int4, float compute).
XNNPACK's 8da4w quantizes activations too: its first-step logits are held within 5 % of the scale.
Then the fallbacks the exports record in export.json, and the ONNX default for every family at
head size 12 (onnxruntime's GroupQueryAttention needs a multiple of 8)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TINY_CONFIG, build_tiny_model
from test_generation import compare, hf_generate, make_prompts, run_ours
from test_quantized import quantized_reference
from tiny_configs import ARCHITECTURES, cases

NEW_TOKENS = 8
MAX_CACHE_LEN = 32
BATCH = (9, 5)  # left-padded
SINGLE = (7,)  # ExecuTorch's loop is batch 1

# name -> overrides of the llama config: each breaks one assumption of a fused path.
SHAPES = {
    "head12": dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=2),  # GQA: % 8
    "head20-mqa": dict(hidden_size=80, num_attention_heads=4, num_key_value_heads=1),
    "head8-ratio3": dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2),  # do_rotary: % 16
    "head24-ratio5": dict(hidden_size=120, num_attention_heads=5, num_key_value_heads=1, intermediate_size=64),
    "one-layer-one-head": dict(hidden_size=32, num_attention_heads=1, num_key_value_heads=1, num_hidden_layers=1),
    # the int4 group (32) divides neither the hidden size nor the MLP's: every Linear stays float
    "hidden40-vocab157": dict(hidden_size=40, num_attention_heads=4, num_key_value_heads=2, intermediate_size=72,
                              vocab_size=157),
    # the group divides the hidden size but not the MLP's (down_proj stays float)
    "inter80-vocab157": dict(intermediate_size=80, vocab_size=157),
}

GEN = ["--for-generation"]
STATIC = ["--for-generation", "--static-cache", "--max-cache-len", str(MAX_CACHE_LEN)]
INT4 = ["--quantize", "int4", "--quantize-compute", "float"]
# name -> (export args, prompt lengths, weights: "float" | "int4" | "8da4w")
PATHS = {
    "onnx-default": (GEN, BATCH, "float"),
    "onnx-ort": (GEN + ["--onnx-ops", "ort"], BATCH, "float"),
    "onnx-standard": (GEN + ["--onnx-ops", "standard", "--multi-token-decode"], BATCH, "float"),
    "onnx-static": (STATIC + ["--batch-size", "2"], BATCH, "float"),
    "onnx-default-int4": (GEN + INT4, BATCH, "int4"),
    "onnx-ort-int4": (GEN + ["--onnx-ops", "ort"] + INT4, BATCH, "int4"),
    "openvino": (["--format", "openvino"] + GEN, BATCH, "float"),
    "openvino-int4": (["--format", "openvino", "--quantize", "int4"] + GEN, BATCH, "int4"),
    "pt2": (["--format", "pt2"] + GEN, BATCH, "float"),
    "executorch": (["--format", "executorch"] + STATIC, SINGLE, "float"),
    "executorch-hfexport-kernels": (["--format", "executorch", "--executorch-kernels", "hfexport"] + STATIC, SINGLE,
                                    "float"),
    "executorch-dynamic": (["--format", "executorch"] + GEN, SINGLE, "float"),
    "executorch-8da4w": (["--format", "executorch", "--quantize", "int4"] + STATIC, SINGLE, "8da4w"),
}


@pytest.fixture(scope="module")
def shape_model(tmp_path_factory):
    built = {}

    def get(shape: str):
        if shape not in built:
            d = tmp_path_factory.mktemp(f"shape-{shape}")
            built[shape] = build_tiny_model(d / "hf", "llama", {**TINY_CONFIG, **SHAPES[shape]}, weight_std=0.2)
        return built[shape]

    return get


def needs_runtime(args: list[str]) -> None:
    fmt = args[args.index("--format") + 1] if "--format" in args else "onnx"
    pytest.importorskip({"onnx": "onnxruntime", "openvino": "openvino", "pt2": "torch", "executorch": "executorch"}[fmt])
    if "hfexport" in args:
        import hfexport.executorch_runner as er

        assert er.load_hfexport_kernels(), "hfexport's ExecuTorch kernel library was not built"


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_fused_path_runs_every_shape(shape, path, shape_model, tmp_path, export_model):
    args, lengths, weights = PATHS[path]
    needs_runtime(args)
    model_dir, model = shape_model(shape)
    out = export_model(model_dir, tmp_path / "out", *args)
    ids, mask = make_prompts(model.config.vocab_size, lengths)
    tokens, logits, _ = run_ours(out, ids, mask, NEW_TOKENS)
    what = f"{shape} {path}"
    if weights == "8da4w":
        want = hf_generate(quantized_reference(model, 4, 32, positive_bf16=True), ids, mask, NEW_TOKENS)
        assert tokens.shape == want.tokens.shape and ((tokens >= 0) & (tokens < model.config.vocab_size)).all()
        scale = float(np.abs(want.logits[0]).max())
        err = float(np.abs(logits[0] - want.logits[0]).max())
        assert err <= 0.05 * scale, f"{what}: first-step logits {err:.3e} vs scale {scale:.2f}"
        return
    reference = quantized_reference(model, 4, 32) if weights == "int4" else model
    compare(tokens, logits, hf_generate(reference, ids, mask, NEW_TOKENS), what)


def fallbacks(out) -> dict:
    manifest = json.loads((out / "export.json").read_text())
    return {f["kernel"]: f for c in manifest["components"].values() for f in c.get("kernel_fallbacks", [])}


@pytest.mark.parametrize("shape, recorded, shares_buffer", [
    ("head12", {"GroupQueryAttention"}, False),
    ("head20-mqa", {"GroupQueryAttention"}, False),
    ("head8-ratio3", {"GroupQueryAttention do_rotary"}, True),
    ("inter80-vocab157", set(), True),
])
def test_onnx_default_records_its_fallbacks(shape, recorded, shares_buffer, shape_model, tmp_path, export_model):
    """What the default ONNX generation export could not use, why, and what it wrote instead; the
    manifest's cache contract follows (a shared buffer only when GroupQueryAttention owns it)."""
    model_dir, _ = shape_model(shape)
    out = export_model(model_dir, tmp_path / "out", "--for-generation")
    got = fallbacks(out)
    assert set(got) == recorded, got
    for f in got.values():
        assert "multiple of" in f["reason"] and f["instead"], f
    generation = json.loads((out / "export.json").read_text())["generation"]
    assert bool(generation.get("past_present_share_buffer")) is shares_buffer
    ops = {n.op_type for n in __import__("onnx").load(str(out / "decode.onnx"), load_external_data=False).graph.node}
    assert ("GroupQueryAttention" in ops) is shares_buffer
    assert ("RotaryEmbedding" in ops) is ("GroupQueryAttention do_rotary" in recorded or not shares_buffer)


@pytest.mark.parametrize("extra", [STATIC, GEN + ["--decompose", "Attention"]], ids=["static", "decomposed"])
def test_no_fallback_recorded_where_gqa_was_never_a_candidate(extra, shape_model, tmp_path, export_model):
    """A static cache's attention (over the scattered buffer) and a decomposed one never become
    GroupQueryAttention under ort-gqa: nothing fell back, nothing is recorded."""
    model_dir, _ = shape_model("head12")
    out = export_model(model_dir, tmp_path / "out", *extra, "--onnx-ops", "ort-gqa")
    assert fallbacks(out) == {}


# The first generation case of each family, at head size 12 (where the family's config allows it).
def _head12(model_type: str, overrides: dict) -> dict:
    out = {**overrides, "hidden_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2}
    if "head_dim" in overrides:
        out["head_dim"] = 12
    if model_type == "gpt_oss":
        out["head_dim"] = 12
    for partial in ("rotary_pct", "partial_rotary_factor"):  # a whole, even number of rotated dims
        # (Qwen3-Next's and Qwen3.5-MoE's default factor, 0.25, would rotate 3 of 12 dims.)
        defaults_to_quarter = model_type in ("qwen3_next", "qwen3_5_moe_text")
        if partial in overrides or (partial == "rotary_pct" and model_type == "gpt_neox") or \
                (partial == "partial_rotary_factor" and defaults_to_quarter):
            out[partial] = 0.5
    return out


FAMILIES = {}
for _case in cases("generation"):
    FAMILIES.setdefault(_case.model_type, _case.overrides)
assert set(FAMILIES) == set(ARCHITECTURES), "every family has a generation case"


@pytest.mark.parametrize("model_type", [t for t in FAMILIES if t != "mamba2"])  # mamba2: no attention
def test_onnx_default_generation_at_head_size_12_for_every_family(model_type, tmp_path, export_model):
    """The reported crash: the default export of a head size the GQA kernel refuses exported
    silently and died at the first generate. Every family now falls back and generates
    transformers' tokens."""
    model_dir, model = build_tiny_model(tmp_path / "hf", model_type, {**TINY_CONFIG, **_head12(model_type, FAMILIES[model_type])},
                                        weight_std=0.2)
    head = getattr(model.config, "head_dim", None) or model.config.hidden_size // model.config.num_attention_heads
    assert head == 12, head
    out = export_model(model_dir, tmp_path / "out", "--for-generation")
    assert "GroupQueryAttention" in fallbacks(out)
    ids, mask = make_prompts(model.config.vocab_size, BATCH)
    tokens, logits, _ = run_ours(out, ids, mask, NEW_TOKENS)
    compare(tokens, logits, hf_generate(model, ids, mask, NEW_TOKENS), f"{model_type} head 12")


@pytest.mark.parametrize("name, fused", [("mixtral-gqa-experts4-top2", True),
                                         ("lfm2_moe-conv3-experts4-top2-expert_bias-dense1", False)])
def test_fused_moe_only_where_it_routes_as_the_model(name, fused, tmp_path, export_model):
    """onnxruntime's MoE and OpenVINO's fused MoE block route by softmax: LFM2-MoE's sigmoid scores,
    chosen with expert_bias and renormalised with an epsilon, are decomposed there instead, and
    both exports still match transformers."""
    import onnx
    from test_onnx_parity import FP32_TOL, hf_logits, make_inputs, masked_max_abs_diff, ort_logits
    from test_reference_decompositions import ov_logits
    from tiny_configs import case

    c = case(name)
    model_dir, model = build_tiny_model(tmp_path / "hf", c.model_type, c.config)
    inputs = make_inputs(model.config.vocab_size)
    want = hf_logits(model, inputs)
    out = export_model(model_dir, tmp_path / "onnx", "--onnx-ops", "ort")
    ops = {n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node}
    assert ("MoE" in ops) is fused, ops
    assert masked_max_abs_diff(ort_logits(out / "model.onnx", inputs), want, inputs[1]) <= FP32_TOL
    out = export_model(model_dir, tmp_path / "openvino", "--format", "openvino")
    assert ('type="Tile"' in (out / "openvino_model.xml").read_text()) is fused  # the fused block tiles the tokens
    assert masked_max_abs_diff(ov_logits(out, inputs)[1], want, inputs[1]) <= FP32_TOL
