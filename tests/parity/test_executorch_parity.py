"""ExecuTorch parity: the tiny random models of the ONNX parity suite exported with
``--format executorch`` (a .pte written without torch) on both ExecuTorch backends — ``portable``
(the runtime's ATen kernels) and ``xnnpack`` (linears delegated to XNNPACK) — loaded by
ExecuTorch's own runtime with program verification on, and run on a left-padded batch against
transformers eager."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from test_onnx_parity import BASE, CASES, PROMPT_LENGTHS, hf_logits, make_inputs, masked_max_abs_diff
from tiny_configs import cases

torch = pytest.importorskip("torch")
pytest.importorskip("executorch")

PORTABLE_FP32_TOL = 1e-5
XNNPACK_FP32_TOL = 1e-4  # XNNPACK's own GEMM kernels (blocked accumulation order)
TOL = {"portable": PORTABLE_FP32_TOL, "xnnpack": XNNPACK_FP32_TOL}
XNNPACK_PAYLOAD = b"XH00"  # the header of each XnnpackBackend payload
INPUT_NAMES = ("input_ids", "attention_mask", "position_ids")
# Memory is planned at each dim's upper bound: the batch of make_inputs and its prompt, bounded.
DIMS = ("--dim", f"batch=1:{len(PROMPT_LENGTHS)}", "--dim", "sequence=1:16")
METADATA = ("get_max_seq_len", "get_max_context_len", "get_vocab_size", "get_n_layers", "use_kv_cache",
            "enable_dynamic_shape", "use_sdpa_with_kv_cache")


def load_program(path: Path):
    """ExecuTorch's runtime, verifying the program's internal consistency as it loads."""
    from executorch.runtime import Runtime, Verification

    return Runtime.get().load_program(str(path), verification=Verification.InternalConsistency)


def et_logits(program, inputs) -> np.ndarray:
    (logits,) = program.load_method("forward").execute([torch.from_numpy(a) for a in inputs])
    return logits.numpy()


def check_executorch_export(out: Path, vocab: int) -> None:
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["format"] == "executorch"
    comp = manifest["components"]["model"]
    assert comp["file"] == "model.pte" and comp["program"] == "forward"
    assert [i["name"] for i in comp["inputs"]] == list(INPUT_NAMES)
    assert comp["outputs"] == [{"name": "logits", "dtype": "float32", "shape": ["batch", "sequence", vocab]}]
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "export.json", "generation_config.json",
                                                      "model.pte"]


def run_case(model_type, variant, model_dir, model, out, export_model, support_matrix, *extra, backend="portable"):
    tol = TOL[backend]
    try:
        export_model(model_dir, out, "--format", "executorch", "--executorch-backend", backend, *DIMS, *extra)
        vocab = model.config.vocab_size
        check_executorch_export(out, vocab)
        payloads = (out / "model.pte").read_bytes().count(XNNPACK_PAYLOAD)
        assert (payloads > 0) == (backend == "xnnpack"), f"{payloads} XNNPACK payloads in a {backend} program"
        inputs = make_inputs(vocab)
        program = load_program(out / "model.pte")
        diff = masked_max_abs_diff(et_logits(program, inputs), hf_logits(model, inputs), inputs[1])
        assert diff <= tol, f"{model_type}/{variant} as .pte: max abs diff {diff:.3e} > {tol:.0e}"
    except Exception as e:
        support_matrix.record(model_type, f"{variant} [{backend}]", False, None,
                              f"{type(e).__name__}: {str(e).splitlines()[0][:120]}", backend="executorch")
        raise
    support_matrix.record(model_type, f"{variant} [{backend}]", True, diff, backend="executorch")
    return program, inputs


@pytest.mark.parametrize("backend", ["portable", "xnnpack"])
@pytest.mark.parametrize("model_type,variant,overrides", CASES, ids=[f"{m}-{v}" for m, v, _ in CASES])
def test_executorch_parity_fp32(model_type, variant, overrides, backend, tmp_path, make_tiny_model, export_model,
                                support_matrix):
    model_dir, model = make_tiny_model(tmp_path / "hf", model_type, {**BASE, **overrides})
    run_case(model_type, variant, model_dir, model, tmp_path / "out", export_model, support_matrix, backend=backend)


@pytest.mark.parametrize("model_type,variant,overrides", CASES, ids=[f"{m}-{v}" for m, v, _ in CASES])
def test_executorch_parity_fp32_hfexport_kernels(model_type, variant, overrides, tmp_path, make_tiny_model,
                                                 export_model, support_matrix):
    """--executorch-kernels hfexport: attention is hfexport::sdpa.out (hfexport's kernel library,
    registered into the runtime when loaded), XNNPACK the rest; left-padded batches included."""
    import hfexport.executorch_runner as er

    assert er.load_hfexport_kernels(), f"{er.KERNELS_LIBRARY} was not built beside {er.__file__}"
    model_dir, model = make_tiny_model(tmp_path / "hf", model_type, {**BASE, **overrides})
    run_case(model_type, f"{variant} hfexport-kernels", model_dir, model, tmp_path / "out", export_model,
             support_matrix, "--executorch-kernels", "hfexport", backend="xnnpack")
    ops = (tmp_path / "out" / "model.pte").read_bytes()
    # attention with sinks: the stock kernels; a pure state-space model has no attention.
    assert (b"hfexport::sdpa" in ops) == (model_type not in ("gpt_oss", "mamba2"))


def test_executorch_hfexport_kernels_needed_but_not_built(tmp_path, make_tiny_model, export_model):
    """A program exported with --executorch-kernels hfexport, opened where hfexport's kernel library
    is absent: one clear error saying what is missing, not the runtime's missing-operator log."""
    import shutil
    import subprocess
    import sys

    import hfexport

    model_dir, _ = make_tiny_model(tmp_path / "hf", "qwen3", {**BASE, "num_hidden_layers": 1})
    out = export_model(model_dir, tmp_path / "out", "--format", "executorch", "--for-generation", "--static-cache",
                       "--max-cache-len", "16", "--executorch-kernels", "hfexport")
    package = tmp_path / "py" / "hfexport"
    shutil.copytree(Path(hfexport.__file__).parent, package, ignore=shutil.ignore_patterns("libhfexport_*"))
    env = {k: v for k, v in os.environ.items() if k != "HFEXPORT_EXECUTORCH_KERNELS"}
    env["PYTHONPATH"] = str(tmp_path / "py")
    script = ("import numpy as np, hfexport; ids = np.array([[5, 6]]); "
              f"hfexport.generate(hfexport.open_runner({str(out)!r}), ids, np.ones_like(ids), max_new_tokens=1)")
    proc = subprocess.run([sys.executable, "-c", script],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode != 0
    assert "--executorch-kernels hfexport" in proc.stderr and "libhfexport_executorch_kernels.so" in proc.stderr, \
        proc.stderr[-2000:]


def test_executorch_kernels_option_is_checked(tmp_path, make_tiny_model, run_hfexport):
    from conftest import assert_clean_error

    model_dir, _ = make_tiny_model(tmp_path / "hf", "qwen3", {**BASE, "num_hidden_layers": 1})
    proc = run_hfexport("export", str(model_dir), "-o", str(tmp_path / "out"), "--format", "executorch",
                        "--executorch-kernels", "fast")
    assert_clean_error(proc, tmp_path / "out", "--executorch-kernels", "stock", "hfexport")
    proc = run_hfexport("export", str(model_dir), "-o", str(tmp_path / "out"), "--format", "onnx",
                        "--executorch-kernels", "hfexport")
    assert_clean_error(proc, tmp_path / "out", "--executorch-kernels", "executorch")


@pytest.mark.parametrize("backend", ["portable", "xnnpack"])
def test_executorch_shorter_inputs_and_metadata(backend, tmp_path, make_tiny_model, export_model, support_matrix):
    """One program serves every shape up to its bounds (a single row, a shorter prompt; XNNPACK
    reshapes its delegates to each), and the LLM runner's metadata methods hold what the export
    was bounded by."""
    model_dir, model = make_tiny_model(tmp_path / "hf", "qwen3", {**BASE, "bos_token_id": 1, "eos_token_id": [2, 7]})
    program, _ = run_case("qwen3", "shapes", model_dir, model, tmp_path / "out", export_model, support_matrix,
                          backend=backend)
    for lengths in [(1,), (16,), (7, 3), (2, 16, 5)]:
        inputs = make_inputs(model.config.vocab_size, lengths=lengths, seed=len(lengths))
        diff = masked_max_abs_diff(et_logits(program, inputs), hf_logits(model, inputs), inputs[1])
        assert diff <= TOL[backend], (lengths, diff)
    meta = {name: program.load_method(name).execute([])[0] for name in METADATA}
    assert meta == {"get_max_seq_len": 16, "get_max_context_len": 16, "get_vocab_size": model.config.vocab_size,
                    "get_n_layers": model.config.num_hidden_layers, "use_kv_cache": False, "enable_dynamic_shape": True,
                    "use_sdpa_with_kv_cache": False}
    assert program.load_method("get_eos_ids").execute([]) == [2, 7]
    assert program.load_method("get_bos_id").execute([]) == [1]
    assert set(program.method_names) == {"forward", "get_eos_ids", "get_bos_id", *METADATA}


def test_executorch_bf16_checkpoint(tmp_path, make_tiny_model, export_model, support_matrix):
    from transformers import AutoModelForCausalLM

    model_dir, _ = make_tiny_model(tmp_path / "hf", "qwen3", dict(BASE), dtype="bfloat16")
    reference = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager",
                                                     dtype=torch.float32).eval()
    run_case("qwen3", "bf16-checkpoint-to-fp32", model_dir, reference, tmp_path / "out", export_model,
             support_matrix, backend="xnnpack")


@pytest.mark.parametrize("mode", [(), ("--for-generation", "--static-cache", "--max-cache-len", "32"),
                                  ("--for-generation",)], ids=["forward", "static", "dynamic"])
def test_executorch_xnnpack_runs_whole_layers(mode, tmp_path, make_tiny_model, export_model):
    """XNNPACK runs each run of the ops it supports as one delegate (norms, rotary, attention,
    MLP, residuals with the linears), not one delegate per linear between portable kernels: at
    most two per layer (a static cache's in-place update splits a layer) plus the rotary tables;
    a delegate per linear would be seven per layer. The logits stay transformers' (forward)."""
    layers = 4
    model_dir, model = make_tiny_model(tmp_path / "hf", "qwen3", {**BASE, "num_hidden_layers": layers})
    out = tmp_path / "out"
    export_model(model_dir, out, "--format", "executorch", *mode)  # batch 1, as ExecuTorch's LLM runner
    payloads = (out / "model.pte").read_bytes().count(XNNPACK_PAYLOAD)
    assert 0 < payloads <= 2 * layers + 3, f"{payloads} XNNPACK payloads for {layers} layers"
    if not mode:
        inputs = make_inputs(model.config.vocab_size, lengths=(7,))
        diff = masked_max_abs_diff(et_logits(load_program(out / "model.pte"), inputs), hf_logits(model, inputs),
                                   inputs[1])
        assert diff <= XNNPACK_FP32_TOL, diff


def test_executorch_static_cache_attends_only_filled_slots(tmp_path, make_tiny_model, export_model):
    """With XNNPACK, attention over a static cache kept in the method reads the slots up to the
    call's last position, not all max_cache_len: each cache is cut there once per call
    (aten::slice_copy of the buffer, its end the largest position + 1, read at run time by
    aten::_local_scalar_dense) and XNNPACK takes the cut with its dynamic slot count. The caller's
    (zero-copy) cache is attended whole. Parity of both: test_generation."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    layers = 2
    model_dir, model = make_tiny_model(tmp_path / "hf", "qwen3", {**BASE, "num_hidden_layers": layers})
    cache = [1, model.config.num_key_value_heads, 256, model.config.head_dim]
    for extra, cut in (((), True), (("--no-alloc-graph-io",), False)):
        out = export_model(model_dir, tmp_path / f"out{len(extra)}", "--format", "executorch", "--for-generation",
                           "--static-cache", "--max-cache-len", "256", *extra)
        plan = deserialize_pte_binary((out / "model.pte").read_bytes()).program.execution_plan[0]
        ops = [op.name for op in plan.operators]
        cuts = 0
        for chain in plan.chains:
            for ins in chain.instructions:
                call = ins.instr_args
                if type(call).__name__ == "KernelCall" and ops[call.op_index] == "aten::slice_copy":
                    source = plan.values[call.args[0]].val
                    cuts += type(source).__name__ == "Tensor" and list(source.sizes) == cache
        assert cuts == (2 * layers if cut else 0), cuts
        assert ("aten::_local_scalar_dense" in ops) is cut, ops


@pytest.mark.parametrize("backend", ["portable", "xnnpack"])
def test_executorch_forward_without_planned_io(backend, tmp_path, make_tiny_model, export_model, support_matrix):
    """--no-alloc-graph-io: the inputs and the logits get no planned memory (the runtime uses the
    caller's input buffers; the Python runtime binds the output to storage of its own), the same
    logits; one program for every shape up to its bounds still."""
    model_dir, model = make_tiny_model(tmp_path / "hf", "qwen3", dict(BASE))
    program, _ = run_case("qwen3", "no-planned-io", model_dir, model, tmp_path / "out", export_model, support_matrix,
                          "--no-alloc-graph-io", backend=backend)
    meta = program.load_method("forward").metadata
    assert not any(meta.input_tensor_meta(i).is_memory_planned() for i in range(meta.num_inputs()))
    assert not meta.output_tensor_meta(0).is_memory_planned()
    for lengths in [(1,), (7, 3)]:
        inputs = make_inputs(model.config.vocab_size, lengths=lengths, seed=len(lengths))
        diff = masked_max_abs_diff(et_logits(program, inputs), hf_logits(model, inputs), inputs[1])
        assert diff <= TOL[backend], (lengths, diff)


# --dtype float16 / bfloat16: weights and compute in that type (XNNPACK runs the float16 linears;
# bfloat16 ones stay on the kernels), against the float32 reference as for ONNX: a bound relative
# to the logits' scale (bfloat16 keeps 8 bits of mantissa, float16 11), and argmax agreement.
# Positions where an MoE router's choice is a near-tie in transformers are left out of the bound.
HALF_TOL = {"float16": 2e-2, "bfloat16": 6e-2}
HALF_CASES = [(c.model_type, c.variant, c.overrides) for c in cases("quantized")]
ROUTER_TIE = 1e-2  # router logits closer than this at the top-k boundary: either expert set is right


def routing_near_ties(model, inputs) -> np.ndarray:
    """[batch, sequence]: positions where an MoE layer of transformers picks its experts between
    router logits closer than ROUTER_TIE (reduced precision may pick the other, a discontinuous
    change of the output); all False for a dense model."""
    k = getattr(model.config, "num_experts_per_tok", None)
    batch, seq = inputs[0].shape
    if not k:
        return np.zeros((batch, seq), dtype=bool)
    ids, mask, pos = (torch.from_numpy(a) for a in inputs)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, output_router_logits=True)
    # LFM2-MoE chooses by sigmoid(logits) + expert_bias: the ties are in those scores, where a
    # logit gap of ROUTER_TIE is at most a quarter of it (the sigmoid's slope).
    biases = [m.expert_bias.float() for m in model.modules() if isinstance(getattr(m, "expert_bias", None), torch.Tensor)]
    if biases:
        assert len(biases) == len(out.router_logits), (len(biases), len(out.router_logits))
    near = np.zeros((batch, seq), dtype=bool)
    for i, router in enumerate(out.router_logits):
        scores = router.float().sigmoid() + biases[i] if biases else router.float()
        top = scores.reshape(batch, seq, -1).sort(dim=-1, descending=True).values
        near |= (top[..., k - 1] - top[..., k] < (ROUTER_TIE / 4 if biases else ROUTER_TIE)).numpy()
    return near


@pytest.mark.parametrize("backend", ["portable", "xnnpack"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("model_type,variant,overrides", HALF_CASES, ids=[f"{m}-{v}" for m, v, _ in HALF_CASES])
def test_executorch_half_precision(model_type, variant, overrides, dtype, backend, tmp_path, make_tiny_model,
                                   export_model, support_matrix):
    model_dir, model = make_tiny_model(tmp_path / "hf", model_type, {**BASE, **overrides})
    out = tmp_path / "out"
    what = f"{variant}-{dtype} [{backend}]"
    try:
        export_model(model_dir, out, "--format", "executorch", "--executorch-backend", backend, "--dtype", dtype,
                     *DIMS)
        manifest = json.loads((out / "export.json").read_text())
        assert manifest["dtype"] == dtype
        payloads = (out / "model.pte").read_bytes().count(XNNPACK_PAYLOAD)
        # float16 linears run on XNNPACK; bfloat16 ones on the kernels, with the float32 parts
        # (norms, softmax) on XNNPACK.
        assert (payloads > 0) == (backend == "xnnpack"), f"{payloads} XNNPACK payloads"
        program = load_program(out / "model.pte")
        meta = program.load_method("forward").metadata
        assert meta.output_tensor_meta(0).dtype() == 6  # ScalarType Float: logits widened, as transformers returns them
        inputs = make_inputs(model.config.vocab_size)
        got, want = et_logits(program, inputs), hf_logits(model, inputs)
        keep = inputs[1].astype(bool)
        scale = float(np.abs(want[keep]).max())
        ties = routing_near_ties(model, inputs) & keep
        assert ties.sum() <= 0.1 * keep.sum(), f"{ties.sum()} of {keep.sum()} positions are routing near-ties"
        diff = masked_max_abs_diff(got, want, (keep & ~ties).astype(inputs[1].dtype)) / scale
        assert diff <= HALF_TOL[dtype], f"{model_type}/{what}: max abs diff {diff:.3e} of the logit scale"
        agree = (got.argmax(-1) == want.argmax(-1))[keep].mean()
        assert agree >= 0.9, f"{model_type}/{what}: argmax agrees with fp32 on only {agree:.0%} of positions"
    except Exception as e:
        support_matrix.record(model_type, what, False, None, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}",
                              backend="executorch")
        raise
    support_matrix.record(model_type, what, True, diff, backend="executorch")
