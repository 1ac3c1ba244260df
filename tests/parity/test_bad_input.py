"""Bad input through the CLI: every failure is one clean line on stderr and leaves nothing behind.

Each case asserts: non-zero exit (not a signal / abort), stderr is exactly one non-empty line that
starts with "hfexport: error: " and names the offending thing, no Python traceback or sanitizer
report, OUT_DIR not created, and no hidden staging directory (.OUT.tmp-* / .OUT.old-*) left in
its parent.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import pytest
from conftest import TINY_CONFIG, assert_clean_error, leftovers  # noqa: F401 - shared with test_generation

BASE_CONFIG = dict(TINY_CONFIG, vocab_size=128)
ST = "model.safetensors"


# --------------------------------------------------------------------------------------------
# helpers


def mentions_shape(line: str, shape) -> bool:
    """True if the shape appears in the line as [a, b], (a, b), [a,b] or axb."""
    pattern = r"\s*(?:,|x|×)\s*".join(str(d) for d in shape)
    return re.search(r"(?<![\d])" + pattern + r"(?![\d])", line) is not None


def read_safetensors(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def write_safetensors(path: Path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def edit_config(model_dir: Path, fn) -> None:
    p = model_dir / "config.json"
    cfg = json.loads(p.read_text())
    fn(cfg)
    p.write_text(json.dumps(cfg, indent=2))


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def base_model(tmp_path_factory, make_tiny_model) -> Path:
    d, _ = make_tiny_model(tmp_path_factory.mktemp("bad_input_base") / "hf", "llama", BASE_CONFIG)
    return d


@pytest.fixture
def model(base_model, tmp_path) -> Path:
    """A fresh, writable copy of the good tiny llama checkpoint."""
    d = tmp_path / "model"
    shutil.copytree(base_model, d)
    return d


@pytest.fixture
def out(tmp_path) -> Path:
    return tmp_path / "exports" / "out"


@pytest.fixture(scope="module")
def good_export(base_model, tmp_path_factory, export_model) -> Path:
    return export_model(base_model, tmp_path_factory.mktemp("good_export") / "out")


# Every case runs once per output format: checkpoint and option errors must read the same there.
_FORMAT = {"value": "onnx"}


@pytest.fixture(params=["onnx", "openvino", "pt2", "executorch"], autouse=True)
def output_format(request):
    _FORMAT["value"] = request.param
    return request.param


def export(run_hfexport, model_dir, out_dir, *extra):
    if "--format" not in extra:
        extra = ("--format", _FORMAT["value"], *extra)
    return run_hfexport("export", model_dir, "-o", out_dir, *extra)


# --------------------------------------------------------------------------------------------
# config.json


def test_unsupported_model_type(model, out, run_hfexport):
    edit_config(model, lambda c: c.update(model_type="bloom"))
    assert_clean_error(export(run_hfexport, model, out), out, "bloom", "llama", "qwen3")


@pytest.mark.parametrize("key", ["hidden_size", "num_attention_heads", "vocab_size"])
def test_config_missing_required_key(key, model, out, run_hfexport):
    edit_config(model, lambda c: c.pop(key))
    assert_clean_error(export(run_hfexport, model, out), out, key)


def test_kv_heads_not_dividing_heads(model, out, run_hfexport):
    edit_config(model, lambda c: c.update(num_key_value_heads=3))
    assert_clean_error(export(run_hfexport, model, out), out, "num_key_value_heads")


def test_negative_hidden_size(model, out, run_hfexport):
    edit_config(model, lambda c: c.update(hidden_size=-64))
    assert_clean_error(export(run_hfexport, model, out), out, "hidden_size")


def test_wrong_type_value(model, out, run_hfexport):
    edit_config(model, lambda c: c.update(num_hidden_layers="two"))
    assert_clean_error(export(run_hfexport, model, out), out, "num_hidden_layers")


def test_unsupported_rope_type(model, out, run_hfexport):
    edit_config(model, lambda c: c.update(rope_parameters={"rope_type": "bogus_rope", "rope_theta": 1e4}))
    assert_clean_error(export(run_hfexport, model, out), out, "bogus_rope")


@pytest.mark.parametrize("factor", [1e300, 0.0, -2.0])
def test_dynamic_rope_factor_out_of_range(factor, model, out, run_hfexport):
    """A dynamic NTK factor that would stretch the sequence bound past any length (found by the
    config fuzzer: a float-to-integer overflow) or is not positive."""
    edit_config(model, lambda c: c.update(rope_parameters={"rope_type": "dynamic", "factor": factor, "rope_theta": 1e4}))
    assert_clean_error(export(run_hfexport, model, out), out, "factor")


def test_config_not_json(model, out, run_hfexport):
    (model / "config.json").write_text('{"model_type": "llama", ')
    assert_clean_error(export(run_hfexport, model, out), out, "config.json")


def test_config_missing(model, out, run_hfexport):
    (model / "config.json").unlink()
    assert_clean_error(export(run_hfexport, model, out), out, "config.json")


def test_model_dir_does_not_exist(tmp_path, out, run_hfexport):
    missing = tmp_path / "no_such_model"
    assert_clean_error(export(run_hfexport, missing, out), out, "no_such_model")


def test_no_weights(model, out, run_hfexport):
    (model / ST).unlink()
    assert_clean_error(export(run_hfexport, model, out), out, "safetensors")


# --------------------------------------------------------------------------------------------
# safetensors container


def test_safetensors_empty(model, out, run_hfexport):
    (model / ST).write_bytes(b"")
    assert_clean_error(export(run_hfexport, model, out), out, ST)


def test_safetensors_truncated(model, out, run_hfexport):
    raw = (model / ST).read_bytes()
    (model / ST).write_bytes(raw[: len(raw) // 2])
    assert_clean_error(export(run_hfexport, model, out), out, ST)


def test_safetensors_tiny_file(model, out, run_hfexport):
    (model / ST).write_bytes(b"\x10\x00\x00")
    assert_clean_error(export(run_hfexport, model, out), out, ST)


def test_safetensors_absurd_header_length(model, out, run_hfexport):
    raw = (model / ST).read_bytes()
    (model / ST).write_bytes(struct.pack("<Q", 2**62) + raw[8:])
    assert_clean_error(export(run_hfexport, model, out), out, ST)


def test_safetensors_header_not_json(model, out, run_hfexport):
    _, data = read_safetensors(model / ST)
    text = b"{this is not json" + b" " * 15
    (model / ST).write_bytes(struct.pack("<Q", len(text)) + text + data)
    assert_clean_error(export(run_hfexport, model, out), out, ST)


def test_safetensors_offsets_out_of_range(model, out, run_hfexport):
    header, data = read_safetensors(model / ST)
    name = "model.layers.1.mlp.down_proj.weight"
    begin, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [begin + len(data), end + len(data)]  # same span, past the end
    write_safetensors(model / ST, header, data)
    assert_clean_error(export(run_hfexport, model, out), out, ST, name)


def test_safetensors_overlapping_offsets(model, out, run_hfexport):
    header, data = read_safetensors(model / ST)
    a, b = "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"
    assert header[a]["shape"] == header[b]["shape"]
    begin, end = header[a]["data_offsets"]
    header[b]["data_offsets"] = [begin + 8, end + 8]  # overlaps a by all but 8 bytes
    write_safetensors(model / ST, header, data)
    line = assert_clean_error(export(run_hfexport, model, out), out, ST, b)
    assert "overlap" in line.lower()


def test_safetensors_unknown_dtype(model, out, run_hfexport):
    header, data = read_safetensors(model / ST)
    name = "model.norm.weight"
    header[name]["dtype"] = "Q7_K"
    write_safetensors(model / ST, header, data)
    assert_clean_error(export(run_hfexport, model, out), out, ST, name, "Q7_K")


def test_safetensors_shape_does_not_match_bytes(model, out, run_hfexport):
    header, data = read_safetensors(model / ST)
    name = "model.layers.0.self_attn.q_proj.weight"
    header[name]["shape"] = [64, 65]
    write_safetensors(model / ST, header, data)
    assert_clean_error(export(run_hfexport, model, out), out, ST, name)


def test_safetensors_negative_dim(model, out, run_hfexport):
    header, data = read_safetensors(model / ST)
    name = "model.norm.weight"
    header[name]["shape"] = [-64]
    write_safetensors(model / ST, header, data)
    assert_clean_error(export(run_hfexport, model, out), out, ST, name)


def test_sharded_index_names_missing_shard(model, out, run_hfexport):
    header, _ = read_safetensors(model / ST)
    weight_map = {n: ST for n in header if n != "__metadata__"}
    weight_map["model.norm.weight"] = "model-00002-of-00002.safetensors"
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert_clean_error(export(run_hfexport, model, out), out, "model-00002-of-00002.safetensors")


@pytest.mark.parametrize("shard", ["s" * 300 + ".safetensors", "", "."], ids=["too-long", "empty", "dot"])
def test_sharded_index_shard_name_not_a_file(shard, model, out, run_hfexport):
    """Found by fuzzing (tests/fuzz/regressions/sharded_index): a name the OS refuses was a
    filesystem exception without the index's name."""
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"model.norm.weight": shard}}))
    assert_clean_error(export(run_hfexport, model, out), out, "model.safetensors.index.json")


# --------------------------------------------------------------------------------------------
# tensors vs. architecture


def _rewrite_tensors(model: Path, fn) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(model / ST)
    fn(tensors)
    save_file(tensors, model / ST, metadata={"format": "pt"})


def test_tensor_missing(model, out, run_hfexport):
    name = "model.layers.1.self_attn.k_proj.weight"
    _rewrite_tensors(model, lambda t: t.pop(name))
    assert_clean_error(export(run_hfexport, model, out), out, name)


def test_tensor_misshaped(model, out, run_hfexport):
    import torch

    name = "model.layers.0.mlp.gate_proj.weight"  # expected [96, 64]
    _rewrite_tensors(model, lambda t: t.update({name: torch.zeros(97, 64)}))
    line = assert_clean_error(export(run_hfexport, model, out), out, name)
    assert mentions_shape(line, (97, 64)), f"actual shape missing: {line}"
    assert mentions_shape(line, (96, 64)), f"expected shape missing: {line}"


def test_tensor_unexpected_extra(model, out, run_hfexport):
    import torch

    name = "model.layers.0.self_attn.extra_proj.weight"
    _rewrite_tensors(model, lambda t: t.update({name: torch.zeros(4, 4)}))
    assert_clean_error(export(run_hfexport, model, out), out, name)


def test_tensor_integer_dtype(model, out, run_hfexport):
    name = "model.norm.weight"
    _rewrite_tensors(model, lambda t: t.update({name: t[name].to(__import__("torch").int32)}))
    assert_clean_error(export(run_hfexport, model, out), out, name)


# --------------------------------------------------------------------------------------------
# output directory and options


def test_out_dir_exists_without_overwrite(model, out, run_hfexport):
    out.mkdir(parents=True)
    (out / "keep.txt").write_text("precious")
    proc = export(run_hfexport, model, out)
    assert_clean_error(proc, None, str(out.name), "--overwrite")
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "precious"
    assert not leftovers(out)


def test_out_dir_exists_with_overwrite(model, out, run_hfexport, output_format):
    out.mkdir(parents=True)
    (out / "keep.txt").write_text("stale")
    proc = export(run_hfexport, model, out, "--overwrite")
    assert proc.returncode == 0, proc.stderr
    model_file = {"onnx": "model.onnx", "openvino": "openvino_model.xml", "pt2": "model.pt2",
                  "executorch": "model.pte"}[output_format]
    assert (out / model_file).is_file() and (out / "export.json").is_file()
    assert not (out / "keep.txt").exists()
    assert not leftovers(out)


def test_out_dir_name_too_long(model, tmp_path, run_hfexport):
    out_dir = tmp_path / ("o" * 300)
    assert_clean_error(export(run_hfexport, model, out_dir), None, "File name too long")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_out_dir_parent_is_a_file(model, tmp_path, run_hfexport):
    blocker = tmp_path / "blocker.txt"
    blocker.write_text("not a directory")
    out_dir = blocker / "out"
    line = assert_clean_error(export(run_hfexport, model, out_dir), None, "blocker.txt")
    assert blocker.read_text() == "not a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker.txt", "model"], line


def test_out_dir_is_a_file_with_overwrite(model, tmp_path, run_hfexport):
    target = tmp_path / "out_file"
    target.write_text("x")
    assert_clean_error(export(run_hfexport, model, target, "--overwrite"), None, "out_file")
    assert target.read_text() == "x"
    assert not leftovers(target)


def test_bad_format(model, out, run_hfexport):
    assert_clean_error(export(run_hfexport, model, out, "--format", "nonsense"), out, "nonsense", "onnx")


def test_bad_dtype(model, out, run_hfexport):
    assert_clean_error(export(run_hfexport, model, out, "--dtype", "int8"), out, "int8", "float32")


def test_unknown_option(model, out, run_hfexport):
    """Usage errors follow the same one-line contract as every other error."""
    assert_clean_error(export(run_hfexport, model, out, "--bogus-flag"), out, "--bogus-flag")


# --------------------------------------------------------------------------------------------
# inspect


def test_inspect_good_export(good_export, run_hfexport):
    proc = run_hfexport("inspect", good_export)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for word in ("onnx", "llama", "model.onnx", "input_ids", "attention_mask", "position_ids", "logits"):
        assert word in text, f"inspect output lacks {word!r}:\n{text}"
    assert proc.stderr == ""


def test_inspect_not_an_export(tmp_path, run_hfexport):
    d = tmp_path / "plain_dir"
    d.mkdir()
    (d / "README.txt").write_text("hello")
    assert_clean_error(run_hfexport("inspect", d), None, "plain_dir")


def test_inspect_missing_dir(tmp_path, run_hfexport):
    assert_clean_error(run_hfexport("inspect", tmp_path / "nowhere"), None, "nowhere")


def test_inspect_corrupt_manifest(good_export, tmp_path, run_hfexport):
    d = tmp_path / "broken"
    shutil.copytree(good_export, d)
    (d / "export.json").write_text("{ nope")
    assert_clean_error(run_hfexport("inspect", d), None, "export.json")


# --------------------------------------------------------------------------------------------
# format-specific options


def test_onnx_ops_refused_for_openvino(model, out, run_hfexport):
    assert_clean_error(export(run_hfexport, model, out, "--format", "openvino", "--onnx-ops", "ort"), out,
                       "--onnx-ops")


def test_onnx_ops_refused_for_pt2(model, out, run_hfexport):
    assert_clean_error(export(run_hfexport, model, out, "--format", "pt2", "--onnx-ops", "ort"), out, "--onnx-ops",
                       "onnx")


def test_pt2_refuses_int8_compute(model, out, run_hfexport):
    assert_clean_error(export(run_hfexport, model, out, "--format", "pt2", "--quantize", "int4",
                              "--quantize-compute", "int8"), out, "--quantize-compute", "float")


def test_pt2_unknown_backend_option(model, out, tmp_path, run_hfexport):
    config = tmp_path / "config.json"
    config.write_text('{"format": "pt2", "backend": {"op_profile": "ort"}}')
    assert_clean_error(export(run_hfexport, model, out, "--format", "pt2", "--config", config), out, "op_profile",
                       "decompose")


def test_pt2_bad_interface(model, out, tmp_path, run_hfexport):
    config = tmp_path / "config.json"
    config.write_text('{"format": "pt2", "backend": {"interface": {"cache_lengths": true}}}')
    assert_clean_error(export(run_hfexport, model, out, "--format", "pt2", "--config", config), out, "cache_lengths",
                       "static cache")


def test_aot_is_for_pt2(model, out, run_hfexport):
    assert_clean_error(export(run_hfexport, model, out, "--format", "onnx", "--aot"), out, "--aot", "pt2")


def test_executorch_backend_is_for_executorch(model, out, run_hfexport):
    assert_clean_error(export(run_hfexport, model, out, "--format", "onnx", "--executorch-backend", "portable"), out,
                       "--executorch-backend", "executorch")


def test_no_alloc_graph_io_is_for_executorch(model, out, run_hfexport):
    assert_clean_error(export(run_hfexport, model, out, "--format", "pt2", "--no-alloc-graph-io"), out,
                       "--no-alloc-graph-io", "executorch")


def test_executorch_alloc_graph_io_not_a_bool(model, out, tmp_path, run_hfexport):
    config = tmp_path / "config.json"
    config.write_text('{"format": "executorch", "backend": {"alloc_graph_io": "no"}}')
    assert_clean_error(export(run_hfexport, model, out, "--format", "executorch", "--config", config), out,
                       "alloc_graph_io", "true or false")


def test_executorch_bad_backend(model, out, run_hfexport):
    assert_clean_error(export(run_hfexport, model, out, "--format", "executorch", "--executorch-backend", "gpu"), out,
                       "--executorch-backend", "portable", "xnnpack")


def test_executorch_unbounded_dim(model, out, run_hfexport):
    """Every tensor is planned at its dims' upper bounds: a bound past the format's int32 sizes is
    refused, naming the dim and the flag that bounds it."""
    assert_clean_error(export(run_hfexport, model, out, "--format", "executorch", "--dim", "sequence=1:3000000000"),
                       out, "sequence", "--dim")


@pytest.mark.parametrize("args", [["--executorch-backend", "portable", "--quantize", "int4"],
                                  ["--executorch-backend", "portable", "--quantize", "int8"]],
                         ids=["portable-int4", "portable-int8"])
def test_executorch_int8_compute_only_for_xnnpack(args, model, out, run_hfexport):
    assert_clean_error(export(run_hfexport, model, out, "--format", "executorch", *args, "--quantize-compute", "int8"),
                       out, "--quantize-compute", "4-bit")


def test_aot_failure_leaves_nothing(model, out, hfexport_bin, tmp_path):
    """A compile that fails (here: no Python to run it) is one line naming --aot, and no export."""
    import os
    import subprocess

    from conftest import cli_env

    env = dict(cli_env(), HFEXPORT_PYTHON=str(tmp_path / "no-python"))
    proc = subprocess.run([str(hfexport_bin), "export", model, "-o", out, "--format", "pt2", "--aot"],
                          capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=120)
    assert_clean_error(proc, out, "--aot", "AOTInductor")
    assert not os.path.exists(out)


def export_with_config_edit(base: Path, edit: dict, key: str, tmp_path, out, run_hfexport) -> None:
    """A copy of `base` with `edit` applied to config.json: a clean error naming `key`."""
    model = tmp_path / "model"
    shutil.copytree(base, model)
    edit_config(model, lambda c: c.update(edit))
    assert_clean_error(export(run_hfexport, model, out), out, key)


def export_with_tensor_edit(base: Path, tensor: str, shape, tmp_path, out, run_hfexport) -> None:
    """A copy of `base` with `tensor` removed (shape None) or replaced by zeros of `shape`: a clean
    error naming the tensor (and the shape found)."""
    import torch

    model = tmp_path / "model"
    shutil.copytree(base, model)
    _rewrite_tensors(model, lambda t: t.pop(tensor) if shape is None else t.update({tensor: torch.zeros(*shape)}))
    line = assert_clean_error(export(run_hfexport, model, out), out, tensor)
    if shape is not None:
        assert mentions_shape(line, shape), f"actual shape missing: {line}"


# --------------------------------------------------------------------------------------------
# hybrid decoders' config keys (LFM2)


@pytest.fixture(scope="module")
def lfm2_base(tmp_path_factory, make_tiny_model) -> Path:
    d, _ = make_tiny_model(tmp_path_factory.mktemp("bad_input_lfm2") / "hf", "lfm2",
                           dict(BASE_CONFIG, num_hidden_layers=2, layer_types=["conv", "full_attention"]))
    return d


@pytest.mark.parametrize("edit, key", [
    (dict(layer_types=["conv", "mamba"]), "layer_types"),
    (dict(layer_types=["conv"]), "layer_types"),
    (dict(layer_types=None, full_attn_idxs=[5]), "full_attn_idxs"),
    (dict(conv_L_cache=0), "conv_L_cache"),
    (dict(block_ffn_dim_multiplier=1e300), "block_ffn_dim_multiplier"),  # no integer overflow
])
def test_lfm2_bad_layer_config(edit, key, lfm2_base, tmp_path, out, run_hfexport):
    export_with_config_edit(lfm2_base, edit, key, tmp_path, out, run_hfexport)


def test_lfm2_conv_weight_missing(lfm2_base, tmp_path, out, run_hfexport):
    model = tmp_path / "lfm2"
    shutil.copytree(lfm2_base, model)
    header, data = read_safetensors(model / ST)
    header.pop("model.layers.0.conv.conv.weight")
    write_safetensors(model / ST, header, data)
    assert_clean_error(export(run_hfexport, model, out), out, "model.layers.0.conv.conv.weight")


# --------------------------------------------------------------------------------------------
# hybrid decoders' config keys (GraniteMoeHybrid: Mamba2 mixers)


@pytest.fixture(scope="module")
def granite_hybrid_base(tmp_path_factory, make_tiny_model) -> Path:
    d, _ = make_tiny_model(tmp_path_factory.mktemp("bad_input_granitemoehybrid") / "hf", "granitemoehybrid",
                           dict(BASE_CONFIG, num_hidden_layers=2, layer_types=["mamba", "attention"], mamba_n_heads=8,
                                mamba_n_groups=2, mamba_d_state=8, num_local_experts=0, shared_intermediate_size=32))
    return d


@pytest.mark.parametrize("edit, key", [
    (dict(layer_types=["mamba", "conv"]), "layer_types"),
    (dict(layer_types=None, layers_block_type=["mamba"]), "layers_block_type"),
    (dict(mamba_n_groups=3), "mamba_n_groups"),
    (dict(mamba_d_head=7), "mamba_d_head"),
    (dict(mamba_n_heads=5), "mamba_n_heads"),
    (dict(time_step_limit=[0.5, 0.1]), "time_step_limit"),
    (dict(time_step_limit="fast"), "time_step_limit"),
    (dict(mamba_d_conv=1), "mamba_d_conv"),
    (dict(position_embedding_type="alibi"), "position_embedding_type"),
])
def test_granitemoehybrid_bad_config(edit, key, granite_hybrid_base, tmp_path, out, run_hfexport):
    export_with_config_edit(granite_hybrid_base, edit, key, tmp_path, out, run_hfexport)


@pytest.mark.parametrize("tensor, shape", [("model.layers.0.mamba.A_log", None),
                                           ("model.layers.0.mamba.in_proj.weight", (7, 64)),
                                           ("model.layers.0.mamba.conv1d.weight", (160, 1, 3))])
def test_granitemoehybrid_mamba_weight_missing_or_misshaped(tensor, shape, granite_hybrid_base, tmp_path, out,
                                                            run_hfexport):
    export_with_tensor_edit(granite_hybrid_base, tensor, shape, tmp_path, out, run_hfexport)


@pytest.fixture(scope="module")
def falcon_h1_base(tmp_path_factory, make_tiny_model) -> Path:
    d, _ = make_tiny_model(tmp_path_factory.mktemp("bad_input_falcon_h1") / "hf", "falcon_h1",
                           dict(BASE_CONFIG, num_hidden_layers=1, mamba_d_ssm=64, mamba_n_heads=4, mamba_n_groups=1,
                                mamba_d_state=8, mamba_d_conv=3))
    return d


@pytest.mark.parametrize("edit, key", [
    (dict(ssm_multipliers=[1.0, 2.0]), "ssm_multipliers"),
    (dict(ssm_multipliers=[1.0, 2.0, "x", 1.0, 1.0]), "ssm_multipliers"),
    (dict(mlp_multipliers=3.0), "mlp_multipliers"),
    (dict(mamba_d_ssm=60), "mamba_d_ssm"),
])
def test_falcon_h1_bad_config(edit, key, falcon_h1_base, tmp_path, out, run_hfexport):
    export_with_config_edit(falcon_h1_base, edit, key, tmp_path, out, run_hfexport)


@pytest.mark.parametrize("tensor, shape", [("model.layers.0.mamba.D", None),
                                           ("model.layers.0.feed_forward.gate_proj.weight", (7, 64)),
                                           ("model.layers.0.mamba.out_proj.weight", (32, 60))])
def test_falcon_h1_weight_missing_or_misshaped(tensor, shape, falcon_h1_base, tmp_path, out, run_hfexport):
    export_with_tensor_edit(falcon_h1_base, tensor, shape, tmp_path, out, run_hfexport)


# --------------------------------------------------------------------------------------------
# LFM2-MoE: sigmoid-routed experts chosen with expert_bias


@pytest.fixture(scope="module")
def lfm2_moe_base(tmp_path_factory, make_tiny_model) -> Path:
    d, _ = make_tiny_model(tmp_path_factory.mktemp("bad_input_lfm2_moe") / "hf", "lfm2_moe",
                           dict(BASE_CONFIG, num_hidden_layers=2, layer_types=["conv", "full_attention"], num_experts=4,
                                num_experts_per_tok=2, moe_intermediate_size=32, num_dense_layers=1))
    return d


@pytest.mark.parametrize("edit, key", [
    (dict(num_dense_layers=-1), "num_dense_layers"),
    (dict(num_experts_per_tok=5), "num_experts_per_tok"),
    (dict(moe_intermediate_size=0), "moe_intermediate_size"),
    (dict(routed_scaling_factor="x"), "routed_scaling_factor"),
])
def test_lfm2_moe_bad_config(edit, key, lfm2_moe_base, tmp_path, out, run_hfexport):
    export_with_config_edit(lfm2_moe_base, edit, key, tmp_path, out, run_hfexport)


@pytest.mark.parametrize("tensor, shape", [("model.layers.1.feed_forward.expert_bias", None),
                                           ("model.layers.1.feed_forward.expert_bias", (5,)),
                                           ("model.layers.1.feed_forward.experts.3.w2.weight", (64, 30))])
def test_lfm2_moe_weight_missing_or_misshaped(tensor, shape, lfm2_moe_base, tmp_path, out, run_hfexport):
    export_with_tensor_edit(lfm2_moe_base, tensor, shape, tmp_path, out, run_hfexport)


# --------------------------------------------------------------------------------------------
# Qwen3.5 and Qwen3-Next: gated DeltaNet layers beside gated attention


@pytest.fixture(scope="module")
def qwen3_5_base(tmp_path_factory, make_tiny_model) -> Path:
    d, _ = make_tiny_model(tmp_path_factory.mktemp("bad_input_qwen3_5") / "hf", "qwen3_5_text",
                           dict(BASE_CONFIG, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
                                head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                                linear_value_head_dim=8))
    return d


@pytest.mark.parametrize("edit, key", [
    (dict(layer_types=["linear_attention", "mamba"]), "layer_types"),
    (dict(layer_types=["linear_attention"]), "layer_types"),
    (dict(linear_num_value_heads=3), "linear_num_value_heads"),
    (dict(linear_conv_kernel_dim=0), "linear_conv_kernel_dim"),
    (dict(linear_conv_kernel_dim=1), "linear_conv_kernel_dim"),  # a state of kernel - 1 inputs
    (dict(hidden_act="gelu"), "hidden_act"),
])
def test_qwen3_5_bad_config(edit, key, qwen3_5_base, tmp_path, out, run_hfexport):
    export_with_config_edit(qwen3_5_base, edit, key, tmp_path, out, run_hfexport)


@pytest.mark.parametrize("tensor, shape", [("model.layers.0.linear_attn.A_log", None),
                                           ("model.layers.0.linear_attn.in_proj_qkv.weight", (40, 64)),
                                           ("model.layers.0.linear_attn.conv1d.weight", (48, 1, 3)),
                                           ("model.layers.1.self_attn.q_proj.weight", (64, 64))])
def test_qwen3_5_weight_missing_or_misshaped(tensor, shape, qwen3_5_base, tmp_path, out, run_hfexport):
    export_with_tensor_edit(qwen3_5_base, tensor, shape, tmp_path, out, run_hfexport)


@pytest.fixture(scope="module")
def qwen3_next_base(tmp_path_factory, make_tiny_model) -> Path:
    d, _ = make_tiny_model(tmp_path_factory.mktemp("bad_input_qwen3_next") / "hf", "qwen3_next",
                           dict(BASE_CONFIG, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
                                head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                                linear_value_head_dim=8, num_experts=4, num_experts_per_tok=2,
                                moe_intermediate_size=32, shared_expert_intermediate_size=32))
    return d


@pytest.mark.parametrize("edit, key", [
    (dict(num_experts_per_tok=5), "num_experts_per_tok"),
    (dict(shared_expert_intermediate_size=0), "shared_expert_intermediate_size"),
    (dict(mlp_only_layers=[2]), "mlp_only_layers"),
])
def test_qwen3_next_bad_config(edit, key, qwen3_next_base, tmp_path, out, run_hfexport):
    export_with_config_edit(qwen3_next_base, edit, key, tmp_path, out, run_hfexport)


@pytest.mark.parametrize("tensor, shape", [("model.layers.0.linear_attn.in_proj_ba.weight", (6, 64)),
                                           ("model.layers.0.mlp.shared_expert_gate.weight", None),
                                           ("model.layers.0.linear_attn.dt_bias", None)])
def test_qwen3_next_weight_missing_or_misshaped(tensor, shape, qwen3_next_base, tmp_path, out, run_hfexport):
    export_with_tensor_edit(qwen3_next_base, tensor, shape, tmp_path, out, run_hfexport)
