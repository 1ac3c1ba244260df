"""The export contract (ExportConfig) through the CLI: `--config FILE` round trip, flags over the
file, named dims with bounds (`--dim NAME=MIN:MAX`, fixed sizes make static graphs that still
match transformers), `dynamic: false`, backend-specific options, capability errors, and weights
stored once across a generation export's components."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import assert_clean_error
from test_onnx_parity import FP32_TOL, hf_logits, make_inputs, masked_max_abs_diff, ort_logits
from tiny_configs import case

ov = pytest.importorskip("openvino")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, make_tiny_model):
    c = case("qwen2-gqa-qkv_bias-theta1e6")
    return make_tiny_model(tmp_path_factory.mktemp("config") / "hf", c.model_type, c.config)


def digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}


def manifest(d: Path) -> dict:
    return json.loads((d / "export.json").read_text())


@pytest.mark.parametrize(
    "args",
    [
        ["--for-generation", "--onnx-ops", "ort", "--quantize", "int4", "--quantize-compute", "float"],
        ["--for-generation", "--static-cache", "--max-cache-len", "32", "--batch-size", "2", "--dim", "cache=1:24"],
        ["--format", "openvino", "--dtype", "float16", "--for-generation"],
        ["--dim", "batch=1:4", "--dim", "sequence=2:16"],
    ],
    ids=["onnx-int4-dynamic", "onnx-static", "openvino-fp16", "dims"],
)
def test_config_file_round_trip(args, tiny, tmp_path, export_model):
    """export.json records the config; exporting with it as --config rebuilds the same files."""
    model_dir, _ = tiny
    first = export_model(model_dir, tmp_path / "first", *args)
    recorded = manifest(first)["export_config"]
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(recorded))
    second = export_model(model_dir, tmp_path / "second", "--config", cfg)
    assert manifest(second)["export_config"] == recorded
    assert digest(second) == digest(first)


def test_flags_override_config_file(tiny, tmp_path, export_model):
    model_dir, _ = tiny
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"export_format": "openvino", "generation": {"multi_token_decode": True}}))
    out = export_model(model_dir, tmp_path / "out", "--config", cfg, "--format", "onnx")
    m = manifest(out)
    assert m["format"] == "onnx"
    assert m["generation"]["components"] == ["decode"] and m["generation"]["multi_token_decode"]


def test_dim_bounds_reach_the_graph(tiny, tmp_path, export_model):
    model_dir, _ = tiny
    out = export_model(model_dir, tmp_path / "out", "--dim", "batch=1:4", "--dim", "sequence=2:16")
    assert manifest(out)["dims"] == {"batch": {"min": 1, "max": 4}, "sequence": {"min": 2, "max": 16}}


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_fixed_dims_make_a_static_graph_that_matches_transformers(fmt, tiny, tmp_path, export_model):
    """--dim NAME=SIZE fixes a dim (with `dynamic: false` every dim must be fixed): the graph's
    inputs have static shapes, and the logits still match transformers on a left-padded batch."""
    model_dir, model = tiny
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"format": fmt, "dynamic": False, "dims": {"batch": {"min": 3, "max": 3}}}))
    out = export_model(model_dir, tmp_path / "out", "--config", cfg, "--dim", "sequence=12")
    m = manifest(out)
    assert m["dims"] == {}
    assert m["components"]["model"]["inputs"][0]["shape"] == [3, 12]
    inputs = make_inputs(model.config.vocab_size)  # three prompts, left-padded to 12
    if fmt == "onnx":
        graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
        assert [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim] == [3, 12]
        got = ort_logits(out / "model.onnx", inputs)
    else:
        compiled = ov.Core().compile_model(str(out / "openvino_model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        assert compiled.input("input_ids").get_partial_shape().is_static
        ids, mask, pos = inputs
        got = compiled({"input_ids": ids, "attention_mask": mask, "position_ids": pos})["logits"]
    assert masked_max_abs_diff(got, hf_logits(model, inputs), inputs[1]) <= FP32_TOL


@pytest.mark.parametrize(
    "args,config,mentions",
    [
        ([], {"dynamic": False}, ["dynamic", "batch"]),
        (["--dim", "batch=1:4", "--dim", "seqence=1:8"], None, ["--dim", "'seqence'", "sequence"]),
        (["--dim", "batch=4:2"], None, ["--dim", "batch"]),
        (["--dim", "batch"], None, ["--dim", "NAME=MIN:MAX"]),
        (["--dim", "batch=a:b"], None, ["--dim"]),
        (["--dtype", "bfloat16"], None, ["--dtype", "bfloat16", "onnx"]),
        (["--format", "openvino", "--for-generation", "--static-cache", "--max-cache-len", "16"], None,
         ["--static-cache", "openvino", "stateful"]),
        ([], {"dynamc": True}, ["config.json", "unknown key 'dynamc'"]),
        ([], {"generation": {"max_cache_len": "8"}}, ["config.json", "max_cache_len", "integer"]),
        ([], {"backend": {"opset": 17}}, ["unknown ONNX option 'opset'"]),
        ([], {"format": "openvino", "backend": {"op_profile": "ort"}}, ["unknown OpenVINO option 'op_profile'"]),
        ([], {"backend": {"op_profile": "fast"}}, ["--onnx-ops", "op_profile", "'fast'"]),
        ([], {"generation": {"cache_implementation": "offloaded"}}, ["'offloaded'", "cache implementation"]),
    ],
    ids=["not_dynamic_free_dim", "unknown_dim", "dim_min_over_max", "dim_no_range", "dim_not_numbers",
         "onnx_bf16", "openvino_static_cache", "config_unknown_key", "config_wrong_type",
         "onnx_unknown_option", "openvino_backend_option", "bad_profile_in_config", "bad_cache"],
)
def test_config_errors(args, config, mentions, tiny, tmp_path, run_hfexport):
    model_dir, _ = tiny
    out = tmp_path / "exports" / "out"
    extra = list(args)
    if config is not None:
        cfg = tmp_path / "config.json"
        cfg.write_text(json.dumps(config))
        extra += ["--config", cfg]
    assert_clean_error(run_hfexport("export", model_dir, "-o", out, *extra), out, *mentions)


def test_config_file_not_json(tiny, tmp_path, run_hfexport):
    model_dir, _ = tiny
    cfg = tmp_path / "config.json"
    cfg.write_text("{ nope")
    out = tmp_path / "exports" / "out"
    assert_clean_error(run_hfexport("export", model_dir, "-o", out, "--config", cfg), out, "config.json")


def total_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir() if p.is_file())


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_generation_export_stores_each_weight_once(fmt, tmp_path, make_tiny_model, export_model):
    """A --for-generation export with two components (ONNX standard ops: prefill + decode) writes
    each weight once: its bytes stay within 5% of the plain export's, and both ONNX components read
    one data file. (The ort-gqa default is one decode graph.)"""
    c = case("llama-gqa-rope_default")
    model_dir, _ = make_tiny_model(tmp_path / "hf", c.model_type, {**c.config, "hidden_size": 256,
                                                                    "intermediate_size": 512})
    plain = export_model(model_dir, tmp_path / "plain", "--format", fmt)
    ops = ["--onnx-ops", "standard"] if fmt == "onnx" else []
    gen = export_model(model_dir, tmp_path / "gen", "--format", fmt, "--for-generation", *ops)
    assert total_bytes(gen) <= 1.05 * total_bytes(plain), (total_bytes(gen), total_bytes(plain))
    if fmt == "onnx":
        comps = manifest(gen)["components"]
        assert comps["prefill"]["data_files"] == comps["decode"]["data_files"] == ["model.onnx.data"]
        for name in ("prefill", "decode"):
            locations = {e.value for t in onnx.load(str(gen / f"{name}.onnx"), load_external_data=False).graph.initializer
                         for e in t.external_data if e.key == "location"}
            assert locations == {"model.onnx.data"}


def test_onnx_runner_holds_the_shared_weights_once(tmp_path, make_tiny_model, export_model):
    """The runner hands prefill and decode one set of weight buffers (every external initializer of
    both graphs), and still generates what it generates without sharing."""
    import hfexport
    import numpy as np

    c = case("qwen2-gqa-qkv_bias-theta1e6")
    model_dir, _ = make_tiny_model(tmp_path / "hf", c.model_type, {**c.config, "hidden_size": 128})
    out = export_model(model_dir, tmp_path / "gen", "--for-generation", "--onnx-ops", "ort")
    external = set()
    for name in ("prefill", "decode"):
        graph = onnx.load(str(out / f"{name}.onnx"), load_external_data=False).graph
        external |= {t.name for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    shared = hfexport.open_runner(out)
    assert set(shared.session.weights) == external and external
    ids = np.array([[5, 9, 13, 17, 21]])
    separate = hfexport.open_runner(out, share_weights=False)
    assert not hasattr(separate, "weights")
    np.testing.assert_array_equal(hfexport.generate(shared, ids, max_new_tokens=8, ignore_eos=True),
                                  hfexport.generate(separate, ids, max_new_tokens=8, ignore_eos=True))


def test_onnx_runner_keeps_prepacking_where_a_kernel_needs_it(tmp_path, make_tiny_model, export_model):
    """MatMulNBits runs fast only on weights onnxruntime prepacked (its unpacked path was 60-100x
    slower on int4 decode): with such an op the runner keeps prepacking on and shares only the
    weights no prepacking op reads; float graphs share every weight with prepacking off. Greedy
    tokens are those of onnxruntime's own defaults either way (speed: bench/bench_default_paths.py)."""
    import hfexport
    import numpy as np
    from hfexport.onnxruntime_runner import PREPACKS

    c = case("qwen2-gqa-qkv_bias-theta1e6")
    model_dir, _ = make_tiny_model(tmp_path / "hf", c.model_type, {**c.config, "hidden_size": 128})
    ids = np.array([[5, 9, 13, 17, 21]])
    for extra, policy in (([], "shared, not prepacked"), (["--quantize", "int4"], "shared, prepacked per session")):
        out = export_model(model_dir, tmp_path / f"gen{len(extra)}", "--for-generation", "--onnx-ops", "ort", *extra)
        runner = hfexport.open_runner(out)
        assert runner.session.weight_policy == policy
        prepacked = set()
        for name in ("prefill", "decode"):
            graph = onnx.load(str(out / f"{name}.onnx"), load_external_data=False).graph
            prepacked |= {i for n in graph.node if n.op_type in PREPACKS for i in n.input}
        if extra:
            assert not set(runner.session.weights) & prepacked, "a weight a prepacking op reads was shared"
        try:
            disabled = runner.session.decode.get_session_options().get_session_config_entry("session.disable_prepacking")
        except Exception:  # noqa: BLE001 - onnxruntime raises for an entry never set
            disabled = None
        assert (disabled == "1") is (not extra), disabled
        np.testing.assert_array_equal(
            hfexport.generate(runner, ids, max_new_tokens=8, ignore_eos=True),
            hfexport.generate(hfexport.open_runner(out, share_weights=False), ids, max_new_tokens=8, ignore_eos=True))
