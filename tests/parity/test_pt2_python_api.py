"""The Python API's Dynamo exporter (DynamoExporter / DynamoConfig): its programs as the docs use
them, `exported.module()(**inputs)` and the documented static-cache decode loop run unchanged (in
a process of its own, on the saved decode.pt2), against transformers eager."""

from __future__ import annotations

import copy
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hfexport._core", reason="the compiled core is not built")

import hfexport  # noqa: E402
from hfexport import AutoExportConfig, AutoHfExporter, ConfigError, DynamoConfig, DynamoExporter  # noqa: E402
from transformers import AutoModelForCausalLM, GenerationConfig  # noqa: E402

LOOP = Path(__file__).with_name("dynamo_static_cache_loop.py")
LLAMA = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)
MAX_CACHE_LEN = 32
PROMPT = [5, 17, 9, 33, 61, 2, 40]
NEW = 12


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from conftest import build_tiny_model

    path, _ = build_tiny_model(tmp_path_factory.mktemp("llama-dynamo"), "llama", LLAMA, weight_std=0.2)
    return path, AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def greedy(model, prompt, n):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def static_generation():
    return GenerationConfig(cache_implementation="static", max_cache_len=MAX_CACHE_LEN)


def test_dynamo_forward_as_documented(llama, tmp_path):
    """`DynamoExporter().export(model, inputs)`; `exported.module()(**inputs)` is transformers'
    logits; `save` writes a .pt2 torch.export.load reads; the Auto classes pick the Dynamo pair."""
    _, model = llama
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    inputs = {"input_ids": ids, "attention_mask": (ids != 0).long()}
    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": True})
    assert isinstance(config, DynamoConfig)
    exporter = AutoHfExporter.from_config(config)
    assert isinstance(exporter, DynamoExporter)
    exported = exporter.export(model, inputs, config=config)
    assert exported.manifest["verification"]["passed"]
    with torch.no_grad():
        want = model(**inputs).logits
        out = exported.module()(**inputs)
    assert type(out).__name__ == "CausalLMOutputWithPast" and list(out.keys()) == ["logits"]
    got = out.logits
    real = inputs["attention_mask"].bool()
    assert float((got - want)[real].abs().max()) <= 1e-5
    assert torch.allclose(exported(**inputs)["logits"][real], want[real], atol=1e-5)
    exported.save(tmp_path / "model.pt2")
    program = torch.export.load(str(tmp_path / "model.pt2"))
    with torch.no_grad():
        again = program.module()(**inputs).logits
    assert torch.equal(again, got)
    with pytest.raises(ValueError, match=r"\.pt2"):
        exported.save(tmp_path / "model.onnx")


@pytest.mark.parametrize("kwarg", ["past_key_values", "cache"])
def test_documented_static_cache_loop_runs_unchanged(kwarg, llama, tmp_path):
    """export_for_generation with a static cache and multi_token_decode, save_pretrained, then the
    docs' loop in a fresh process: register_pytree_node(StaticCache), torch.export.load,
    example_inputs' StaticCache deep-copied and reset, updated in place call by call."""
    _, model = llama
    ids = torch.tensor([PROMPT])
    exported = DynamoExporter().export_for_generation(
        model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, config=DynamoConfig(cache_kwarg=kwarg),
        generation_config=static_generation(), multi_token_decode=True)
    assert list(exported) == ["decode"] and exported.manifest["verification"]["passed"]
    exported.save_pretrained(tmp_path / "out")
    proc = subprocess.run([sys.executable, str(LOOP), str(tmp_path / "out" / "decode.pt2"), kwarg,
                           ",".join(map(str, PROMPT)), str(NEW)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tokens, length, written = proc.stdout.split("\n")[-2].rsplit(" ", 2)
    assert [int(t) for t in tokens.split()] == greedy(model, PROMPT, NEW)
    assert int(length) == len(PROMPT) + NEW - 1 and written == "True"
    # hfexport's own loop over the same program (it builds the StaticCache over its buffers)
    assert exported.generate(ids, max_new_tokens=NEW)[0, len(PROMPT):].tolist() == greedy(model, PROMPT, NEW)


def output_structure(out) -> tuple:
    """(output class, its fields, the cache's class and length, or None) of a program's output."""
    cache = out.get("cache")
    return (type(out).__module__ + "." + type(out).__name__, list(out.keys()),
            None if cache is None else (type(cache).__name__, len(cache.layers)))


def program_outputs(program, kwargs):
    with torch.no_grad():
        return program.module()(**copy.deepcopy(kwargs))


@pytest.mark.parametrize("form", ["forward", "dynamic", "static"])
def test_program_outputs_have_transformers_structure(form, llama, tmp_path):
    """Each program returns what transformers.exporters' DynamoExporter's program returns for the
    same export, read with torch.export.load: its ModelOutput class, with its fields (logits; a
    DynamicCache of the presents for a dynamic cache; for a static cache the caller's StaticCache,
    its own tensors updated in place), equal logits."""
    import transformers.exporters as tx
    from transformers.exporters.exporter_dynamo import register_pytree_node
    from transformers import DynamicCache, StaticCache

    for cache_class in (StaticCache, DynamicCache):
        register_pytree_node(cache_class)
    # Example inputs holding a StaticCache load through torch's weights_only=False fallback, whose
    # warning has a broken format string (a logging error under pytest).
    for logger in ("torch.export", "torch._export.serde.serialize"):
        logging.getLogger(logger).setLevel(logging.ERROR)
    _, model = llama
    ids = torch.tensor([PROMPT])
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if form == "forward":
        theirs = {"model": tx.DynamoExporter().export(model, {**inputs, "use_cache": False}, config=tx.DynamoConfig())}
        ours = {"model": DynamoExporter().export(model, inputs, config=DynamoConfig())}
    else:
        options = (dict(generation_config=static_generation(), multi_token_decode=True) if form == "static"
                   else dict(generation_config=GenerationConfig(do_sample=False)))
        theirs = tx.DynamoExporter().export_for_generation(model, inputs, tx.DynamoConfig(dynamic=True), **options)
        theirs = {name: c for name, c in theirs.components.items()}
        ours = DynamoExporter().export_for_generation(model, inputs, config=DynamoConfig(cache_kwarg="cache"), **options)
        ours.save_pretrained(tmp_path / "ours")
    prefill_cache = None
    for name, program in theirs.items():
        program = getattr(program, "program", program)
        want = program_outputs(program, program.example_inputs[1])
        if form == "forward":
            ours[name].save(tmp_path / "model.pt2")
            loaded, kwargs = torch.export.load(str(tmp_path / "model.pt2")), inputs
        elif form == "static":
            loaded = torch.export.load(str(tmp_path / "ours" / "decode.pt2"))
            kwargs = loaded.example_inputs[1]
        else:  # flat kwargs: the prompt, then one token over the prefill's presents
            from torch.export.pt2_archive._package import load_pt2

            loaded = load_pt2(str(tmp_path / "ours" / "decode.pt2")).exported_programs["prefill" if name == "prefill" else "model"]
            n = len(PROMPT)
            kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(n)[None]}
            if name == "decode":
                kwargs = {"input_ids": torch.tensor([[3]]), "attention_mask": torch.ones(1, n + 1, dtype=torch.long),
                          "position_ids": torch.tensor([[n]])}
                for i, layer in enumerate(prefill_cache.layers):
                    kwargs[f"past_key_values_{i}_key"], kwargs[f"past_key_values_{i}_value"] = layer.keys, layer.values
        got = program_outputs(loaded, kwargs)
        assert output_structure(got) == output_structure(want), (form, name)
        prefill_cache = got.get("cache")
        if form == "static":  # the returned cache is the caller's, updated in place
            call = copy.deepcopy(loaded.example_inputs[1])
            with torch.no_grad():
                out = loaded.module()(**call)
            assert out.cache.layers[0].keys is call["cache"].layers[0].keys
            assert float(call["cache"].layers[0].keys.abs().sum()) > 0


def test_flat_cache_program_needs_no_transformers(llama, tmp_path):
    """cache_kwarg=None: the static cache as flat keyword tensors (no transformers cache class), updated in place."""
    _, model = llama
    ids = torch.tensor([PROMPT])
    exported = DynamoExporter().export_for_generation(
        model, {"input_ids": ids}, config=DynamoConfig(cache_kwarg=None), generation_config=static_generation(),
        multi_token_decode=True)
    names = [i["name"] for i in exported.manifest["components"]["decode"]["inputs"]]
    assert names[:3] == ["input_ids", "attention_mask", "position_ids"]
    assert names[3:] == [f"input_past_key_values_{i}_{k}" for i in range(2) for k in ("key", "value")]
    decode = exported.module()
    cache = {n: torch.zeros(1, 2, MAX_CACHE_LEN, 16) for n in names[3:]}
    pos = torch.arange(len(PROMPT))
    mask = (torch.arange(MAX_CACHE_LEN)[None, :] <= pos[:, None])[None, None]
    with torch.no_grad():
        logits = decode(input_ids=ids, attention_mask=mask, position_ids=pos[None], **cache).logits
        want = model(input_ids=ids).logits
    assert float((logits - want).abs().max()) <= 1e-5
    assert all(float(c[:, :, : len(PROMPT)].abs().sum()) > 0 and float(c[:, :, len(PROMPT):].abs().sum()) == 0
               for c in cache.values())


def test_static_cache_interface_refuses_sliding_layers(tmp_path):
    from conftest import build_tiny_model

    path, model = build_tiny_model(tmp_path / "hf", "mistral", dict(LLAMA, sliding_window=4))
    with pytest.raises(ConfigError, match="sliding-window layer.*cache_kwarg=None"):
        DynamoExporter().export_for_generation(model, {"input_ids": torch.tensor([PROMPT])},
                                               generation_config=static_generation(), multi_token_decode=True)
    with pytest.raises(ConfigError, match="cache_kwarg must be"):
        DynamoConfig(cache_kwarg="kv")


def test_programs_run_in_hfexport_without_transformers(llama, tmp_path, export_model):
    """The outputs name transformers' classes; where transformers is not installed, hfexport's
    loader registers stand-ins, so `hfexport generate`'s runner still runs every program form."""
    path, model = llama
    script = ("import sys, json; sys.modules['transformers'] = None\n"
              "import numpy as np, hfexport\n"
              "ids = np.array([json.loads(sys.argv[2])])\n"
              "print(json.dumps(hfexport.generate(hfexport.open_runner(sys.argv[1]), ids, max_new_tokens=6, "
              "ignore_eos=True)[0].tolist()))\n")
    want = greedy(model, PROMPT, 6)
    for mode in (["--for-generation"], ["--for-generation", "--static-cache", "--max-cache-len", "32"]):
        out = export_model(path, tmp_path / f"out{len(mode)}", "--format", "pt2", *mode)
        proc = subprocess.run([sys.executable, "-c", script, str(out), json.dumps(PROMPT)], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == want, mode


def test_programs_run_in_hfexport_under_older_transformers(llama, tmp_path, export_model):
    """Under transformers < 5.24 (here 4.57, optimum-onnx's venv) the output classes name the
    cache `past_key_values`, not the programs' `cache`: hfexport reads them through stand-ins."""
    older = Path(__file__).resolve().parents[2] / ".venv-optimum-onnx" / "bin" / "python"
    if not older.is_file():
        pytest.skip("no .venv-optimum-onnx (scripts/setup.sh makes it)")
    path, model = llama
    out = export_model(path, tmp_path / "out", "--format", "pt2", "--for-generation")
    script = ("import sys, json, numpy as np, transformers, hfexport\n"
              "assert transformers.__version__ < '5'\n"
              "ids = np.array([json.loads(sys.argv[2])])\n"
              "print(json.dumps(hfexport.generate(hfexport.open_runner(sys.argv[1]), ids, max_new_tokens=6, "
              "ignore_eos=True)[0].tolist()))\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "python"))
    proc = subprocess.run([str(older), "-c", script, str(out), json.dumps(PROMPT)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == greedy(model, PROMPT, 6)
