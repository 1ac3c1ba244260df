"""Parity: tiny random HF models exported to ONNX, run in onnxruntime (CPU), against transformers eager.

Every case: export with the CLI, ``onnx.checker.check_model(full_check=True)``, check export.json,
then compare logits for a left-padded batch of three prompts (lengths 12, 9, 5) at the
non-padded positions, with ``position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)`` fed to
both sides.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import TINY_CONFIG
from tiny_configs import ARCHITECTURES, LLAMA3, YARN, case, cases, rope
import torch
from transformers import AutoConfig, AutoModelForCausalLM

FP32_TOL = 1e-4
PROFILES = ("standard", "ort", "ort-gqa")  # --onnx-ops
FP16_TOL = 2e-2
PROMPT_LENGTHS = (12, 9, 5)

BASE = dict(TINY_CONFIG)
CASES = [(c.model_type, c.variant, c.overrides) for c in cases("forward")]


# --------------------------------------------------------------------------------------------
# helpers


def make_inputs(vocab: int, lengths=PROMPT_LENGTHS, seed: int = 1234):
    """Left-padded batch: returns int64 numpy arrays input_ids, attention_mask, position_ids."""
    rng = np.random.default_rng(seed)
    seq = max(lengths)
    input_ids = np.zeros((len(lengths), seq), dtype=np.int64)
    attention_mask = np.zeros((len(lengths), seq), dtype=np.int64)
    for row, n in enumerate(lengths):
        input_ids[row, seq - n :] = rng.integers(1, vocab, size=n)
        attention_mask[row, seq - n :] = 1
    position_ids = np.clip(attention_mask.cumsum(-1) - 1, 0, None).astype(np.int64)
    return input_ids, attention_mask, position_ids


def hf_logits(model, inputs) -> np.ndarray:
    input_ids, attention_mask, position_ids = (torch.from_numpy(a) for a in inputs)
    with torch.no_grad():
        # The first eager forward of a model in a pytest process now and then differs at
        # left-padded rows (1.3e-4, ~1 run in 8, torch 2.13 / transformers 5.24; every later
        # call agrees with the others and with every runtime): the reference is the second call.
        model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    return out.logits.float().numpy()


def ort_logits(onnx_path: Path, inputs) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    feed_all = dict(zip(("input_ids", "attention_mask", "position_ids"), inputs))
    missing = set(names) - set(feed_all)
    assert not missing, f"ONNX model wants inputs we do not know: {sorted(missing)}"
    (logits,) = sess.run(["logits"], {n: feed_all[n] for n in names})
    return logits


def masked_max_abs_diff(a: np.ndarray, b: np.ndarray, attention_mask: np.ndarray) -> float:
    assert a.shape == b.shape, f"logits shape {a.shape} != reference {b.shape}"
    keep = attention_mask.astype(bool)
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))[keep]
    if not np.all(np.isfinite(diff)):
        return float("nan")
    return float(diff.max())


def check_manifest(out_dir: Path, *, model_type: str, vocab: int, dtype: str, source_dtype: str) -> dict:
    manifest = json.loads((out_dir / "export.json").read_text())
    assert manifest["schema_version"] == 1
    assert isinstance(manifest["producer"], str) and manifest["producer"].startswith("hfexport")
    assert manifest["format"] == "onnx"
    assert manifest["dtype"] == dtype
    src = manifest["source"]
    assert src["model_type"] == model_type
    assert src["architectures"] == [ARCHITECTURES[model_type]]
    assert src["dtype"] == source_dtype

    comp = manifest["components"]["model"]
    assert comp["file"] == "model.onnx"
    assert (out_dir / comp["file"]).is_file()
    assert isinstance(comp["data_files"], list)
    for f in comp["data_files"]:
        assert (out_dir / f).is_file(), f"data file {f} listed in export.json but missing"
    assert "model.onnx.data" in comp["data_files"]
    assert comp["inputs"] == [
        {"name": n, "dtype": "int64", "shape": ["batch", "sequence"]}
        for n in ("input_ids", "attention_mask", "position_ids")
    ]
    assert comp["outputs"] == [{"name": "logits", "dtype": "float32", "shape": ["batch", "sequence", vocab]}]

    for dim in ("batch", "sequence"):
        d = manifest["dims"][dim]
        assert isinstance(d["min"], int) and isinstance(d["max"], int)
        assert 1 <= d["min"] <= d["max"], f"dims.{dim} = {d}"

    assert (out_dir / "config.json").is_file()
    assert (out_dir / "generation_config.json").is_file()
    return manifest


def check_onnx_graph(onnx_path: Path, profile: str = "standard", attends: bool = True) -> None:
    """`attends`: the model has attention layers (a pure state-space model has none)."""
    m = onnx.load(str(onnx_path), load_external_data=False)
    domains = {o.domain for o in m.opset_import}
    if profile == "standard":  # ai.onnx only: the checker knows every op
        onnx.checker.check_model(str(onnx_path), full_check=True)
        assert domains <= {"", "ai.onnx"}, domains
    else:  # onnxruntime contrib ops, which the checker does not know
        assert "com.microsoft" in domains, domains
        ops = {n.op_type for n in m.graph.node}
        assert ops & {"SkipSimplifiedLayerNormalization", "SkipLayerNormalization"}, ops
        # GroupQueryAttention only where asked for: on CPU opset-23 Attention is faster (measured).
        assert ("GroupQueryAttention" in ops) == (profile == "ort-gqa" and attends), ops
    assert [i.name for i in m.graph.input] == ["input_ids", "attention_mask", "position_ids"]
    assert [o.name for o in m.graph.output] == ["logits"]
    assert m.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def verify_export(
    *,
    support_matrix,
    export_model,
    model_type: str,
    variant: str,
    model_dir: Path,
    ref_model,
    out_dir: Path,
    extra_args=(),
    dtype: str = "float32",
    source_dtype: str = "float32",
    tol: float = FP32_TOL,
    profile: str = "standard",
) -> float:
    """Exports, checks, compares; records the outcome in the support matrix; returns max abs diff."""
    diff = None
    try:
        export_model(model_dir, out_dir, *extra_args, "--onnx-ops", profile)
        onnx_path = out_dir / "model.onnx"
        check_onnx_graph(onnx_path, profile, attends=model_type != "mamba2")
        vocab = ref_model.config.vocab_size
        check_manifest(out_dir, model_type=model_type, vocab=vocab, dtype=dtype, source_dtype=source_dtype)
        inputs = make_inputs(vocab)
        got = ort_logits(onnx_path, inputs)
        want = hf_logits(ref_model, inputs)
        diff = masked_max_abs_diff(got, want, inputs[1])
        assert diff <= tol, (
            f"{model_type}/{variant}: max abs diff {diff:.3e} > {tol:.0e} at non-padded positions"
            + per_row_report(got, want, inputs[1])
        )
    except Exception as e:  # noqa: BLE001 - record, then re-raise for pytest
        if hasattr(e, "proc"):  # conftest.ExportFailed: the CLI exited non-zero
            support_matrix.record(model_type, variant, False, None, "export failed: " + e.proc.stderr.strip())
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        support_matrix.record(model_type, variant, False, diff, f"{type(e).__name__}: {first}")
        raise
    support_matrix.record(model_type, variant, True, diff)
    return diff


def per_row_report(got, want, attention_mask) -> str:
    lines = []
    for row in range(got.shape[0]):
        keep = attention_mask[row].astype(bool)
        d = np.abs(got[row][keep] - want[row][keep]).max(axis=-1)
        lines.append(f"  row {row} (len {int(keep.sum())}): per-position max diff {np.array2string(d, precision=2)}")
    return "\n" + "\n".join(lines)


# --------------------------------------------------------------------------------------------
# tests


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize(
    "model_type,variant,overrides", CASES, ids=[f"{m}-{v}" for m, v, _ in CASES]
)
def test_parity_fp32(model_type, variant, overrides, profile, tmp_path, make_tiny_model, export_model,
                     support_matrix):
    config = {**BASE, **overrides}
    model_dir, model = make_tiny_model(tmp_path / "hf", model_type, config)
    verify_export(
        support_matrix=support_matrix,
        export_model=export_model,
        model_type=model_type,
        variant=variant if profile == "standard" else f"{variant} [{profile} ops]",
        model_dir=model_dir,
        ref_model=model,
        profile=profile,
        out_dir=tmp_path / "out",
    )


# The recurrences with an onnxruntime kernel: the gated delta rule (Qwen3.5, Qwen3-Next) and Mamba2's
# SSD; every one of these families' convolutions is its CausalConvWithState (LFM2's alone).
FUSED_RECURRENCES = [("qwen3_5_text-gqa-khead2-vhead4-conv4-rope_half", "LinearAttention"),
                     ("qwen3_next-moe4-top2-shared-khead2-vhead4", "LinearAttention"),
                     ("mamba2-heads8-groups2-state16-conv4", "GatedDeltaNet"),
                     ("granitemoehybrid-dense-nope-conv3-projbias-dt_limit", "GatedDeltaNet"),
                     ("falcon_h1-d_ssm96-groups2-rmsnorm-mup", "GatedDeltaNet"),
                     ("lfm2-conv3-gqa-layer_types", None),
                     ("lfm2-conv4-bias-mha-full_attn_idxs-untied", None)]


@pytest.mark.parametrize("profile", ["standard", "ort", "ort-gqa"])
@pytest.mark.parametrize("name, fused", FUSED_RECURRENCES, ids=[n for n, _ in FUSED_RECURRENCES])
def test_recurrences_and_convolutions_are_onnxruntimes_kernels_where_contrib_ops_are_allowed(
        name, fused, profile, tmp_path, make_tiny_model, export_model):
    """Under the ort profiles the gated delta rule is onnxruntime's com.microsoft LinearAttention
    (gated_delta), Mamba2's SSD its GatedDeltaNet (gated, groups as its query / key heads) and each
    causal convolution with its state its CausalConvWithState: one node per layer, the recurrences
    linear in a call's length (the reference decompositions' one-chunk forms are not). The standard
    profile keeps the decompositions. Both give transformers' logits on a left-padded batch."""
    c = case(name)
    model_dir, model = make_tiny_model(tmp_path / "hf", c.model_type, c.config)
    out = export_model(model_dir, tmp_path / "out", "--onnx-ops", profile)
    ops = [n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node]
    fused_count = (lambda n: 0) if profile == "standard" else (lambda n: n)
    convolutions = sum(1 for m in model.modules() if isinstance(m, torch.nn.Conv1d))
    assert convolutions and ops.count("CausalConvWithState") == fused_count(convolutions)
    if fused:
        recurrent_layers = sum(1 for m in model.modules() if hasattr(m, "A_log"))  # every DeltaNet and Mamba2 mixer
        assert recurrent_layers and ops.count(fused) == fused_count(recurrent_layers)
    inputs = make_inputs(model.config.vocab_size)
    err = masked_max_abs_diff(ort_logits(out / "model.onnx", inputs), hf_logits(model, inputs), inputs[1])
    assert err <= FP32_TOL, f"{profile}: max logit error {err:.2e}"


@pytest.mark.parametrize("name", ["qwen3_5_text-gqa-khead2-vhead4-conv4-rope_half", "mamba2-heads8-groups2-state16-conv4"])
def test_fused_recurrences_hold_a_long_call_with_strong_decay(name, tmp_path, make_tiny_model, export_model):
    """One call of 150 tokens (the kernels' own chunks, 64, inside it) with a decay of about -60
    per token: a chunked kernel that formed exp of the running sum unguarded would overflow
    (exp(3840)). onnxruntime's LinearAttention / GatedDeltaNet give transformers' logits still."""
    c = case(name)
    model_dir, model = make_tiny_model(tmp_path / "hf", c.model_type, {**c.config, "max_position_embeddings": 256})
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "A_log"):  # A = -20, dt about softplus(3) = 3
                m.A_log.fill_(float(np.log(20.0)))
                m.dt_bias.fill_(3.0)
    model.save_pretrained(model_dir)
    out = export_model(model_dir, tmp_path / "out", "--onnx-ops", "ort")
    ops = [n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node]
    assert {"LinearAttention", "GatedDeltaNet"} & set(ops)
    inputs = make_inputs(model.config.vocab_size, lengths=(150, 71))
    err = masked_max_abs_diff(ort_logits(out / "model.onnx", inputs), hf_logits(model, inputs), inputs[1])
    assert err <= FP32_TOL, f"{name}: max logit error {err:.2e}"


# Guards: each feature that a parity case relies on must really change transformers' logits for
# the prompt batch used here, else the parity case would pass without testing it.
GUARDS = [
    ("llama", "rope_dynamic-maxpos8", dict(max_position_embeddings=8, **rope("dynamic", factor=2.0)),
     dict(max_position_embeddings=8, **rope("default"))),
    ("mistral", "sliding_window4", dict(sliding_window=4), dict(sliding_window=None)),
    ("qwen2", "use_sliding_window4", dict(use_sliding_window=True, sliding_window=4, max_window_layers=1),
     dict(use_sliding_window=False, sliding_window=4, max_window_layers=1)),
    ("llama", "rope_yarn", dict(**rope("yarn", **YARN)), dict(**rope("default"))),
]


@pytest.mark.parametrize("model_type,feature,with_,without", GUARDS, ids=[f"{m}-{f}" for m, f, _, _ in GUARDS])
def test_feature_changes_reference_logits(model_type, feature, with_, without, tmp_path, make_tiny_model):
    _, a = make_tiny_model(tmp_path / "a", model_type, {**BASE, **with_})
    _, b = make_tiny_model(tmp_path / "b", model_type, {**BASE, **without})
    inputs = make_inputs(BASE["vocab_size"])
    assert masked_max_abs_diff(hf_logits(a, inputs), hf_logits(b, inputs), inputs[1]) > 1e-3


# transformers 4.x style config.json: top-level rope_theta + rope_scaling (or no layer_types),
# compared against the model built from the equivalent 5.x config.
LEGACY_CASES = [
    (
        "llama",
        "legacy4x-rope_scaling_linear",
        dict(num_key_value_heads=2, **rope("linear", factor=2.0)),
        lambda c: c.update(rope_theta=10000.0, rope_scaling={"type": "linear", "factor": 2.0}),
    ),
    (
        "llama",
        "legacy4x-rope_scaling_llama3-theta5e5",
        dict(num_key_value_heads=2, max_position_embeddings=256, **rope("llama3", theta=500000.0, **LLAMA3)),
        lambda c: c.update(rope_theta=500000.0, rope_scaling={"rope_type": "llama3", **LLAMA3}),
    ),
    (
        "qwen2",
        "legacy4x-rope_scaling_null-theta1e6",
        dict(num_key_value_heads=2, **rope("default", theta=1e6)),
        lambda c: c.update(rope_theta=1e6, rope_scaling=None),
    ),
    (
        "mistral",
        "legacy4x-rope_scaling_yarn",
        dict(num_key_value_heads=2, sliding_window=None, **rope("yarn", **YARN)),
        lambda c: c.update(rope_theta=10000.0, rope_scaling={"type": "yarn", **YARN}),
    ),
]


def _legacy_qwen2_sliding(c):
    c.update(rope_theta=10000.0, rope_scaling=None)
    c.pop("layer_types", None)  # 4.x qwen2 configs derive it from use_sliding_window/max_window_layers


LEGACY_CASES.append(
    (
        "qwen2",
        "legacy4x-sliding_no_layer_types",
        dict(num_key_value_heads=2, use_sliding_window=True, sliding_window=4, max_window_layers=1, **rope("default")),
        _legacy_qwen2_sliding,
    )
)


@pytest.mark.parametrize(
    "model_type,variant,overrides,edit", LEGACY_CASES, ids=[f"{m}-{v}" for m, v, _, _ in LEGACY_CASES]
)
def test_parity_legacy_config(
    model_type, variant, overrides, edit, tmp_path, make_tiny_model, export_model, support_matrix
):
    config = {**BASE, **overrides}
    model_dir, model = make_tiny_model(tmp_path / "hf", model_type, config)
    cfg_path = model_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("rope_parameters", None)
    edit(cfg)
    cfg_path.write_text(json.dumps(cfg, indent=2))

    # Sanity of the test itself: transformers reads the hand-written 4.x config as the 5.x one.
    reloaded = AutoConfig.from_pretrained(model_dir)
    want_rope = dict(model.config.rope_parameters)
    got_rope = dict(reloaded.rope_parameters)
    for k, v in want_rope.items():
        assert got_rope.get(k) == pytest.approx(v), f"rope_parameters[{k!r}]: {got_rope.get(k)} != {v}"
    if hasattr(model.config, "layer_types"):
        assert reloaded.layer_types == model.config.layer_types

    verify_export(
        support_matrix=support_matrix,
        export_model=export_model,
        model_type=model_type,
        variant=variant,
        model_dir=model_dir,
        ref_model=model,
        out_dir=tmp_path / "out",
    )


def test_bf16_checkpoint_exported_as_float32(tmp_path, make_tiny_model, export_model, support_matrix):
    config = {**BASE, "num_key_value_heads": 2, **rope("default")}
    model_dir, _ = make_tiny_model(tmp_path / "hf", "llama", config, dtype="bfloat16")
    assert json.loads((model_dir / "config.json").read_text()).get("dtype") == "bfloat16"
    # Reference: the same bf16 weights, upcast.
    ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    verify_export(
        support_matrix=support_matrix,
        export_model=export_model,
        model_type="llama",
        variant="bf16-checkpoint-to-fp32",
        model_dir=model_dir,
        ref_model=ref,
        out_dir=tmp_path / "out",
        source_dtype="bfloat16",
    )


def test_sharded_checkpoint(tmp_path, make_tiny_model, export_model, support_matrix):
    config = {**BASE, "num_key_value_heads": 2, **rope("default")}
    model_dir, model = make_tiny_model(tmp_path / "hf", "qwen3", {**config, "head_dim": 16}, max_shard_size=40_000)
    assert (model_dir / "model.safetensors.index.json").is_file()
    shards = sorted(model_dir.glob("*.safetensors"))
    assert len(shards) > 1, shards
    verify_export(
        support_matrix=support_matrix,
        export_model=export_model,
        model_type="qwen3",
        variant=f"sharded-{len(shards)}-files",
        model_dir=model_dir,
        ref_model=model,
        out_dir=tmp_path / "out",
    )


# One case per model type (the quantized suite's), in every profile.
FP16_CASES = [(c.model_type, c.variant, c.overrides) for c in cases("quantized")]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("model_type,variant,overrides", FP16_CASES, ids=[f"{m}-{v}" for m, v, _ in FP16_CASES])
def test_fp16_export(model_type, variant, overrides, profile, tmp_path, make_tiny_model, export_model, support_matrix):
    """--dtype float16 runs in onnxruntime CPU and stays close to the fp32 reference."""
    config = {**BASE, **overrides}
    model_dir, model = make_tiny_model(tmp_path / "hf", model_type, config)
    verify_export(
        support_matrix=support_matrix,
        export_model=export_model,
        model_type=model_type,
        variant=f"{variant}-export_float16 [{profile} ops]",
        profile=profile,
        model_dir=model_dir,
        ref_model=model,
        out_dir=tmp_path / "out",
        extra_args=("--dtype", "float16"),
        dtype="float16",
        tol=FP16_TOL,
    )
    # Argmax agreement too (a loose tolerance alone could hide garbage on near-flat logits).
    inputs = make_inputs(model.config.vocab_size)
    got = ort_logits(tmp_path / "out" / "model.onnx", inputs)
    want = hf_logits(model, inputs)
    keep = inputs[1].astype(bool)
    agree = (got.argmax(-1) == want.argmax(-1))[keep].mean()
    assert agree >= 0.9, f"fp16 argmax agrees with fp32 on only {agree:.0%} of positions"


def test_bf16_export_valid_or_cleanly_refused(tmp_path, make_tiny_model, run_hfexport):
    """--dtype bfloat16 for onnx: either a structurally valid export (manifest says bfloat16, weights
    bf16, logits still float32) or a clean one-line refusal naming bfloat16 with no OUT_DIR left.
    (onnxruntime's CPU provider lacks bf16 kernels for most ops, so the graph is not run here.)"""
    config = {**BASE, "num_key_value_heads": 2, **rope("default")}
    model_dir, _ = make_tiny_model(tmp_path / "hf", "llama", config)
    out = tmp_path / "out"
    proc = run_hfexport("export", model_dir, "-o", out, "--dtype", "bfloat16")
    if proc.returncode != 0:
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("hfexport: error: "), proc.stderr
        assert "bfloat16" in lines[0]
        assert not out.exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
        return
    check_onnx_graph(out / "model.onnx")
    check_manifest(out, model_type="llama", vocab=BASE["vocab_size"], dtype="bfloat16", source_dtype="float32")
    m = onnx.load(str(out / "model.onnx"), load_external_data=False)
    bf16_inits = [t.name for t in m.graph.initializer if t.data_type == onnx.TensorProto.BFLOAT16]
    assert bf16_inits, "no bfloat16 weights in a --dtype bfloat16 export"
