"""Quantized weights (``--quantize int4|int8``): onnxruntime's MatMulNBits in the ``ort`` profile,
the reference dequantization (u8 codes -> float weights in ai.onnx ops) in the ``standard`` one.

Reference: transformers eager on a copy of the model whose Linear weights are replaced by their
dequantized values under the documented scheme (symmetric, per group of ``group_size`` input
features, scale = the group's signed value of largest magnitude / -2^(bits-1), levels =
clip(rint(w / scale), -2^(bits-1), 2^(bits-1) - 1)), implemented here in numpy
from that description. With ``--quantize-compute float`` onnxruntime multiplies by exactly those
weights, so logits must match within 1e-4 and greedy generation token for token; with the default
``int8`` compute the activations are quantized too, so logits are only close.

Also: the weights really are quantized (the reference moves away from the float model, the data
file shrinks), Linears whose input size the group size does not divide stay float and are listed
in export.json, and bad options are refused in one line.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from conftest import TINY_CONFIG, assert_clean_error, build_tiny_model
from tiny_configs import cases
from test_generation import compare, hf_generate, make_prompts, mode_args, run_ours
from test_onnx_parity import hf_logits, make_inputs, masked_max_abs_diff, ort_logits

TOL = 1e-4
NEW_TOKENS = 24
WEIGHT_STD = 0.2

CONFIGS = {c.name: (c.model_type, c.overrides) for c in cases("quantized")}


def dequantize(w: np.ndarray, bits: int, group: int, positive_bf16: bool = False) -> np.ndarray:
    """The documented scheme, applied to a float32 [N, K] matrix; `positive_bf16`: its variant for
    XNNPACK's blockwise 4-bit weights (a positive extreme m scaled by m / (2^(bits-1) - 1), an
    all-zero group by 1, scales rounded to bfloat16 first)."""
    n, k = w.shape
    g = w.reshape(n, k // group, group)
    zero = 2 ** (bits - 1)
    extreme = np.take_along_axis(g, np.abs(g).argmax(axis=-1)[..., None], axis=-1)  # first largest |w|
    scale = extreme / np.float32(-zero)
    if positive_bf16:
        scale = np.where(extreme > 0, extreme / np.float32(zero - 1), scale)
        scale = torch.from_numpy(np.ascontiguousarray(scale, dtype=np.float32)).to(torch.bfloat16).float().numpy()
        scale = np.where(extreme == 0, np.float32(1), np.maximum(scale, np.finfo(np.float32).tiny))
    with np.errstate(divide="ignore", invalid="ignore"):
        levels = np.where(scale == 0, 0, np.clip(np.rint(g / scale), -zero, zero - 1))
    return (levels * scale).astype(np.float32).reshape(n, k)


def int8_activation_bound(reference, inputs, want: np.ndarray) -> float:
    """The error bound of a backend that quantizes activations to int8 per token (XNNPACK's 8da
    linears): 5% of the logit scale, or 1.25x what transformers itself is off by with the same
    weights and its linears' inputs fake-quantized that way (asymmetric int8 per token), where
    the architecture amplifies that rounding (LFM2's gated convolutions multiply activations)."""
    def fake_quantize(_module, args):
        x = args[0]
        low, high = x.amin(-1, keepdim=True).clamp(max=0), x.amax(-1, keepdim=True).clamp(min=0)
        step = torch.where(high > low, (high - low) / 255, torch.ones_like(high))
        zero = torch.round(-128 - low / step)
        return ((torch.clamp(torch.round(x / step) + zero, -128, 127) - zero) * step,)

    model = copy.deepcopy(reference)
    head = model.get_output_embeddings()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module is not head:
            module.register_forward_pre_hook(fake_quantize)
    own_error = masked_max_abs_diff(hf_logits(model, inputs), want, inputs[1])
    return max(0.05 * float(np.abs(want).max()), 1.25 * own_error)


def quantized_reference(model, bits: int, group: int | None, positive_bf16: bool = False, experts_group: int = 32):
    """A copy of `model` whose nn.Linear weights (input size divisible by `group`) are dequantized,
    and GPT-2's Conv1D ones ([in, out]: quantized per group of inputs too). A tied embedding stays
    tied, so it reads the dequantized lm_head too (the export stores the table once, as the
    lm_head's codes); an untied one stays float. `group` None: per channel (each weight's group
    its whole input), MoE experts still in groups of `experts_group`."""
    if group is None:
        # Per-channel codes are read only by the linears: a tied embedding keeps the float table.
        ref = copy.deepcopy(model)
        table = ref.get_input_embeddings().weight.detach().clone()
        ref.get_input_embeddings().weight = torch.nn.Parameter(table)
        with torch.no_grad():
            for module in ref.modules():
                if isinstance(module, torch.nn.Linear):
                    w = module.weight.detach().float().numpy()
                    module.weight.copy_(torch.from_numpy(dequantize(w, bits, w.shape[1], positive_bf16)))
                elif isinstance(getattr(module, "gate_up_proj", None), torch.nn.Parameter) and module.gate_up_proj.dim() == 3:
                    dequantize_experts(module, bits, experts_group, positive_bf16)
        return ref.eval()
    from transformers.pytorch_utils import Conv1D

    ref = copy.deepcopy(model)
    with torch.no_grad():
        for module in ref.modules():
            if isinstance(module, torch.nn.Linear) and module.in_features % group == 0:
                w = module.weight.detach().float().numpy()
                module.weight.copy_(torch.from_numpy(dequantize(w, bits, group, positive_bf16)))
            elif isinstance(module, Conv1D) and module.weight.shape[0] % group == 0:
                w = module.weight.detach().float().numpy().T
                module.weight.copy_(torch.from_numpy(np.ascontiguousarray(dequantize(w, bits, group, positive_bf16).T)))
            elif type(module).__name__.endswith("Router") and module.weight.shape[1] % group == 0:
                # MoE routers hold their [E, H] weight directly (not an nn.Linear); the export's is a Linear
                w = module.weight.detach().float().numpy()
                module.weight.copy_(torch.from_numpy(dequantize(w, bits, group, positive_bf16)))
            elif isinstance(getattr(module, "gate_up_proj", None), torch.nn.Parameter) and module.gate_up_proj.dim() == 3:
                dequantize_experts(module, bits, group, positive_bf16)
    return ref.eval()


def dequantize_experts(experts, bits: int, group: int, positive_bf16: bool = False) -> None:
    """MoE experts' fused [E, out, in] weights (gpt-oss: [E, in, out]), per expert along the input."""
    transposed = experts.gate_up_proj.shape[1] == experts.down_proj.shape[2]  # gpt-oss: [E, H, 2I], [E, I, H]
    for p in (experts.gate_up_proj, experts.down_proj):
        w = p.detach().float().numpy()
        w = w.transpose(0, 2, 1) if transposed else w
        deq = np.stack([dequantize(e, bits, group, positive_bf16) for e in w])
        p.copy_(torch.from_numpy(np.ascontiguousarray(deq.transpose(0, 2, 1) if transposed else deq)))


def expected_quantized(model) -> int:
    """Linears the export quantizes: per layer q/k/v (packed) and o (or a hybrid mixer's in_proj and
    out_proj), then the MLP's gate/up (packed) and down, or a MoE's router and its two expert weights,
    or (GraniteMoeHybrid) both: a shared MLP beside the experts, or a shared expert (Qwen3-Next), or
    none (Mamba2); a Falcon-H1 layer has attention and a mixer side by side; plus the head."""
    layers = model.get_decoder().layers if hasattr(model.get_decoder(), "layers") else model.get_decoder().h
    moe = sum(any("experts" in name for name, _ in layer.named_modules()) for layer in layers)
    shared = sum(getattr(layer, "shared_mlp", None) is not None and getattr(layer, "block_sparse_moe", None) is not None
                 for layer in layers)
    # Mamba2 blocks have their mixer only, no feed-forward.
    mixer_only = sum(not any(hasattr(layer, n) for n in ("mlp", "feed_forward", "shared_mlp", "block_sparse_moe"))
                     for layer in layers)
    parallel = sum(getattr(layer, "mamba", None) is not None and getattr(layer, "self_attn", None) is not None
                   for layer in layers)
    # Qwen3-Next's shared expert: its gate/up and gate pack with the router; its down is one more.
    shared_expert = sum(getattr(getattr(layer, "mlp", None), "shared_expert", None) is not None for layer in layers)
    return 4 * len(layers) + moe + shared + shared_expert - 2 * mixer_only + 2 * parallel + 1


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    built = {}

    def get(name: str):
        if name not in built:
            model_type, overrides = CONFIGS[name]
            d = tmp_path_factory.mktemp(f"quant-{name}")
            built[name] = build_tiny_model(d / "hf", model_type, {**TINY_CONFIG, **overrides},
                                           weight_std=WEIGHT_STD)
        return built[name]

    return get


def quant_args(bits: int, group: int = 32, compute: str = "float", profile: str = "ort") -> list[str]:
    return ["--onnx-ops", profile, "--quantize", f"int{bits}", "--quantize-group-size", str(group),
            "--quantize-compute", compute]


# --------------------------------------------------------------------------------------------
# forward logits


@pytest.mark.parametrize("profile", ["ort", "standard"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_forward_matches_dequantized_transformers(name, bits, profile, tiny, tmp_path, export_model):
    model_dir, model = tiny(name)
    out = export_model(model_dir, tmp_path / "out", *quant_args(bits, profile=profile))
    if profile == "standard":  # ai.onnx ops only, like every standard export
        onnx.checker.check_model(str(out / "model.onnx"), full_check=True)
    inputs = make_inputs(model.config.vocab_size)
    ref = quantized_reference(model, bits, 32)
    want = hf_logits(ref, inputs)
    got = ort_logits(out / "model.onnx", inputs)
    err = masked_max_abs_diff(got, want, inputs[1])
    assert err <= TOL, f"{name} int{bits}: logits differ from the dequantized reference by {err:.3e}"
    # Not vacuous: quantization moved the reference away from the float model.
    moved = masked_max_abs_diff(hf_logits(model, inputs), want, inputs[1])
    assert moved > 1e-3, f"int{bits} quantization left the logits unchanged ({moved:.2e}): weights not quantized?"

    manifest = json.loads((out / "export.json").read_text())
    assert manifest["quantization"] == {
        "weights": f"int{bits}", "group_size": 32, "compute": "float",
        "scheme": "symmetric, per group of input features, round to nearest even",
    }
    # Every Linear is quantized: 2 layers x (packed q/k/v, o, packed gate/up, down) + lm_head.
    assert manifest["components"]["model"]["quantized_linears"] == {
        "quantized": expected_quantized(model), "kept_float": [],
        "embeddings": [embedding_name(model)] if is_tied(model) else []}


def is_tied(model) -> bool:
    return model.get_output_embeddings().weight is model.get_input_embeddings().weight


def embedding_name(model) -> str:
    """The token embedding's checkpoint name (model.embed_tokens.weight, transformer.wte.weight, ...)."""
    table = model.get_input_embeddings().weight
    return next(name for name, p in model.named_parameters() if p is table)


@pytest.mark.parametrize("profile", ["ort", "standard"])
def test_tied_embedding_is_stored_once_quantized(profile, tiny, tmp_path, export_model):
    """The tied table is the lm_head's codes: no float [vocab, hidden] initializer is left, the
    ort profile gathers it with GatherBlockQuantized, and the data file holds the codes once."""
    model_dir, model = tiny("qwen2-bias-tied")
    assert is_tied(model)
    out = export_model(model_dir, tmp_path / "out", *quant_args(4, profile=profile))
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    table = (model.config.vocab_size, model.config.hidden_size)
    assert not [t.name for t in graph.initializer if tuple(t.dims) in (table, table[::-1])], "a float table is left"
    ops = {n.op_type for n in graph.node}
    assert ("GatherBlockQuantized" in ops) == (profile == "ort"), ops
    # The codes carry the table's name (both nodes read them); every view of them is one span.
    codes = [t for t in graph.initializer if t.name.startswith("model.embed_tokens")
             and t.data_type == onnx.TensorProto.UINT8 and t.external_data]
    offsets = {(e["offset"], e["length"]) for t in codes for e in [{x.key: x.value for x in t.external_data}]}
    assert codes and len(offsets) == 1, f"tied codes stored {len(offsets)} times: {offsets}"
    report = json.loads((out / "export.json").read_text())["components"]["model"]["quantized_linears"]
    assert report["embeddings"] == ["model.embed_tokens.weight"]
    # An untied table stays float (it is only gathered).
    model_dir, model = tiny("llama-gqa-rope_default")
    out = export_model(model_dir, tmp_path / "untied", *quant_args(4, profile=profile))
    report = json.loads((out / "export.json").read_text())["components"]["model"]["quantized_linears"]
    assert not is_tied(model) and report["embeddings"] == []


def test_int4_data_is_smaller_than_float(tiny, tmp_path, export_model):
    model_dir, _ = tiny("llama-gqa-rope_default")
    plain = export_model(model_dir, tmp_path / "f32", "--onnx-ops", "ort")
    q4 = export_model(model_dir, tmp_path / "q4", *quant_args(4))
    size = lambda d: (d / "model.onnx.data").stat().st_size  # noqa: E731
    # Only the float embedding table (vocab x hidden) and norms stay: well under half.
    assert size(q4) < 0.5 * size(plain), (size(q4), size(plain))


def test_group_size_that_does_not_divide_keeps_float(tiny, tmp_path, export_model):
    """hidden 64 is a multiple of 64, intermediate 96 is not: down_proj stays float."""
    model_dir, model = tiny("llama-gqa-rope_default")
    out = export_model(model_dir, tmp_path / "out", *quant_args(4, group=64))
    report = json.loads((out / "export.json").read_text())["components"]["model"]["quantized_linears"]
    assert report["quantized"] == 2 * 3 + 1
    assert report["kept_float"] == [f"model.layers.{i}.mlp.down_proj.weight" for i in range(2)]
    inputs = make_inputs(model.config.vocab_size)
    want = hf_logits(quantized_reference(model, 4, 64), inputs)
    err = masked_max_abs_diff(ort_logits(out / "model.onnx", inputs), want, inputs[1])
    assert err <= TOL, err


@pytest.mark.parametrize("profile", ["ort", "standard"])
def test_float16_with_quantized_weights(profile, tiny, tmp_path, export_model):
    """Scales and activations in float16: within float16 rounding of the float32 dequantized
    reference (1 % of the logit scale; these weights are wider than the float16 suite's)."""
    model_dir, model = tiny("llama-gqa-rope_default")
    out = export_model(model_dir, tmp_path / "out", "--dtype", "float16", *quant_args(4, profile=profile))
    inputs = make_inputs(model.config.vocab_size)
    want = hf_logits(quantized_reference(model, 4, 32), inputs)
    err = masked_max_abs_diff(ort_logits(out / "model.onnx", inputs), want, inputs[1])
    scale = float(np.abs(want).max())
    assert err <= 1e-2 * scale, f"float16 int4 ({profile}): {err:.3e} vs logit scale {scale:.2f}"


def test_compute_defaults_to_the_profiles_fastest(tiny, tmp_path, export_model):
    model_dir, _ = tiny("llama-gqa-rope_default")
    for profile, compute in (("ort", "int8"), ("standard", "float")):
        out = export_model(model_dir, tmp_path / profile, "--onnx-ops", profile, "--quantize", "int4")
        assert json.loads((out / "export.json").read_text())["quantization"]["compute"] == compute, profile


def test_int8_compute_is_close(tiny, tmp_path, export_model):
    """The default compute quantizes activations to int8 inside MatMulNBits: close, not exact."""
    model_dir, model = tiny("qwen3-qk_norm")
    for bits in (4, 8):
        out = export_model(model_dir, tmp_path / f"q{bits}", *quant_args(bits, compute="int8"))
        assert json.loads((out / "export.json").read_text())["quantization"]["compute"] == "int8"
        inputs = make_inputs(model.config.vocab_size)
        want = hf_logits(quantized_reference(model, bits, 32), inputs)
        got = ort_logits(out / "model.onnx", inputs)
        scale = float(np.abs(want).max())
        err = masked_max_abs_diff(got, want, inputs[1])
        assert err <= 0.05 * scale, f"int{bits} with int8 compute: {err:.3e} vs logit scale {scale:.2f}"


# --------------------------------------------------------------------------------------------
# generation


@pytest.mark.parametrize("mode", ["dynamic", "multi-token", "static"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_greedy_matches_dequantized_transformers(name, mode, tiny, tmp_path, export_model):
    model_dir, model = tiny(name)
    args = [a for a in mode_args(mode, batch=2) if a not in ("--onnx-ops", "standard")]
    out = export_model(model_dir, tmp_path / "out", *args, *quant_args(4))
    ref_model = quantized_reference(model, 4, 32)
    ids, mask = make_prompts(model.config.vocab_size, (9, 5))
    want = hf_generate(ref_model, ids, mask, NEW_TOKENS)
    tokens, logits, _ = run_ours(out, ids, mask, NEW_TOKENS)
    compare(tokens, logits, want, f"{name} {mode} int4")


# --------------------------------------------------------------------------------------------
# OpenVINO: u4/u8 constants in the decompression pattern


def ov_compile(xml: Path):
    import openvino as ov

    return ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_openvino_forward_matches_dequantized_transformers(name, bits, tiny, tmp_path, export_model):
    model_dir, model = tiny(name)
    out = export_model(model_dir, tmp_path / "out", "--format", "openvino", "--quantize", f"int{bits}")
    assert json.loads((out / "export.json").read_text())["quantization"]["compute"] == "float"
    compiled = ov_compile(out / "openvino_model.xml")
    inputs = make_inputs(model.config.vocab_size)
    names = [i.get_any_name() for i in compiled.inputs]
    got = compiled(dict(zip(names, inputs)))[compiled.output("logits")]
    want = hf_logits(quantized_reference(model, bits, 32), inputs)
    err = masked_max_abs_diff(got, want, inputs[1])
    assert err <= TOL, f"{name} int{bits}: OpenVINO logits differ from the dequantized reference by {err:.3e}"
    # The weights stay compressed in the compiled model: no float constant holds a Linear weight.
    code_type = "u4" if bits == 4 else "u8"
    compressed = [op for op in compiled.get_runtime_model().get_ordered_ops()
                  if any(i.get_element_type().get_type_name() == code_type for i in op.inputs())]
    assert compressed, f"no op of the compiled model reads {code_type} weights (decompressed at compile time?)"


@pytest.mark.parametrize("name", list(CONFIGS))
def test_openvino_greedy_matches_dequantized_transformers(name, tiny, tmp_path, export_model):
    model_dir, model = tiny(name)
    out = export_model(model_dir, tmp_path / "out", "--format", "openvino", "--for-generation", "--quantize", "int4")
    ids, mask = make_prompts(model.config.vocab_size, (9, 5))
    want = hf_generate(quantized_reference(model, 4, 32), ids, mask, NEW_TOKENS)
    tokens, logits, _ = run_ours(out, ids, mask, NEW_TOKENS)
    compare(tokens, logits, want, "openvino int4")


# --------------------------------------------------------------------------------------------
# .pt2: uint8 codes dequantized in the program, then a float matmul


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_pt2_forward_matches_dequantized_transformers(name, bits, tiny, tmp_path, export_model):
    from test_pt2_parity import load_program, pt2_logits

    model_dir, model = tiny(name)
    out = export_model(model_dir, tmp_path / "out", "--format", "pt2", "--quantize", f"int{bits}")
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["quantization"]["compute"] == "float"
    program = load_program(out / "model.pt2")
    # The weights are stored as their codes: no float32 parameter holds a quantized Linear's weight.
    codes = [t for t in program.state_dict.values() if t.dtype == torch.uint8]
    assert len(codes) == manifest["components"]["model"]["quantized_linears"]["quantized"]
    inputs = make_inputs(model.config.vocab_size)
    err = masked_max_abs_diff(pt2_logits(program, inputs), hf_logits(quantized_reference(model, bits, 32), inputs),
                              inputs[1])
    assert err <= TOL, f"{name} int{bits}: .pt2 logits differ from the dequantized reference by {err:.3e}"


@pytest.mark.parametrize("name", list(CONFIGS))
def test_pt2_greedy_matches_dequantized_transformers(name, tiny, tmp_path, export_model):
    model_dir, model = tiny(name)
    out = export_model(model_dir, tmp_path / "out", "--format", "pt2", "--for-generation", "--quantize", "int4")
    ids, mask = make_prompts(model.config.vocab_size, (9, 5))
    want = hf_generate(quantized_reference(model, 4, 32), ids, mask, NEW_TOKENS)
    tokens, logits, _ = run_ours(out, ids, mask, NEW_TOKENS)
    compare(tokens, logits, want, "pt2 int4")


# --------------------------------------------------------------------------------------------
# .pte: the portable backend dequantizes uint8 codes (constant segment) before a float linear;
# the xnnpack backend runs 4-bit linears as XNNPACK's blockwise 4-bit weights with per-token
# int8 activations (ExecuTorch's 8da4w) and dequantizes 8-bit ones


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_executorch_forward_matches_dequantized_transformers(name, bits, tiny, tmp_path, export_model):
    pytest.importorskip("executorch")
    from test_executorch_parity import DIMS, et_logits, load_program

    model_dir, model = tiny(name)
    out = export_model(model_dir, tmp_path / "out", "--format", "executorch", "--executorch-backend", "portable",
                       *DIMS, "--quantize", f"int{bits}")
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["quantization"]["compute"] == "float"
    inputs = make_inputs(model.config.vocab_size)
    err = masked_max_abs_diff(et_logits(load_program(out / "model.pte"), inputs),
                              hf_logits(quantized_reference(model, bits, 32), inputs), inputs[1])
    assert err <= TOL, f"{name} int{bits}: .pte logits differ from the dequantized reference by {err:.3e}"


# Int8 activations can flip a mixture-of-experts router's top-k for a token, which moves its logits
# by more than the activation rounding: the closeness bound is for dense models.
DENSE = [n for n, (model_type, _) in CONFIGS.items() if model_type not in ("mixtral", "qwen3_moe", "gpt_oss")]


@pytest.mark.parametrize("kernels", ["stock", "hfexport"])
@pytest.mark.parametrize("name", DENSE)
def test_executorch_xnnpack_8da4w(name, kernels, tiny, tmp_path, export_model):
    """XNNPACK's 4-bit linears, as ExecuTorch's 8da4w: codes stored as they are, positive bf16
    scales (XNNPACK refuses others), activations quantized to int8 per token inside the delegate.
    Against transformers with the same dequantized weights: close, as onnxruntime's int8 compute.
    With --executorch-kernels hfexport, attention is hfexport::sdpa.out between the delegates."""
    pytest.importorskip("executorch")
    import hfexport.executorch_runner as er
    from test_executorch_parity import DIMS, et_logits, load_program

    assert kernels == "stock" or er.load_hfexport_kernels()
    model_dir, model = tiny(name)
    out = export_model(model_dir, tmp_path / "out", "--format", "executorch", *DIMS, "--quantize", "int4",
                       "--executorch-kernels", kernels)
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["quantization"]["compute"] == "int8"
    assert (out / "model.pte").read_bytes().count(b"XH00") > 0  # MoE experts stay dequantized matmuls
    inputs = make_inputs(model.config.vocab_size)
    reference = quantized_reference(model, 4, 32, positive_bf16=True)
    want = hf_logits(reference, inputs)
    err = masked_max_abs_diff(et_logits(load_program(out / "model.pte"), inputs), want, inputs[1])
    bound = int8_activation_bound(reference, inputs, want)
    assert err <= bound, f"{name} 8da4w: {err:.3e} vs bound {bound:.3e}"


@pytest.mark.parametrize("name", DENSE)
def test_executorch_xnnpack_8da8w(name, tiny, tmp_path, export_model):
    """XNNPACK's 8-bit linears: per-channel int8 weights (signed codes, one positive scale per
    output channel, qcint8), activations quantized to int8 per token inside the delegate. Against
    transformers with the same dequantized weights: close, as onnxruntime's int8 compute."""
    pytest.importorskip("executorch")
    from test_executorch_parity import DIMS, et_logits, load_program

    model_dir, model = tiny(name)
    out = export_model(model_dir, tmp_path / "out", "--format", "executorch", *DIMS, "--quantize", "int8")
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["quantization"]["compute"] == "int8"
    assert (out / "model.pte").read_bytes().count(b"XH00") > 0
    inputs = make_inputs(model.config.vocab_size)
    reference = quantized_reference(model, 8, None, positive_bf16=True)
    want = hf_logits(reference, inputs)
    err = masked_max_abs_diff(et_logits(load_program(out / "model.pte"), inputs), want, inputs[1])
    bound = int8_activation_bound(reference, inputs, want)
    assert err <= bound, f"{name} 8da8w: {err:.3e} vs bound {bound:.3e}"


# --------------------------------------------------------------------------------------------
# bad options


@pytest.mark.parametrize(
    "args, mentions",
    [
        (["--onnx-ops", "ort", "--quantize", "int3"], ["--quantize", "int3"]),
        (["--onnx-ops", "ort", "--quantize", "int4", "--quantize-group-size", "24"], ["--quantize-group-size", "24"]),
        (["--onnx-ops", "ort", "--quantize", "int4", "--quantize-group-size", "8"], ["--quantize-group-size"]),
        (["--onnx-ops", "ort", "--quantize", "int4", "--quantize-compute", "int4"], ["--quantize-compute"]),
        (["--onnx-ops", "ort", "--quantize-group-size", "64"], ["--quantize"]),
        (["--onnx-ops", "ort", "--quantize-compute", "float"], ["--quantize"]),
        (["--onnx-ops", "standard", "--quantize", "int4", "--quantize-compute", "int8"],
         ["--quantize-compute int8", "--onnx-ops ort"]),
        (["--format", "openvino", "--quantize", "int4", "--quantize-compute", "int8"], ["--quantize-compute int8"]),
        (["--format", "openvino", "--quantize", "int5"], ["--quantize", "int5"]),
    ],
)
def test_bad_quantize_options(args, mentions, tiny, tmp_path, run_hfexport):
    model_dir, _ = tiny("llama-gqa-rope_default")
    out = tmp_path / "out"
    proc = run_hfexport("export", model_dir, "-o", out, *args)
    assert_clean_error(proc, out, *mentions)
