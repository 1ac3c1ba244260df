"""Generation exports (``--for-generation``): greedy decoding through every cache mode against
transformers' ``generate``, the static cache's in-place contract, the ``hfexport generate`` CLI
(eos, sampling) and its clean refusals.

Modes: ``dynamic`` (prefill + decode graphs, past -> present), ``multi-token`` (one decode graph,
symbolic query length, prefill = zero-length past) and ``static`` (one decode graph over
fixed-size ``input.*``/``output.*`` cache buffers bound to the same memory).

Reference: transformers eager, ``generate(do_sample=False, max_new_tokens=32)`` with
``eos_token_id=None`` so exactly 32 tokens come out; our side runs ``hfexport.generate(...,
ignore_eos=True)``. Tokens must be identical and every step's logits (all rows are real at every
step of a left-padded batch) within 1e-4 of transformers' raw logits.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import shutil
from dataclasses import dataclass, field
from typing import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from conftest import TINY_CONFIG, assert_clean_error, build_tiny_model, cli_env
from tiny_configs import cases, rope
from transformers import GenerationConfig

import hfexport

TOL = 1e-4
NEW_TOKENS = 32
MAX_CACHE_LEN = 48  # static exports; >= every prompt here + NEW_TOKENS
SINGLE = (7,)  # prompt lengths: one prompt, and a left-padded batch of two
BATCH = (9, 5)

# Wider than conftest's default init: tiny models at std 0.08 mostly repeat one token, which makes
# token identity a weak check; at 0.2 most configs produce varied 32-token continuations.
WEIGHT_STD = 0.2

BASE = dict(TINY_CONFIG)


# Two tiny configs per model_type (the registry's "generation" cases). Together: GQA, MQA, MHA,
# tied embeddings, qwen2's qkv bias, qwen3's q/k norm, explicit head_dim, llama3 / yarn / linear
# rope scaling, sliding windows (shorter than the prompts, so decode steps must drop old positions).
CONFIGS = {c.name: (c.model_type, c.overrides) for c in cases("generation")}

MODES = ("dynamic", "multi-token", "static")
# Families whose layers carry convolution state besides (or instead of) a KV cache.
# Hybrids whose token mixers keep convolution (and recurrent) state instead of a KV cache.
CONV_STATE_TYPES = {"lfm2", "lfm2_moe", "granitemoehybrid", "mamba2", "falcon_h1", "qwen3_5_text", "qwen3_next", "qwen3_5_moe_text"}
# The first generation case of each model type (the reduced-precision suites).
_FIRST_OF_TYPE = list({model_type: name for name, (model_type, _) in reversed(CONFIGS.items())}.values())


PROFILES = ("standard", "ort", "ort-gqa")  # --onnx-ops


def mode_args(mode: str, batch: int = 1, max_cache_len: int = MAX_CACHE_LEN, profile: str = "standard") -> list[str]:
    ops = ["--onnx-ops", profile]
    if mode == "dynamic":
        return ["--for-generation", *ops]
    if mode == "multi-token":
        return ["--for-generation", "--multi-token-decode", *ops]
    args = ["--for-generation", "--static-cache", "--max-cache-len", str(max_cache_len), *ops]
    return args + (["--batch-size", str(batch)] if batch != 1 else [])


# --------------------------------------------------------------------------------------------
# helpers


def make_prompts(vocab: int, lengths, seed: int = 1234) -> tuple[np.ndarray, np.ndarray]:
    """Left-padded int64 input_ids / attention_mask (ids avoid 0..2: pad, bos, eos)."""
    rng = np.random.default_rng(seed)
    seq = max(lengths)
    ids = np.zeros((len(lengths), seq), dtype=np.int64)
    mask = np.zeros((len(lengths), seq), dtype=np.int64)
    for row, n in enumerate(lengths):
        ids[row, seq - n :] = rng.integers(3, vocab, size=n)
        mask[row, seq - n :] = 1
    return ids, mask


@dataclass
class Reference:
    tokens: np.ndarray  # [batch, n]
    logits: list  # n x [batch, vocab]
    cache: list  # per layer (keys, values), [batch, kv, seq, head_dim]


def hf_generate(model, ids: np.ndarray, mask: np.ndarray, n: int = NEW_TOKENS, eos=None) -> Reference:
    """transformers greedy; eos None = never stop (exactly n tokens)."""
    config = GenerationConfig(do_sample=False, max_new_tokens=n, eos_token_id=eos, pad_token_id=0,
                              output_logits=True, return_dict_in_generate=True)
    # generate() fills the None fields of `config` from model.generation_config (eos 2 for these
    # configs), so the model's own eos is cleared for the call.
    saved = model.generation_config
    model.generation_config = GenerationConfig(eos_token_id=None, pad_token_id=0)
    try:
        with torch.no_grad():
            out = model.generate(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), generation_config=config)
    finally:
        model.generation_config = saved
    if eos is None:
        assert out.sequences.shape[1] - ids.shape[1] == n
    return Reference(out.sequences[:, ids.shape[1] :].numpy(), [l.float().numpy() for l in out.logits],
                     [layer_cache(layer) for layer in out.past_key_values.layers])


def layer_cache(layer) -> dict:
    """A layer's cache after generate: "key" and "value" where it attends, "conv" (transformers' kernel
    columns: the oldest, which no convolution reads, first) and "ssm" where it keeps state (a hybrid
    layer both)."""
    out = {}
    if getattr(layer, "keys", None) is not None:
        out["key"], out["value"] = layer.keys.float().numpy(), layer.values.float().numpy()
    for kind, states in (("conv", getattr(layer, "conv_states", None)), ("ssm", getattr(layer, "recurrent_states", None))):
        if states and states[0] is not None:
            out[kind] = states[0].float().numpy()
    return out


def is_replaced_state(pair: dict) -> bool:
    return pair["name"].startswith(("past_conv.", "past_ssm."))


def check_conv_state(got: np.ndarray, pair: dict, ref: "Reference") -> float:
    """A convolution state (past_conv.{layer}: the last kernel - 1 inputs) or a Mamba layer's SSM
    state (past_ssm.{layer}) against transformers' after the same tokens; every row's last inputs are
    real tokens by then."""
    kind, layer = pair["name"].split(".")[:2]
    state = ref.cache[int(layer)]
    want = state["conv"][..., 1:] if kind == "past_conv" else state["ssm"]
    d = float(np.abs(got - want).max())
    assert d <= TOL, f"{pair['input']}: {kind} state differs from transformers' by {d:.3e}"
    return d


@dataclass
class TinyModel:
    model_type: str
    model_dir: Path
    model: object
    refs: dict = field(default_factory=dict)

    @property
    def vocab(self) -> int:
        return self.model.config.vocab_size

    def prompts(self, lengths):
        return make_prompts(self.vocab, lengths)

    def reference(self, lengths, n: int = NEW_TOKENS) -> Reference:
        key = (tuple(lengths), n)
        if key not in self.refs:
            self.refs[key] = hf_generate(self.model, *self.prompts(lengths), n)
        return self.refs[key]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """tiny(name, [model_type, overrides]) -> TinyModel, built once per module."""
    built: dict[str, TinyModel] = {}

    def get(name: str, model_type: str | None = None, overrides: dict | None = None) -> TinyModel:
        if name not in built:
            if model_type is None:
                model_type, overrides = CONFIGS[name]
            d = tmp_path_factory.mktemp(f"gen-{name}")
            model_dir, model = build_tiny_model(d / "hf", model_type, {**BASE, **overrides}, weight_std=WEIGHT_STD)
            built[name] = TinyModel(model_type, model_dir, model)
        return built[name]

    return get


def session_options() -> ort.SessionOptions:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    return opts


def run_ours(out_dir: Path, ids: np.ndarray, mask: np.ndarray, n: int = NEW_TOKENS):
    fmt = json.loads((out_dir / "export.json").read_text())["format"]
    options = {"session_options": session_options()} if fmt == "onnx" else {}
    runner = hfexport.open_runner(out_dir, **options)
    step_logits: list = []
    tokens = hfexport.generate(runner, ids, mask, max_new_tokens=n, ignore_eos=True, step_logits=step_logits)
    return tokens, step_logits, runner


def compare(got_tokens, got_logits, ref: Reference, what: str, tol: float = TOL, ties_within_tol: bool = False) -> float:
    """Asserts identical tokens and step logits within `tol`; returns the max step-logit error.

    `ties_within_tol` (reduced-precision exports): tokens may part where transformers' top-2 logits
    are closer than `tol` and the logits up to there are within it; the rest is not compared."""
    want = ref.tokens
    assert got_tokens.shape == want.shape, f"{what}: got {got_tokens.shape[1]} tokens, want {want.shape[1]}"
    # Logits are comparable up to (and including) the first step where the tokens differ.
    same = (got_tokens == want).all(axis=0)
    first_diff = int(np.argmin(same)) if not same.all() else len(same)
    steps = min(first_diff + 1, len(same))
    errs = [float(np.abs(got_logits[i].astype(np.float64) - ref.logits[i]).max()) for i in range(steps)]
    err = max(errs)
    assert np.isfinite(err), f"{what}: non-finite logits at step {int(np.argmax(~np.isfinite(errs)))}"
    if first_diff < len(same):
        top2 = np.sort(ref.logits[first_diff], axis=-1)[:, -2:]
        gap = float((top2[:, 1] - top2[:, 0]).min())  # a near-tie in transformers' logits?
        if ties_within_tol and gap < tol and err <= tol:
            return err
    assert first_diff == len(same), (
        f"{what}: tokens differ from step {first_diff} (max step-logit err up to there {err:.2e}, "
        f"transformers' top-2 logit gap there {gap:.2e})\n"
        f"  got  {got_tokens.tolist()}\n  want {want.tolist()}"
    )
    worst = int(np.argmax(errs))
    assert err <= tol, f"{what}: step {worst} logits differ by {err:.3e} > {tol:.0e} (tokens identical)"
    return err


def record(support_matrix, model_type: str, variant: str, fn, backend: str = "onnx"):
    """Runs fn() -> max error, recording the outcome in the support matrix."""
    try:
        err = fn()
    except Exception as e:  # noqa: BLE001 - record, then re-raise for pytest
        if hasattr(e, "proc"):  # conftest.ExportFailed
            note = "export failed: " + e.proc.stderr.strip()
        else:
            text = str(e).strip()
            note = f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"
        support_matrix.record(model_type, variant, False, None, note, backend)
        raise
    support_matrix.record(model_type, variant, True, err, backend=backend)
    return err


def check_cache_in_place(runner, manifest_pairs) -> None:
    """Each cache pair's output OrtValue is the input's buffer (same memory), buffers distinct."""
    assert runner.binding is not None and runner.buffers, "the runner allocated no cache buffers"
    outputs = runner.binding.get_outputs()
    out_ptrs = {v.data_ptr() for v in outputs}
    in_ptrs = [runner.buffers[p["input"]].data_ptr() for p in manifest_pairs]
    assert len(set(in_ptrs)) == len(in_ptrs), "two cache pairs share one buffer"
    for p, ptr in zip(manifest_pairs, in_ptrs):
        assert ptr in out_ptrs, f"{p['output']} is not written into the buffer bound to {p['input']}"
    assert len(outputs) == 1 + len(manifest_pairs)


def check_static_cache_contents(runner, manifest_pairs, ref: Reference, mask: np.ndarray) -> float:
    """The buffers hold transformers' K/V for every fed token, at slot = position id."""
    pad = (mask == 0).sum(axis=1)
    err = 0.0
    for p in manifest_pairs:
        if is_replaced_state(p):
            err = max(err, check_conv_state(runner.buffers[p["input"]].numpy(), p, ref))
            continue
        layer, kind = int(p["name"].split(".")[1]), p["name"].split(".")[2]
        want = ref.cache[layer][kind]  # [batch, kv, S_h, hd] (padded index)
        got = runner.buffers[p["input"]].numpy()
        fed = mask.shape[1] + ref.tokens.shape[1] - 1  # padded prompt + tokens fed back
        for b in range(mask.shape[0]):
            h = np.arange(want.shape[2])
            padded = fed - want.shape[2] + h  # sliding layers in HF keep only the last tokens
            slot = padded - pad[b]
            keep = slot >= 0
            d = np.abs(got[b][:, slot[keep]] - want[b][:, h[keep]]).max()
            assert d <= TOL, f"{p['input']} row {b}: cache differs from transformers' by {d:.3e}"
            err = max(err, float(d))
    return err


def check_shared_cache(runner, manifest_pairs, ref: Reference, mask: np.ndarray) -> float:
    """Shared-buffer runs: each pair's present is written into the buffer bound as its past (same
    memory, one buffer per pair), and the buffers hold transformers' K/V for every fed real token
    at its padded index, as transformers' own DynamicCache lays them out."""
    assert runner.shared, "the export shares its cache buffers but the runner did not"
    check_cache_in_place(runner, manifest_pairs)
    keys_by_slot = runner.manifest.generation.get("cache_key_positions") == "slots"
    fed = mask.shape[1] + ref.tokens.shape[1] - 1
    real = np.concatenate([mask, np.ones((mask.shape[0], fed - mask.shape[1]), mask.dtype)], 1).astype(bool)
    err = 0.0
    for p in manifest_pairs:
        if is_replaced_state(p):
            err = max(err, check_conv_state(runner.buffers[p["input"]].numpy(), p, ref))
            continue
        layer, kind = int(p["name"].split(".")[1]), p["name"].split(".")[2]
        want = ref.cache[layer][kind]
        if want.shape[2] != fed:
            continue  # a sliding layer: transformers keeps only the window
        got = runner.buffers[p["input"]].numpy()[:, :, :fed]
        for b in range(mask.shape[0]):
            if kind == "key" and keys_by_slot and not real[b].all():
                continue  # rotated by slot = position + this row's padding (attention scores do not see it)
            d = float(np.abs(got[b][:, real[b]] - want[b][:, real[b]]).max())
            assert d <= TOL, f"{p['input']} row {b}: shared cache differs from transformers' by {d:.3e}"
            err = max(err, d)
    return err


# --------------------------------------------------------------------------------------------
# contract: manifest and graph metadata per mode


def check_generation_contract(out: Path, mode: str, tm: TinyModel, batch: int = 1) -> dict:
    manifest = json.loads((out / "export.json").read_text())
    gen = manifest["generation"]
    cfg = tm.model.config
    layers = cfg.num_hidden_layers
    kv = cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads

    gc = json.loads((tm.model_dir / "generation_config.json").read_text())
    eos = gc.get("eos_token_id")
    assert gen["eos_token_id"] == ([] if eos is None else eos if isinstance(eos, list) else [eos])
    assert gen["cache"] == ("static" if mode == "static" else "dynamic")
    assert gen["multi_token_decode"] is (mode != "dynamic")
    assert gen["components"] == (["prefill", "decode"] if mode == "dynamic" else ["decode"])
    assert set(manifest["components"]) == set(gen["components"])
    names = [f"past_key_values.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    if mode == "static":
        want_pairs = [{"name": n, "input": f"input.{n}", "output": f"output.{n}"} for n in names]
        assert gen["max_cache_len"] == MAX_CACHE_LEN and gen["batch_size"] == batch
    else:
        want_pairs = [{"name": n, "input": n, "output": "present." + n.split(".", 1)[1]} for n in names]
    assert sorted(gen["cache_pairs"], key=lambda p: p["name"]) == sorted(want_pairs, key=lambda p: p["name"])

    for comp_name, comp in manifest["components"].items():
        path = out / comp["file"]
        onnx.checker.check_model(str(path), full_check=True)
        sess = ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
        ins = {i.name: i for i in sess.get_inputs()}
        outs = {o.name: o for o in sess.get_outputs()}
        # manifest and graph agree
        assert [i["name"] for i in comp["inputs"]] == list(ins)
        assert [o["name"] for o in comp["outputs"]] == list(outs)
        assert list(ins)[:3] == ["input_ids", "attention_mask", "position_ids"]
        assert ins["input_ids"].type == "tensor(int64)" and ins["position_ids"].type == "tensor(int64)"
        logits = outs["logits"].shape
        assert outs["logits"].type == "tensor(float)" and logits[-1] == cfg.vocab_size and len(logits) == 3
        if mode == "static":
            b, q = ins["input_ids"].shape
            assert b == batch and isinstance(q, str)
            assert ins["position_ids"].shape == [batch, q]
            m = ins["attention_mask"]
            assert m.type == "tensor(bool)" and m.shape[:3] == [batch, 1, q] and isinstance(m.shape[3], str)
            cache_dim = m.shape[3]
            assert set(ins) == {"input_ids", "attention_mask", "position_ids", *(p["input"] for p in want_pairs)}
            assert set(outs) == {"logits", *(p["output"] for p in want_pairs)}
            for p in want_pairs:
                i, o = ins[p["input"]], outs[p["output"]]
                assert i.shape == o.shape == [batch, kv, cache_dim, head_dim], (p, i.shape, o.shape)
                assert i.type == o.type == "tensor(float)"
            continue
        batch_dim = ins["input_ids"].shape[0]
        assert isinstance(batch_dim, str)
        prefill = comp_name == "prefill"
        query = ins["input_ids"].shape[1]
        if mode == "dynamic" and not prefill:
            assert query == 1 and logits[:2] == [batch_dim, 1]
        else:
            assert isinstance(query, str)
        if prefill:
            assert list(ins) == ["input_ids", "attention_mask", "position_ids"]
            assert ins["attention_mask"].shape == [batch_dim, query]
        else:
            total = ins["attention_mask"].shape[1]
            assert isinstance(total, str)
            past = ins[want_pairs[0]["input"]].shape[2]
            assert isinstance(past, str) and past != total
            for p in want_pairs:
                assert ins[p["input"]].shape == [batch_dim, kv, past, head_dim]
        present_len = query if prefill else ins["attention_mask"].shape[1]
        for p in want_pairs:
            assert outs[p["output"]].shape == [batch_dim, kv, present_len, head_dim]
    return manifest


@pytest.mark.parametrize("mode", MODES)
def test_generation_contract(mode, tiny, tmp_path, export_model):
    tm = tiny("llama-gqa-tied-rope_llama3")
    out = export_model(tm.model_dir, tmp_path / "out", *mode_args(mode))
    check_generation_contract(out, mode, tm)
    if mode == "static":
        out2 = export_model(tm.model_dir, tmp_path / "out2", *mode_args(mode, batch=2))
        check_generation_contract(out2, mode, tm, batch=2)


# --------------------------------------------------------------------------------------------
# 1 + 2: greedy parity (every model_type x mode x runtime, one prompt and a left-padded batch of
# two): test_greedy_matches_transformers, over the backend descriptors (TARGETS) further down.
# ONNX's own contracts per profile:


@pytest.mark.parametrize("mode", MODES)
def test_profiles_choose_their_attention(mode, tiny, tmp_path, export_model):
    """ort keeps opset-23 Attention (faster on onnxruntime CPU); ort-gqa hands the dynamic cache
    to GroupQueryAttention; the static cache keeps Attention over the scattered buffer in both."""
    tm = tiny("llama-gqa-tied-rope_llama3")
    for profile in ("ort", "ort-gqa"):
        out = export_model(tm.model_dir, tmp_path / profile, *mode_args(mode, profile=profile))
        ops = {n.op_type for n in onnx.load(str(out / "decode.onnx"), load_external_data=False).graph.node}
        gqa = profile == "ort-gqa" and mode != "static"
        assert ("GroupQueryAttention" in ops) == gqa and ("Attention" in ops) != gqa, (profile, mode, ops)


def test_generation_defaults_to_ort_gqa_with_a_shared_cache(tiny, tmp_path, export_model):
    """Without --onnx-ops a generation export takes onnxruntime's decode kernels (GQA owning the
    cache, bound once as a shared buffer); a plain forward export stays standard ai.onnx."""
    tm = tiny("llama-gqa-tied-rope_llama3")
    out = export_model(tm.model_dir, tmp_path / "gen", "--for-generation")
    ops = {n.op_type for n in onnx.load(str(out / "decode.onnx"), load_external_data=False).graph.node}
    assert "GroupQueryAttention" in ops and "SkipSimplifiedLayerNormalization" in ops, ops
    assert json.loads((out / "export.json").read_text())["generation"]["past_present_share_buffer"] is True
    forward = export_model(tm.model_dir, tmp_path / "fwd")
    onnx.checker.check_model(str(forward / "model.onnx"), full_check=True)


@pytest.mark.parametrize("name, fused", [("llama-gqa-tied-rope_llama3", True), ("qwen3-mha-head_dim24-tied-rope_yarn", False),
                                         ("phi3-mqa-partial_rotary0.5-longrope_long-tied", False)])
def test_ort_gqa_applies_static_rope_itself(name, fused, tiny, tmp_path, export_model):
    """ort-gqa: GroupQueryAttention rotates q and k itself (do_rotary, cos/sin caches built in the
    graph over the key slots) for a static RoPE over whole heads of a multiple of 16 (its CPU
    kernel's rule); the manifest says the cache keys are rotated by slot. Other tables keep
    RotaryEmbedding. (test_greedy_matches_transformers checks both against transformers.)"""
    tm = tiny(name)
    out = export_model(tm.model_dir, tmp_path / "gen", "--for-generation")
    graph = onnx.load(str(out / "decode.onnx"), load_external_data=False).graph
    rotary = [next((a.i for a in n.attribute if a.name == "do_rotary"), 0) for n in graph.node
              if n.op_type == "GroupQueryAttention"]
    assert rotary and all(r == int(fused) for r in rotary), rotary
    assert ("RotaryEmbedding" in {n.op_type for n in graph.node}) != fused
    generation = json.loads((out / "export.json").read_text())["generation"]
    assert (generation.get("cache_key_positions") == "slots") == fused


def test_static_prefill_writes_distinct_slots(tiny, tmp_path, export_model):
    """Left padding: pad tokens are parked in the cache's last slots instead of sharing the first
    real token's slot 0 (duplicate ScatterElements indices are undefined in ONNX)."""
    tm = tiny("llama-gqa-tied-rope_llama3")
    out = export_model(tm.model_dir, tmp_path / "out", *mode_args("static", batch=2))
    runner = hfexport.open_runner(out, session_options=session_options())
    ids, mask = tm.prompts(BATCH)
    runner.prefill(ids, mask, 4)
    positions = hfexport.runner.park_padding(np.clip(mask.cumsum(-1) - 1, 0, None), mask, runner.cache_len)
    for row, m in zip(positions, mask):
        assert len(set(row.tolist())) == len(row), f"duplicate slots in {row.tolist()}"
        assert row[m == 1].tolist() == list(range(int(m.sum()))), "real tokens moved"
        assert (row[m == 0] >= runner.cache_len - (m == 0).sum()).all() and (row < runner.cache_len).all()


def test_static_cache_reused_across_runs(tiny, tmp_path, export_model):
    """Two generations on one static runner: still the same buffers in place, same results."""
    tm = tiny("qwen3-gqa-qk_norm-head_dim16")
    out = export_model(tm.model_dir, tmp_path / "out", *mode_args("static"))
    runner = hfexport.open_runner(out, session_options=session_options())
    pairs = runner.manifest.generation["cache_pairs"]
    for lengths in (SINGLE, (11,), SINGLE):
        ids, mask = tm.prompts(lengths)
        ref = tm.reference(lengths)
        logits: list = []
        tokens = hfexport.generate(runner, ids, mask, max_new_tokens=NEW_TOKENS, ignore_eos=True, step_logits=logits)
        compare(tokens, logits, ref, f"static rerun prompt {lengths}")
        check_cache_in_place(runner, pairs)
        check_static_cache_contents(runner, pairs, ref, mask)


# --------------------------------------------------------------------------------------------
# 3: a prompt longer than mistral's sliding window


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("mode", MODES)
def test_mistral_prompt_longer_than_sliding_window(mode, profile, tiny, tmp_path, export_model, support_matrix):
    tm = tiny("mistral-sw4-gqa", "mistral", dict(num_key_value_heads=2, sliding_window=4, **rope("default")))
    assert tm.model.config.sliding_window == 4

    def run() -> float:
        ids, mask = tm.prompts((10,))
        out = export_model(tm.model_dir, tmp_path / "out", *mode_args(mode, profile=profile))
        tokens, logits, _ = run_ours(out, ids, mask)
        return compare(tokens, logits, tm.reference((10,)), f"mistral window 4, prompt 10, {mode}, {profile}")

    suffix = "" if profile == "standard" else f" [{profile} ops]"
    record(support_matrix, "mistral", f"generate-{mode}-window4-prompt10{suffix}", run)


def test_sliding_window_changes_reference_generation(tiny):
    """Guard: the window really changes transformers' generation for that prompt, so the test
    above would catch an export that ignored it."""
    a = tiny("mistral-sw4-gqa", "mistral", dict(num_key_value_heads=2, sliding_window=4, **rope("default")))
    b = tiny("mistral-nosw-gqa", "mistral", dict(num_key_value_heads=2, sliding_window=None, **rope("default")))
    ra, rb = a.reference((10,)), b.reference((10,))
    assert np.abs(ra.logits[0] - rb.logits[0]).max() > 1e-3
    assert (ra.tokens != rb.tokens).any()


# --------------------------------------------------------------------------------------------
# 4: a decode loop written only against the static-cache interface (no hfexport runner)

_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64, "tensor(bool)": np.bool_}


def static_interface_greedy(onnx_path: Path, prompt: np.ndarray, n: int, cache_len: int):
    """Greedy decoding through any static-cache graph: returns tokens [batch, n], step logits."""
    sess = ort.InferenceSession(str(onnx_path), session_options(), providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in sess.get_inputs()}
    outputs = {o.name: o for o in sess.get_outputs()}
    batch, length = prompt.shape
    binding = sess.io_binding()
    buffers = {}
    for name, spec in inputs.items():
        if not name.startswith("input."):
            continue
        symbolic = [d for d in spec.shape if not isinstance(d, int)]
        assert len(symbolic) == 1, f"{name}: {spec.shape} should have one symbolic (cache) dim"
        shape = [d if isinstance(d, int) else cache_len for d in spec.shape]
        assert shape[0] == batch, f"{name}: graph batch {shape[0]}, prompt batch {batch}"
        buf = ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, _NP[spec.type]))
        out_name = "output." + name[len("input.") :]
        assert out_name in outputs and outputs[out_name].shape == spec.shape
        binding.bind_ortvalue_input(name, buf)
        binding.bind_ortvalue_output(out_name, buf)
        buffers[name] = buf
    assert buffers, "no input.* cache buffers in the graph"
    assert set(inputs) - set(buffers) == {"input_ids", "attention_mask", "position_ids"}
    vocab = outputs["logits"].shape[-1]
    ptrs = {name: b.data_ptr() for name, b in buffers.items()}

    def run(ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        slots = np.arange(cache_len)
        mask = slots[None, None, None, :] <= positions[:, None, :, None]  # [batch, 1, query, cache]
        binding.bind_cpu_input("input_ids", ids.astype(_NP[inputs["input_ids"].type]))
        binding.bind_cpu_input("position_ids", positions.astype(_NP[inputs["position_ids"].type]))
        binding.bind_cpu_input("attention_mask", mask.astype(_NP[inputs["attention_mask"].type]))
        logits = np.empty((batch, ids.shape[1], vocab), np.float32)
        binding.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))
        sess.run_with_iobinding(binding)
        for name, b in buffers.items():
            assert b.data_ptr() == ptrs[name]
        assert {v.data_ptr() for v in binding.get_outputs()} >= set(ptrs.values())
        return logits[:, -1].copy()

    step_logits = [run(prompt, np.tile(np.arange(length), (batch, 1)))]
    tokens = [step_logits[-1].argmax(-1)]
    for t in range(1, n):
        position = np.full((batch, 1), length + t - 1)
        step_logits.append(run(tokens[-1][:, None], position))
        tokens.append(step_logits[-1].argmax(-1))
    return np.stack(tokens, axis=1), step_logits, buffers


@pytest.mark.parametrize(
    "name,batch",
    [("llama-gqa-tied-rope_llama3", 1), ("mistral-mha-sliding_window4", 1), ("qwen2-gqa-qkv_bias-theta1e6", 2)],
)
def test_static_interface_generic_loop(name, batch, tiny, tmp_path, export_model):
    tm = tiny(name)
    lengths = (8,) * batch  # no padding: a generic loop over equal-length prompts
    ids, mask = tm.prompts(lengths)
    out = export_model(tm.model_dir, tmp_path / "out", *mode_args("static", batch=batch))
    manifest = json.loads((out / "export.json").read_text())
    cache_len = ids.shape[1] + NEW_TOKENS + 3  # any length in [prompt + new - 1, max_cache_len]
    assert cache_len <= manifest["generation"]["max_cache_len"]
    onnx_path = out / manifest["components"]["decode"]["file"]
    tokens, logits, _ = static_interface_greedy(onnx_path, ids, NEW_TOKENS, cache_len)
    compare(tokens, logits, tm.reference(lengths), f"{name} generic static loop batch {batch}")


# --------------------------------------------------------------------------------------------
# 5 + 6: the `hfexport generate` CLI


def cli_generate(run_hfexport, out: Path, ids, *args):
    proc = run_hfexport("generate", out, "--input-ids", ",".join(map(str, ids)), *args)
    assert proc.returncode == 0, f"hfexport generate exited {proc.returncode}\nstderr: {proc.stderr}"
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"stdout is not one line: {proc.stdout!r}"
    return [int(t) for t in lines[0].split(" ")]


@pytest.mark.parametrize("mode", MODES)
def test_cli_generate_greedy(mode, tiny, tmp_path, export_model, run_hfexport):
    tm = tiny("qwen2-gqa-qkv_bias-theta1e6")
    ids, mask = tm.prompts(SINGLE)
    out = export_model(tm.model_dir, tmp_path / "out", *mode_args(mode))
    got = cli_generate(run_hfexport, out, ids[0], "--max-new-tokens", NEW_TOKENS, "--ignore-eos")
    assert got == tm.reference(SINGLE).tokens[0].tolist()


@pytest.mark.parametrize("fmt", ["onnx", "openvino", "pt2"])
def test_cli_generate_stops_at_eos(fmt, tiny, tmp_path, export_model, run_hfexport):
    tm = tiny("qwen2-gqa-qkv_bias-theta1e6")
    ids, _ = tm.prompts(SINGLE)
    want = tm.reference(SINGLE).tokens[0].tolist()
    # eos := the token generated at step k, the first step >= 5 whose token was not generated before
    k = next(i for i in range(5, len(want)) if want[i] not in want[:i])
    eos = want[k]
    model_dir = tmp_path / "hf"
    shutil.copytree(tm.model_dir, model_dir)
    gc_path = model_dir / "generation_config.json"
    gc = json.loads(gc_path.read_text())
    gc["eos_token_id"] = eos
    gc_path.write_text(json.dumps(gc, indent=2))
    # the test's own premise: transformers stops there too
    ref = hf_generate(tm.model, ids, np.ones_like(ids), NEW_TOKENS, eos=eos)
    assert ref.tokens[0].tolist() == want[: k + 1]

    out = export_model(model_dir, tmp_path / "out", "--format", fmt, "--for-generation")
    assert json.loads((out / "export.json").read_text())["generation"]["eos_token_id"] == [eos]
    got = cli_generate(run_hfexport, out, ids[0], "--max-new-tokens", NEW_TOKENS)
    assert len(got) == k + 1 and got[-1] == eos, f"eos {eos} first generated at step {k}: got {got}"
    assert got == want[: k + 1]
    assert cli_generate(run_hfexport, out, ids[0], "--max-new-tokens", NEW_TOKENS, "--ignore-eos") == want

    # a list of eos ids: the earliest one generated ends it
    j = next(i for i in range(2, k) if want[i] not in want[:i])
    gc["eos_token_id"] = [eos, want[j]]
    gc_path.write_text(json.dumps(gc, indent=2))
    out2 = export_model(model_dir, tmp_path / "out2", "--format", fmt, "--for-generation")
    assert json.loads((out2 / "export.json").read_text())["generation"]["eos_token_id"] == [eos, want[j]]
    assert cli_generate(run_hfexport, out2, ids[0], "--max-new-tokens", NEW_TOKENS) == want[: j + 1]


STATS = r"hfexport: prefill (\d+) tokens in [\d.]+ ms; decode (\d+) steps in [\d.]+ s, [\d.]+ tok/s"


@pytest.mark.parametrize("fmt", ["onnx", "openvino", "executorch"])
def test_cli_generate_stats(fmt, tiny, tmp_path, export_model, run_hfexport):
    """--stats: one stderr line with the prompt's and the steps' times (the Python runner for
    ONNX, the C++ runners for OpenVINO and ExecuTorch), the tokens unchanged on stdout."""
    import re

    tm = tiny("qwen2-gqa-qkv_bias-theta1e6")
    ids, _ = tm.prompts(SINGLE)
    out = export_model(tm.model_dir, tmp_path / "out", "--format", fmt, "--for-generation")
    proc = run_hfexport("generate", out, "--input-ids", ",".join(map(str, ids[0])), "--max-new-tokens", NEW_TOKENS,
                        "--ignore-eos", "--stats")
    assert proc.returncode == 0, proc.stderr
    assert [int(t) for t in proc.stdout.split()] == tm.reference(SINGLE).tokens[0].tolist()
    lines = [l for l in proc.stderr.splitlines() if not l.startswith("hfexport: warning")]
    assert len(lines) == 1 and (m := re.fullmatch(STATS, lines[0])), proc.stderr
    assert (int(m[1]), int(m[2])) == (ids.shape[1], NEW_TOKENS - 1)


def test_cli_generate_sampling(tiny, tmp_path, export_model, run_hfexport):
    tm = tiny("llama-mqa-rope_yarn")
    ids, _ = tm.prompts(SINGLE)
    out = export_model(tm.model_dir, tmp_path / "out", "--for-generation")
    greedy = tm.reference(SINGLE).tokens[0].tolist()
    common = ("--max-new-tokens", 16, "--ignore-eos", "--do-sample", "--temperature", 2.0)
    a = cli_generate(run_hfexport, out, ids[0], *common, "--seed", 7)
    b = cli_generate(run_hfexport, out, ids[0], *common, "--seed", 7)
    c = cli_generate(run_hfexport, out, ids[0], *common, "--seed", 8)
    assert a == b, "same seed, different samples"
    assert len(a) == 16 and all(0 <= t < tm.vocab for t in a)
    assert a != c and a != greedy[:16], "sampling at temperature 2 looks greedy (seeds 7 and 8)"
    top1 = cli_generate(run_hfexport, out, ids[0], *common, "--seed", 7, "--top-k", 1)
    assert top1 == greedy[:16], "top_k=1 sampling differs from greedy"
    nucleus = cli_generate(run_hfexport, out, ids[0], "--max-new-tokens", 16, "--ignore-eos", "--do-sample",
                           "--top-p", 1e-6, "--seed", 3)
    assert nucleus == greedy[:16], "top_p ~ 0 sampling differs from greedy"


# --------------------------------------------------------------------------------------------
# 7: bad input


@pytest.fixture(scope="module")
def small_static(tiny, tmp_path_factory, export_model):
    """A static export with max_cache_len 8, batch 1."""
    tm = tiny("llama-mqa-rope_yarn")
    out = tmp_path_factory.mktemp("small_static") / "out"
    return export_model(tm.model_dir, out, *mode_args("static", max_cache_len=8))


def test_generate_prompt_longer_than_max_cache_len(small_static, run_hfexport):
    proc = run_hfexport("generate", small_static, "--input-ids", ",".join(["5"] * 10), "--max-new-tokens", 1)
    assert_clean_error(proc, None, "max_cache_len")


def test_generate_past_max_cache_len(small_static, run_hfexport):
    proc = run_hfexport("generate", small_static, "--input-ids", "5,6,7,8,9", "--max-new-tokens", 10, "--ignore-eos")
    assert_clean_error(proc, None, "max_cache_len")
    assert proc.stdout == ""


def test_generate_fills_static_cache_exactly(tiny, small_static, run_hfexport):
    """prompt + new tokens - 1 == max_cache_len fits: the last token is never fed back."""
    tm = tiny("llama-mqa-rope_yarn")
    ids = [5, 6, 7, 8, 9]
    want = hf_generate(tm.model, np.array([ids]), np.ones((1, 5), np.int64), 4).tokens[0].tolist()
    assert cli_generate(run_hfexport, small_static, ids, "--max-new-tokens", 4, "--ignore-eos") == want


def test_static_runner_refuses_steps_past_cache(small_static):
    runner = hfexport.open_runner(small_static)
    ids = np.array([[5, 6, 7, 8, 9]])
    runner.prefill(ids, np.ones_like(ids), 4)
    for _ in range(3):
        runner.step(np.array([4]))
    with pytest.raises(hfexport.GenerationError):
        runner.step(np.array([4]))


def test_static_batch_beyond_export(small_static):
    runner = hfexport.open_runner(small_static)
    ids = np.array([[5, 6, 7], [8, 9, 10]])
    with pytest.raises(hfexport.GenerationError, match="batch"):
        hfexport.generate(runner, ids, max_new_tokens=2)


def test_dynamic_prompt_beyond_sequence_bound(tiny, tmp_path, export_model, run_hfexport):
    tm = tiny("llama-mqa-rope_yarn")  # max_position_embeddings 64
    out = export_model(tm.model_dir, tmp_path / "out", "--for-generation")
    proc = run_hfexport("generate", out, "--input-ids", ",".join(["5"] * 40), "--max-new-tokens", 30)
    assert_clean_error(proc, None)


def test_generate_out_dir_not_an_export(tmp_path, run_hfexport):
    (tmp_path / "empty").mkdir()
    assert_clean_error(run_hfexport("generate", tmp_path / "empty", "--input-ids", "1,2,3"), None, "export")
    assert_clean_error(run_hfexport("generate", tmp_path / "missing", "--input-ids", "1,2,3"), None)


def test_generate_export_without_for_generation(tiny, tmp_path, export_model, run_hfexport):
    tm = tiny("llama-mqa-rope_yarn")
    out = export_model(tm.model_dir, tmp_path / "out")
    proc = run_hfexport("generate", out, "--input-ids", "1,2,3")
    assert_clean_error(proc, None, "--for-generation")
    with pytest.raises(hfexport.GenerationError):
        hfexport.open_runner(out)


@pytest.mark.parametrize(
    "args,mention",
    [
        (["--for-generation", "--static-cache"], "--max-cache-len"),
        (["--multi-token-decode"], "--for-generation"),
        (["--for-generation", "--batch-size", "2"], "--static-cache"),
        (["--static-cache", "--max-cache-len", "8"], "--for-generation"),
        (["--for-generation", "--max-cache-len", "8"], "--static-cache"),
        (["--for-generation", "--static-cache", "--max-cache-len", "0"], "--max-cache-len"),
        (["--for-generation", "--static-cache", "--max-cache-len", "8", "--batch-size", "0"], "--batch-size"),
    ],
    ids=["static_without_max_len", "multi_token_without_generation", "batch_size_without_static",
         "static_without_generation", "max_len_without_static", "max_len_zero", "batch_size_zero"],
)
def test_export_option_errors(args, mention, tiny, tmp_path, run_hfexport):
    tm = tiny("llama-mqa-rope_yarn")
    out = tmp_path / "exports" / "out"
    proc = run_hfexport("export", tm.model_dir, "-o", out, *args)
    assert_clean_error(proc, out, mention)


@pytest.mark.parametrize(
    "args,mention",
    [
        (["--input-ids", "1,x,3"], "--input-ids"),
        (["--input-ids", "1,2,999"], "--input-ids"),
        (["--input-ids", "1,-1"], "--input-ids"),
        (["--input-ids", ","], "--input-ids"),
        ([], "--input-ids"),
        (["--input-ids", "1,2", "--max-new-tokens", "0"], "max_new_tokens"),
        (["--input-ids", "1,2", "--max-new-tokens", "abc"], "--max-new-tokens"),
        (["--input-ids", "1,2", "--do-sample", "--temperature", "0"], "temperature"),
        (["--input-ids", "1,2", "--do-sample", "--top-p", "0"], "top_p"),
    ],
    ids=["not_integers", "beyond_vocab", "negative_id", "empty_ids", "no_ids", "zero_new_tokens",
         "new_tokens_not_int", "temperature_zero", "top_p_zero"],
)
def test_generate_option_errors(args, mention, tiny, tmp_path_factory, export_model, run_hfexport):
    tm = tiny("llama-mqa-rope_yarn")
    out = tmp_path_factory.mktemp("gen_opts") / "out"
    export_model(tm.model_dir, out, "--for-generation")
    proc = run_hfexport("generate", out, *args)
    assert_clean_error(proc, None, mention)
    assert proc.stdout == ""


# .pte cache modes: the static cache in the method's mutable buffers or the caller's (zero copy),
# and the dynamic cache, as prefill + decode methods or one multi-token `forward`.
ET_MODES = {"static": ["--static-cache", "--max-cache-len", str(MAX_CACHE_LEN)],
            "static-zero-copy": ["--static-cache", "--max-cache-len", str(MAX_CACHE_LEN), "--no-alloc-graph-io"],
            "dynamic": ["--dim", "batch=1:2"],
            "multi-token": ["--multi-token-decode", "--dim", "batch=1:2"]}
# The same cache modes with attention in hfexport's kernel library (hfexport::sdpa.out, reading
# the cache in place), which the runners load: float32 only (other dtypes keep the stock kernels).
HFX_KERNELS = "+hfexport-kernels"
ET_KERNEL_MODES = {m + HFX_KERNELS: [*ET_MODES[m], "--executorch-kernels", "hfexport"]
                   for m in ("static", "static-zero-copy", "dynamic")}
ET_ALL_MODES = {**ET_MODES, **ET_KERNEL_MODES}


def assert_attention_kernels(out: Path, layers: int) -> None:
    """Every layer's attention is one hfexport::sdpa.out call (attention with sinks, gpt-oss's,
    keeps the reference decomposition)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary((out / "model.pte").read_bytes()).program
    for plan in program.execution_plan:
        ops = [op.name for op in plan.operators]
        if not ops:
            continue  # a metadata method
        calls = [ops[ins.instr_args.op_index] for chain in plan.chains for ins in chain.instructions
                 if type(ins.instr_args).__name__ == "KernelCall"]
        assert calls.count("hfexport::sdpa") == layers, (plan.name, calls)


# layer_types entries of layers without a KV cache, and the states each keeps.
STATE_LAYERS = {"conv": 1, "linear_attention": 2, "mamba": 2}
HYBRID_LAYERS = {"hybrid": 4}  # attention and a Mamba mixer side by side (FalconH1): KV, conv and SSM state


def attention_layers(config) -> int:
    """Layers with a KV cache: all but a hybrid's convolution and Mamba layers."""
    return sum(t not in STATE_LAYERS for t in (getattr(config, "layer_types", None) or ["attention"] * config.num_hidden_layers))


def state_count(config) -> int:
    """The cache pairs an export carries: keys and values per attention layer, a convolution state per
    convolution layer, convolution and SSM states per Mamba layer."""
    types = getattr(config, "layer_types", None) or ["attention"] * config.num_hidden_layers
    return sum(STATE_LAYERS.get(t, HYBRID_LAYERS.get(t, 2)) for t in types)


def check_executorch_manifest(manifest: dict, mode: str, config) -> None:
    mode = mode.removesuffix(HFX_KERNELS)
    decode, generation = manifest["components"]["decode"], manifest["generation"]
    pairs = generation["cache_pairs"]
    assert len(pairs) == state_count(config)
    inputs = [i["name"] for i in decode["inputs"]]
    outputs = [o["name"] for o in decode["outputs"]]
    ids = ["input_ids", "attention_mask", "position_ids"]
    if mode == "static":
        assert inputs == ids and outputs == ["logits"] and generation["cache"] == "stateful"
    elif mode == "static-zero-copy":
        assert inputs == [*ids, *[p["input"] for p in pairs]]
        assert outputs == [*["returned." + p["name"] for p in pairs], "logits", *[p["output"] for p in pairs]]
        assert generation["cache"] == "static" and generation["past_present_share_buffer"]
    else:
        assert inputs == [*ids, *[p["input"] for p in pairs]] and outputs == ["logits", *[p["output"] for p in pairs]]
        assert generation["cache"] == "dynamic"
        assert set(manifest["components"]) == ({"decode"} if mode == "multi-token" else {"prefill", "decode"})


# --------------------------------------------------------------------------------------------
# Greedy parity through every runtime's runner, one test over backend descriptors: a Target says how
# its exports are made per cache mode, which prompts a mode serves, and what only that runtime
# asserts of an export and of a run. A new format adds a Target.


@dataclass(frozen=True)
class Target:
    """One runtime's greedy-parity rows (a backend descriptor)."""

    name: str  # the test id's first part
    backend: str  # the support matrix's format column
    modes: tuple[str, ...]
    export_args: Callable[[str, int], list[str]]  # (mode, batch) -> `hfexport export` arguments
    label: str = ""  # the support matrix's variant suffix (an ONNX profile, an ExecuTorch backend)
    requires: str | None = None  # the runtime's module: skipped where it is not installed
    # One export per prompt set's batch (a static cache is exported for its batch), else one for both.
    per_batch: Callable[[str], bool] = lambda mode: mode == "static"
    prompt_sets: Callable[[str], tuple] = lambda mode: (SINGLE, BATCH)
    variant: Callable[[str, str], str] = lambda mode, case: f"generate-{mode}-{case}"
    check_export: Callable[[Path, str, "TinyModel"], None] | None = None  # (out, mode, tm), once per export
    check_run: Callable[..., float] | None = None  # (runner, mode, tm, ref, mask) -> err, after each prompt set


def greedy_rows(target: Target, mode: str, name: str, tm: "TinyModel", tmp_path: Path, export_model) -> float:
    """Each prompt set through the target's export of `mode` (one runner per export, reused across
    requests), tokens and step logits against transformers'; returns the max step-logit error."""
    err = 0.0
    runners: dict = {}
    for lengths in target.prompt_sets(mode):
        ids, mask = tm.prompts(lengths)
        ref = tm.reference(lengths)
        out = tmp_path / f"out-b{len(lengths) if target.per_batch(mode) else 1}"
        if out not in runners:
            export_model(tm.model_dir, out, *target.export_args(mode, len(lengths)))
            if target.check_export is not None:
                target.check_export(out, mode, tm)
            options = {"session_options": session_options()} if target.backend == "onnx" else {}
            runners[out] = hfexport.open_runner(out, **options)
        runner = runners[out]
        logits: list = []
        tokens = hfexport.generate(runner, ids, mask, max_new_tokens=NEW_TOKENS, ignore_eos=True, step_logits=logits)
        err = max(err, compare(tokens, logits, ref, f"{name} {target.name} {mode} prompts {lengths}"))
        if target.check_run is not None:
            err = max(err, target.check_run(runner, mode, tm, ref, mask))
    return err


def _onnx_run_checks(profile: str) -> Callable[..., float]:
    def check(runner, mode: str, tm: "TinyModel", ref: "Reference", mask: np.ndarray) -> float:
        pairs = runner.manifest.generation["cache_pairs"]
        shares = runner.manifest.generation["past_present_share_buffer"]
        # GroupQueryAttention shares past and present (none to share without attention layers)
        gqa = profile == "ort-gqa" and mode != "static" and attention_layers(tm.model.config) > 0
        assert shares == gqa, (profile, mode, shares)
        err = check_shared_cache(runner, pairs, ref, mask) if shares else 0.0
        if mode == "static":
            check_cache_in_place(runner, pairs)
            err = max(err, check_static_cache_contents(runner, pairs, ref, mask))
        return err
    return check


def _pt2_args(mode: str, batch: int) -> list[str]:
    return ["--format", "pt2", *[a for a in mode_args(mode, batch=batch) if a not in ("--onnx-ops", "standard")]]


def _pt2_run_checks(runner, mode: str, tm: "TinyModel", ref: "Reference", mask: np.ndarray) -> float:
    """A static cache is written in place into the tensors the runner passes (no cache outputs):
    their contents are transformers' K/V after."""
    if mode != "static":
        return 0.0
    assert [o["name"] for o in runner.manifest.component("decode")["outputs"]] == ["logits"]
    return check_static_cache_contents(runner, runner.manifest.generation["cache_pairs"], ref, mask)


def _executorch_export_checks(out: Path, mode: str, tm: "TinyModel") -> None:
    """.pte generation in each cache mode. Static: written in place (index_put_) either as mutable
    buffers of its `forward` method, kept by the loaded method between calls (the runner passes
    only tokens, mask and positions), or (--no-alloc-graph-io) as the caller's: inputs [ids, mask,
    positions, cache x N], outputs [cache x N, logits, cache x N], nothing planned for them; a
    second request on the same method (stale rows past its prompt) matches too, batch 1. Dynamic:
    the past in, the present out (cat), left-padded batches of two included."""
    check_executorch_manifest(json.loads((out / "export.json").read_text()), mode, tm.model.config)
    if mode.endswith(HFX_KERNELS):
        sinks = tm.model_type == "gpt_oss"
        assert_attention_kernels(out, 0 if sinks else attention_layers(tm.model.config))


def _openvino_export_checks(out: Path, mode: str, tm: "TinyModel") -> None:
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["generation"]["cache"] == "stateful"
    assert [i["name"] for i in manifest["components"]["decode"]["inputs"]] == [
        "input_ids", "attention_mask", "position_ids", "beam_idx"]
    assert [o["name"] for o in manifest["components"]["decode"]["outputs"]] == ["logits"]


def _openvino_run_checks(runner, mode: str, tm: "TinyModel", ref: "Reference", mask: np.ndarray) -> float:
    """The runner slices the hidden states before the head (softcapped ones too): a prompt
    computes one row of logits."""
    runner.prefill(*tm.prompts(BATCH), 1)
    assert runner.session.request.get_tensor("logits").shape[:2] == (len(BATCH), 1), tm.model_type
    return 0.0


TARGETS = [
    *[Target(f"onnx-{profile}", "onnx", MODES, lambda mode, batch, p=profile: mode_args(mode, batch=batch, profile=p),
             label="" if profile == "standard" else f" [{profile} ops]", check_run=_onnx_run_checks(profile))
      for profile in PROFILES],
    Target("pt2", "pt2", MODES, _pt2_args, check_run=_pt2_run_checks),
    *[Target(f"executorch-{backend}", "executorch", tuple(ET_ALL_MODES),
             lambda mode, batch, b=backend: ["--format", "executorch", "--executorch-backend", b, "--for-generation",
                                             *ET_ALL_MODES[mode]],
             label=f" [{backend}]", requires="executorch", per_batch=lambda mode: False,
             prompt_sets=lambda mode: (SINGLE, (11,) if mode.startswith("static") else BATCH),
             check_export=_executorch_export_checks)
      for backend in ("portable", "xnnpack")],
    # One stateful model (the cache in ReadValue / Assign variables); float16 in the
    # reduced-precision tests.
    Target("openvino", "openvino", ("float32",),
           lambda mode, batch: ["--format", "openvino", "--for-generation", "--dtype", "float32"],
           requires="openvino", per_batch=lambda mode: False, variant=lambda mode, case: f"generate-float32-{case}",
           check_export=_openvino_export_checks, check_run=_openvino_run_checks),
]
GREEDY_ROWS = [(t, mode) for t in TARGETS for mode in t.modes]


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("target, mode", GREEDY_ROWS, ids=[f"{t.name}-{mode}" for t, mode in GREEDY_ROWS])
def test_greedy_matches_transformers(target, mode, name, tiny, tmp_path, export_model, support_matrix):
    if target.requires:
        pytest.importorskip(target.requires)
    tm = tiny(name)
    record(support_matrix, tm.model_type, target.variant(mode, name.split("-", 1)[1]) + target.label,
           lambda: greedy_rows(target, mode, name, tm, tmp_path, export_model), backend=target.backend)


# Reduced precision (weights, compute and cache in that type): float16 with XNNPACK's float16
# linears, bfloat16 on the kernels. Against transformers in float32, with the bound set by
# transformers itself: its own model cast to that dtype, run on the same tokens, is off the float32
# logits by some amount; ours may be off by at most HALF_MARGIN times that (plus a floor). Tokens
# are identical up to a near-tie of the float32 top-2 logits within that bound.
ET_HALF = {"float16": "xnnpack", "bfloat16": "portable"}
HALF_MARGIN, HALF_FLOOR = 2.0, 1e-2


def native_float16_cpu() -> bool:
    """A CPU with AVX512-FP16, where XNNPACK's float16 kernels compute (and accumulate) in float16
    itself, unlike transformers' CPU float16 (float32 accumulation): measured 2.4-3.4x its error
    on such a machine (Gemma 4.8x), with the same program within 2x on others."""
    try:
        return "avx512_fp16" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def half_margin(dtype: str) -> float:
    return 6.0 if dtype == "float16" and native_float16_cpu() else HALF_MARGIN


def transformers_own_error(model, ref: Reference, ids: np.ndarray, mask: np.ndarray, dtype: str) -> float:
    """transformers' max step-logit error in `dtype` against its float32 greedy run, on the float32
    run's tokens (one forward over prompt + tokens, the positions generate() gives them)."""
    import copy

    half = copy.deepcopy(model).to(getattr(torch, dtype))
    seq = np.concatenate([ids, ref.tokens], axis=1)
    full_mask = np.concatenate([mask, np.ones_like(ref.tokens)], axis=1)
    positions = np.clip(np.cumsum(full_mask, axis=1) - 1, 0, None)
    with torch.no_grad():
        logits = half(input_ids=torch.from_numpy(seq), attention_mask=torch.from_numpy(full_mask),
                      position_ids=torch.from_numpy(positions)).logits.float().numpy()
    start = ids.shape[1] - 1  # the logits that chose each new token
    return max(float(np.abs(logits[:, start + i] - ref.logits[i]).max()) for i in range(len(ref.logits)))


def routing_near_tie(model, ids: np.ndarray, mask: np.ndarray, tokens: np.ndarray, step: int, bound: float = 1e-2) -> bool:
    """Whether transformers' float32 run routed the token that produced step `step`'s logits by a
    margin under `bound` in some layer (the k-th and (k+1)-th experts' probabilities; its routers
    that return (logits, weights, indices)): half precision may take the other expert there, a
    discontinuity no logit tolerance covers."""
    routers = [m for m in model.modules() if type(m).__name__.endswith("TopKRouter")]
    if not routers:
        return False
    seq = np.concatenate([ids, tokens[:, :step]], axis=1)
    full = np.concatenate([mask, np.ones_like(tokens[:, :step])], axis=1)
    gaps = []

    def hook(module, inputs, output):
        top = torch.softmax(output[0].float(), dim=-1).topk(module.top_k + 1, dim=-1).values
        gaps.append((top[..., -2] - top[..., -1]).reshape(seq.shape[0], -1)[:, -1])

    handles = [r.register_forward_hook(hook) for r in routers]
    try:
        with torch.no_grad():
            model(input_ids=torch.from_numpy(seq), attention_mask=torch.from_numpy(full),
                  position_ids=torch.from_numpy(np.clip(np.cumsum(full, axis=1) - 1, 0, None)))
    finally:
        for h in handles:
            h.remove()
    return float(torch.stack(gaps).min()) < bound


def compare_half(tokens, logits, ref: Reference, what: str, tol: float, model, ids, mask) -> float:
    """compare() with reduced precision's allowances: logit near-ties within `tol`, and tokens
    that part where transformers' routing was a near-tie (everything before is compared)."""
    try:
        return compare(tokens, logits, ref, what, tol, ties_within_tol=True)
    except AssertionError:
        same = (tokens == ref.tokens).all(axis=0)
        first = int(np.argmin(same))
        if same.all() or first == 0 or not routing_near_tie(model, ids, mask, ref.tokens, first):
            raise
        return compare(tokens[:, :first], logits[:first], Reference(ref.tokens[:, :first], ref.logits[:first], []),
                       what + f" (up to a routing near-tie at step {first})", tol, ties_within_tol=True)


@pytest.mark.parametrize("mode", list(ET_MODES))
@pytest.mark.parametrize("dtype", list(ET_HALF))
@pytest.mark.parametrize("name", _FIRST_OF_TYPE)
def test_executorch_half_precision_generation(name, dtype, mode, tiny, tmp_path, export_model, support_matrix):
    pytest.importorskip("executorch")
    tm = tiny(name)
    backend = ET_HALF[dtype]

    def run() -> float:
        out = export_model(tm.model_dir, tmp_path / "out", "--format", "executorch", "--executorch-backend", backend,
                           "--dtype", dtype, "--for-generation", *ET_MODES[mode])
        manifest = json.loads((out / "export.json").read_text())
        assert manifest["dtype"] == dtype
        outputs = manifest["components"]["decode"]["outputs"]
        # KV and convolution state in the model dtype; a Mamba layer's SSM state in float32, as transformers keeps it.
        assert {o["dtype"] for o in outputs if o["name"] != "logits" and "_ssm." not in o["name"]} <= {dtype}
        assert {o["dtype"] for o in outputs if "_ssm." in o["name"]} <= {"float32"}
        runner = hfexport.open_runner(out)
        err = 0.0
        for lengths in (SINGLE, (11,) if mode.startswith("static") else BATCH):
            ids, mask = tm.prompts(lengths)
            ref = tm.reference(lengths)
            tol = half_margin(dtype) * transformers_own_error(tm.model, ref, ids, mask, dtype) + HALF_FLOOR
            logits: list = []
            tokens = hfexport.generate(runner, ids, mask, max_new_tokens=NEW_TOKENS, ignore_eos=True,
                                       step_logits=logits)
            got = compare_half(tokens, logits, ref, f"{name} executorch {dtype} {mode} {lengths}", tol, tm.model, ids, mask)
            err = max(err, got)
        return err

    record(support_matrix, tm.model_type, f"generate-{dtype}-{mode}-{name.split('-', 1)[1]} [{backend}]", run,
           backend="executorch")


def test_pt2_aot_package_gives_the_same_tokens(tiny, tmp_path, export_model):
    """--aot compiles the decode program with AOTInductor (C++ from g++, weights inside); the
    runner loads that package, which still writes the static cache in place, token for token."""
    tm = tiny("llama-gqa-tied-rope_llama3")
    out = export_model(tm.model_dir, tmp_path / "out", "--format", "pt2", "--aot",
                       *[a for a in mode_args("static", batch=2) if a not in ("--onnx-ops", "standard")])
    decode = json.loads((out / "export.json").read_text())["components"]["decode"]
    assert decode["aoti"] == "decode.aoti.pt2" and (out / "decode.aoti.pt2").is_file()
    runner = hfexport.open_runner(out)
    assert type(runner.decode).__name__ == "AOTICompiledModel"
    ids, mask = tm.prompts(BATCH)
    logits: list = []
    tokens = hfexport.generate(runner, ids, mask, max_new_tokens=NEW_TOKENS, ignore_eos=True, step_logits=logits)
    compare(tokens, logits, tm.reference(BATCH), "pt2 static, AOTInductor")
    check_static_cache_contents(runner, runner.manifest.generation["cache_pairs"], tm.reference(BATCH), mask)


@pytest.mark.parametrize("name", _FIRST_OF_TYPE)
def test_openvino_half_precision_generation(name, tiny, tmp_path, export_model, support_matrix):
    """float16 on the first generation case of each model type (float32: test_greedy_matches_transformers).
    float16 stores the weights rounded to fp16: the reference is the same model with its weights
    rounded the same way. OpenVINO's CPU plugin multiplies with the compressed weights directly
    (its own accumulation order), so step logits get a looser bound; tokens must still match."""
    pytest.importorskip("openvino")
    import copy

    tm = tiny(name)
    dtype = "float16"
    out = export_model(tm.model_dir, tmp_path / "out", "--format", "openvino", "--for-generation", "--dtype", dtype)
    _openvino_export_checks(out, dtype, tm)
    reference_model = copy.deepcopy(tm.model).half().float()

    def run() -> float:
        err = 0.0
        for lengths in (SINGLE, BATCH):
            ids, mask = tm.prompts(lengths)
            ref = hf_generate(reference_model, ids, mask)
            tokens, logits, runner = run_ours(out, ids, mask)
            # 1e-2, or transformers' own float16 error where larger (muP multipliers scale logits)
            tol = max(1e-2, transformers_own_error(tm.model, tm.reference(lengths), ids, mask, dtype))
            what = f"{name} openvino {dtype} prompts {lengths}"
            err = max(err, compare_half(tokens, logits, ref, what, tol, tm.model, ids, mask))
        return err

    record(support_matrix, tm.model_type, f"generate-{dtype}-{name.split('-', 1)[1]}", run, backend="openvino")
    _openvino_run_checks(hfexport.open_runner(out), dtype, tm, None, None)


def test_openvino_cpu_plugin_fuses_attention_rmsnorm_and_rope(tiny, tmp_path, export_model):
    """The stateful export carries the patterns OpenVINO's CPU plugin fuses: the cache concat
    feeding ScaledDotProductAttention (stateful SDPA), RMSNorm and RoPE."""
    pytest.importorskip("openvino")
    tm = tiny("qwen3-gqa-qk_norm-head_dim16")
    out = export_model(tm.model_dir, tmp_path / "out", "--format", "openvino", "--for-generation")
    runner = hfexport.open_runner(out)
    types = {op.get_rt_info()["layerType"].astype(str) for op in runner.session.compiled.get_runtime_model().get_ops()}
    assert "ScaledDotProductAttention" in types, sorted(types)
    assert "RMS" in types, sorted(types)
    assert "RoPE" in types, sorted(types)
    # the fused graph still generates what transformers does
    ids, mask = tm.prompts(BATCH)
    tokens, logits, _ = run_ours(out, ids, mask)
    compare(tokens, logits, tm.reference(BATCH), "openvino fused")


def test_openvino_cli_generate_runs_the_cpp_runner(tiny, tmp_path, export_model, hfexport_bin):
    """OpenVINO exports are generated by hfexport-openvino-generate (C++, OpenVINO's SDK from the
    wheel): with no usable Python at all the CLI still generates what transformers does, stops at
    eos, and reports bad requests in one line."""
    native = hfexport_bin.parent / "hfexport-openvino-generate"
    assert native.is_file(), f"{native} was not built (OpenVINO's CMake config not found at build time?)"
    tm = tiny("qwen2-gqa-qkv_bias-theta1e6")
    ids, _ = tm.prompts(SINGLE)
    want = tm.reference(SINGLE).tokens[0].tolist()
    out = export_model(tm.model_dir, tmp_path / "out", "--format", "openvino", "--for-generation")
    env = dict(os.environ, HFEXPORT_PYTHON="/nonexistent/python")  # the Python runner cannot be what ran

    def generate(*args):
        return subprocess.run([str(hfexport_bin), "generate", str(out), "--input-ids", ",".join(map(str, ids[0])),
                               *map(str, args)], capture_output=True, text=True, env=env, timeout=120)

    proc = generate("--max-new-tokens", NEW_TOKENS, "--ignore-eos")
    assert proc.returncode == 0, proc.stderr
    assert [int(t) for t in proc.stdout.split()] == want

    sampled = [generate("--max-new-tokens", 8, "--do-sample", "--seed", 5, "--top-k", 4).stdout for _ in range(2)]
    assert sampled[0] == sampled[1] and len(sampled[0].split()) == 8
    assert generate("--max-new-tokens", 8, "--do-sample", "--top-k", 1).stdout.split() == list(map(str, want[:8]))

    bad = generate("--max-new-tokens", 100000)
    assert_clean_error(bad, None, "exceeds")


@pytest.mark.parametrize("mode", list(ET_ALL_MODES))
def test_executorch_cli_generate_runs_the_cpp_runner(mode, tiny, tmp_path, export_model, hfexport_bin):
    """.pte exports are generated by hfexport-executorch-generate (C++ over the executorch wheel's
    torch-free runtime; a static cache kept in the method's planned memory, or with
    --no-alloc-graph-io in the runner's buffers bound as cache inputs and outputs; a dynamic one
    passed back each step): with no usable Python the CLI still generates what transformers does,
    and reports a request past the cache (or the sequence bound) in one line."""
    pytest.importorskip("executorch")
    native = hfexport_bin.parent / "hfexport-executorch-generate"
    assert native.is_file(), f"{native} was not built (the executorch wheel's CMake config not found at build time?)"
    tm = tiny("qwen2-gqa-qkv_bias-theta1e6")
    ids, _ = tm.prompts(SINGLE)
    want = tm.reference(SINGLE).tokens[0].tolist()
    out = export_model(tm.model_dir, tmp_path / "out", "--format", "executorch", "--for-generation",
                       *ET_ALL_MODES[mode])
    env = dict(os.environ, HFEXPORT_PYTHON="/nonexistent/python")  # the Python runner cannot be what ran

    def generate(*args):
        return subprocess.run([str(hfexport_bin), "generate", str(out), "--input-ids", ",".join(map(str, ids[0])),
                               *map(str, args)], capture_output=True, text=True, env=env, timeout=120)

    proc = generate("--max-new-tokens", NEW_TOKENS, "--ignore-eos")
    assert proc.returncode == 0, proc.stderr
    assert [int(t) for t in proc.stdout.split()] == want
    too_many = 1000
    assert_clean_error(generate("--max-new-tokens", too_many), None, "exceeds",
                       "max_cache_len" if mode.startswith("static") else "bound")
    # A truncated program: one line, the runtime's own words included (its logs are not passed on).
    with open(out / "model.pte", "r+b") as f:
        f.truncate(4096)
    assert_clean_error(generate("--max-new-tokens", 2), None, "model.pte", "ExecuTorch error", "too small")


@pytest.mark.parametrize("mode", ["static", "static-zero-copy", "dynamic", "multi-token"])
@pytest.mark.parametrize("dtype", list(ET_HALF))
def test_executorch_cli_generate_half_precision(dtype, mode, tiny, tmp_path, export_model, hfexport_bin):
    """The C++ runner keeps float16 / bfloat16 caches in their own type (passed back as the past, or
    in place): greedy tokens as transformers' float32 ones on a prompt with no near-tie."""
    pytest.importorskip("executorch")
    tm = tiny("qwen2-gqa-qkv_bias-theta1e6")
    ids, _ = tm.prompts(SINGLE)
    out = export_model(tm.model_dir, tmp_path / "out", "--format", "executorch", "--executorch-backend",
                       ET_HALF[dtype], "--dtype", dtype, "--for-generation", *ET_MODES[mode])
    proc = subprocess.run([str(hfexport_bin), "generate", str(out), "--input-ids", ",".join(map(str, ids[0])),
                           "--max-new-tokens", str(NEW_TOKENS), "--ignore-eos"], capture_output=True, text=True,
                          env=dict(os.environ, HFEXPORT_PYTHON="/nonexistent/python"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [int(t) for t in proc.stdout.split()] == tm.reference(SINGLE).tokens[0].tolist()


@pytest.fixture(scope="module")
def documented_loop(tmp_path_factory) -> Path:
    """tests/executorch_loop built as a user would build it: CMake against the executorch wheel's
    SDK (its CMake config, headers and shared libraries), nothing of hfexport's."""
    spec = importlib.util.find_spec("executorch")
    if spec is None:
        pytest.skip("executorch is not installed")
    sdk = Path(spec.submodule_search_locations[0]) / "share" / "cmake"
    build = tmp_path_factory.mktemp("documented_loop")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    for cmd in (["cmake", "-S", str(Path(__file__).parents[1] / "executorch_loop"), "-B", str(build), *generator,
                 f"-DCMAKE_PREFIX_PATH={sdk}"], ["cmake", "--build", str(build)]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return build / "documented_decode_loop"


# The documented loop never reruns the sequence, which transformers does where Phi-3's longrope
# switches to its long factors (hfexport's runners do it at the manifest's rebuild_cache_at_length).
@pytest.mark.parametrize("backend", ["portable", "xnnpack"])
# It also checks that each call writes only its own slots: a KV cache's; a convolution state (LFM2's
# conv layers) is replaced whole each call, which the documented loop does not know.
@pytest.mark.parametrize("name", [n for n in CONFIGS if "longrope_switch" not in n and CONFIGS[n][0] not in CONV_STATE_TYPES])
def test_executorch_documented_cpp_loop_zero_copy(name, backend, documented_loop, tiny, tmp_path, export_model):
    """The ExecuTorch C++ decode loop transformers.exporters documents (tests/executorch_loop:
    FileDataLoader, Program::load, planned arenas from method_meta, set_input for every input,
    set_output_data_ptr binding mutated cache output N + 1 + i onto cache buffer i and the logits
    onto a host buffer) runs a --no-alloc-graph-io export token for token with transformers. After
    every call it asserts that the cache was written in place: the outputs are the host's buffers,
    this call's slots changed, earlier slots are byte-identical and later ones still zero."""
    tm = tiny(name)
    ids, _ = tm.prompts(SINGLE)
    out = export_model(tm.model_dir, tmp_path / "out", "--format", "executorch", "--executorch-backend", backend,
                       "--for-generation", "--static-cache", "--max-cache-len", str(MAX_CACHE_LEN),
                       "--no-alloc-graph-io")
    proc = subprocess.run([str(documented_loop), str(out / "model.pte"), ",".join(map(str, ids[0])),
                           str(NEW_TOKENS)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [int(t) for t in proc.stdout.split()] == tm.reference(SINGLE).tokens[0].tolist()


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_cli_generate_rebuilds_the_cache_where_longrope_switches(fmt, tiny, tmp_path, export_model, hfexport_bin):
    """Phi-3 longrope: positions past original_max_position_embeddings switch to the long factors
    and transformers' generate reruns the whole sequence there; the CLI's loops (the C++ one for
    OpenVINO, the Python one for ONNX) do the same and generate the same tokens."""
    tm = tiny("phi3-gqa-longrope_switch_during_generation")
    ids, _ = tm.prompts(SINGLE)
    want = tm.reference(SINGLE).tokens[0].tolist()
    out = export_model(tm.model_dir, tmp_path / "out", "--format", fmt, "--for-generation")
    assert json.loads((out / "export.json").read_text())["generation"]["rebuild_cache_at_length"] == 17
    assert SINGLE[0] < 17 < SINGLE[0] + NEW_TOKENS  # the generation crosses it
    proc = subprocess.run([str(hfexport_bin), "generate", str(out), "--input-ids", ",".join(map(str, ids[0])),
                           "--max-new-tokens", str(NEW_TOKENS), "--ignore-eos"],
                          capture_output=True, text=True, env=cli_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [int(t) for t in proc.stdout.split()] == want


# --------------------------------------------------------------------------------------------
# convolution state at the edges: a one-token prompt (shorter than the kernel's history) and a
# second request on the same runner (the state must start from zeros again)


CONV_CASES = [n for n, (t, _) in CONFIGS.items() if t in CONV_STATE_TYPES]
CONV_FORMATS = {"onnx": [], "openvino": [], "pt2": ["--multi-token-decode"],
                "executorch": ["--static-cache", "--max-cache-len", str(MAX_CACHE_LEN)]}


@pytest.mark.parametrize("fmt", list(CONV_FORMATS))
@pytest.mark.parametrize("name", CONV_CASES)
def test_convolution_state_one_token_prompt_and_second_request(name, fmt, tiny, tmp_path, export_model):
    if fmt == "executorch":
        pytest.importorskip("executorch")
    tm = tiny(name)
    out = export_model(tm.model_dir, tmp_path / "out", "--format", fmt, "--for-generation", *CONV_FORMATS[fmt])
    runner = hfexport.open_runner(out)
    for lengths in ((1,), SINGLE, (1,)):  # the last one after a longer request on the same runner
        ids, mask = tm.prompts(lengths)
        logits: list = []
        tokens = hfexport.generate(runner, ids, mask, max_new_tokens=8, ignore_eos=True, step_logits=logits)
        compare(tokens, logits, tm.reference(lengths, 8), f"{name} {fmt} prompt of {lengths[0]}")


CPP_RUNNER_MODES = {"executorch-static": ("executorch", ["--static-cache", "--max-cache-len", str(MAX_CACHE_LEN)]),
                    "executorch-default": ("executorch", []),
                    "executorch-multi-token": ("executorch", ["--multi-token-decode"]),
                    "openvino": ("openvino", [])}


@pytest.mark.parametrize("mode", list(CPP_RUNNER_MODES))
@pytest.mark.parametrize("name", [n for n in _FIRST_OF_TYPE if CONFIGS[n][0] in CONV_STATE_TYPES])
def test_convolution_state_in_the_cpp_runners(name, mode, tiny, tmp_path, export_model, hfexport_bin):
    """hfexport-executorch-generate and hfexport-openvino-generate (C++, no Python) on each model
    type with convolution (and recurrent) state: in the .pte method beside a static cache, passed in
    and out with a dynamic one, or in OpenVINO's variables (batch 1). A recurrent state is 4-D like a
    KV cache: the manifest's policy tells the runner it is replaced, not grown."""
    fmt, args = CPP_RUNNER_MODES[mode]
    if fmt == "executorch":
        pytest.importorskip("executorch")
    tm = tiny(name)
    out = export_model(tm.model_dir, tmp_path / "out", "--format", fmt, "--for-generation", *args)
    ids, _ = tm.prompts(SINGLE)
    env = dict(os.environ, HFEXPORT_PYTHON="/nonexistent/python")  # the Python runner cannot be what ran
    proc = subprocess.run([str(hfexport_bin), "generate", str(out), "--input-ids", ",".join(map(str, ids[0])),
                           "--max-new-tokens", str(NEW_TOKENS), "--ignore-eos"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [int(t) for t in proc.stdout.split()] == tm.reference(SINGLE).tokens[0].tolist()


# --------------------------------------------------------------------------------------------
# the gated delta rule over long calls: transformers solves it in chunks of 64 tokens, we in one
# call-long UT transform whose triangular solve doubles up to the longest call


@pytest.mark.parametrize("mode", ["openvino", "executorch-static", "executorch-multi-token"])
def test_cpp_runners_feed_a_long_prompt_in_chunks(mode, tmp_path, export_model, hfexport_bin):
    """hfexport generate's C++ runners feed a 150-token prompt in calls of the manifest's
    prefill_chunk (64, 64, 22) over the step graph and its state: transformers' greedy tokens."""
    fmt = mode.split("-")[0]
    if fmt == "executorch":
        pytest.importorskip("executorch")
    from tiny_configs import case

    c = case("qwen3_5_text-gqa-khead2-vhead4-conv4-rope_half")
    model_dir, model = build_tiny_model(tmp_path / "hf", c.model_type, {**c.config, "max_position_embeddings": 192})
    ids, mask = make_prompts(model.config.vocab_size, (150,))
    args = {"openvino": [], "executorch-static": ["--static-cache", "--max-cache-len", "192"],
            "executorch-multi-token": ["--multi-token-decode", "--dim", "total_sequence=1:192"]}[mode]
    out = export_model(model_dir, tmp_path / "out", "--format", fmt, "--for-generation", *args)
    env = dict(os.environ, HFEXPORT_PYTHON="/nonexistent/python")  # the Python runner cannot be what ran
    proc = subprocess.run([str(hfexport_bin), "generate", str(out), "--input-ids", ",".join(map(str, ids[0])),
                           "--max-new-tokens", "8", "--ignore-eos"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [int(t) for t in proc.stdout.split()] == hf_generate(model, ids, mask, 8).tokens[0].tolist()


LONG_PROMPT_FORMATS = {**CONV_FORMATS, "onnx-standard": ["--onnx-ops", "standard", "--multi-token-decode"],
                       "onnx-static": ["--static-cache", "--max-cache-len", "192", "--batch-size", "2"],
                       "pt2-static": ["--static-cache", "--max-cache-len", "192", "--batch-size", "2"]}


@pytest.mark.parametrize("variant", list(LONG_PROMPT_FORMATS))
def test_gated_delta_rule_prompt_longer_than_transformers_chunks(variant, tmp_path, export_model):
    """A left-padded batch whose longest prompt spans three of transformers' chunks: the same step
    logits and greedy tokens, so the state after prefill is the one transformers carries on with.
    The runner feeds the prompt in calls of the manifest's prefill_chunk (the one-call solve costs
    more than linearly in the call's length): the first with every padding column, then the rest.
    GroupQueryAttention (onnx's default) takes several tokens over a past at batch 1 only: there a
    padded batch goes in one call."""
    fmt = variant.split("-")[0]
    if fmt == "executorch":
        pytest.importorskip("executorch")
    from tiny_configs import case

    c = case("qwen3_5_text-gqa-khead2-vhead4-conv4-rope_half")
    model_dir, model = build_tiny_model(tmp_path / "hf", c.model_type, {**c.config, "max_position_embeddings": 192})
    # (The .pte's in-place cache serves one sequence.)
    ids, mask = make_prompts(model.config.vocab_size, (150,) if fmt == "executorch" else (150, 97))
    args = ["--static-cache", "--max-cache-len", "192"] if fmt == "executorch" else LONG_PROMPT_FORMATS[variant]
    out = export_model(model_dir, tmp_path / "out", "--format", fmt, "--for-generation", *args)
    manifest = json.loads((out / "export.json").read_text())["generation"]
    assert manifest["prefill_chunk"] == 64 and manifest["multi_token_decode"]
    runner = hfexport.open_runner(out, **({"session_options": session_options()} if fmt == "onnx" else {}))
    calls: list[int] = []  # each call's query length
    prefill, step = runner.prefill, runner.step
    runner.prefill = lambda i, m, n: calls.append(i.shape[1]) or prefill(i, m, n)
    runner.step = lambda t: calls.append(1 if np.ndim(t) == 1 else np.shape(t)[1]) or step(t)
    logits: list = []
    tokens = hfexport.generate(runner, ids, mask, max_new_tokens=8, ignore_eos=True, step_logits=logits)
    first = 150 if variant == "onnx" else 150 - int(mask.sum(1).min()) + 64  # the longest padding and a chunk
    assert calls == [first] + [min(64, 150 - s) for s in range(first, 150, 64)] + [1] * 7
    assert runner.steps_take_several_tokens(len(ids)) == (variant != "onnx")
    compare(tokens, logits, hf_generate(model, ids, mask, 8), f"qwen3_5_text {fmt} prompt of 150")
