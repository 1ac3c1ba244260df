"""The Python API's ExecuTorch exporter (ExecutorchExporter / ExecutorchConfig): its .pte as the
docs use it (`Runtime.get().load_program("model.pte").load_method("forward").execute(...)`), and
a static-cache generation export whose cache lives in the program, against transformers eager."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("executorch")
pytest.importorskip("hfexport._core", reason="the compiled core is not built")

import hfexport  # noqa: E402
from hfexport import AutoExportConfig, AutoHfExporter, ConfigError, ExecutorchConfig, ExecutorchExporter  # noqa: E402
from transformers import AutoModelForCausalLM, GenerationConfig  # noqa: E402

LLAMA = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)
PROMPT = [5, 17, 9, 33, 61, 2, 40]
NEW = 12


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from conftest import build_tiny_model

    path, _ = build_tiny_model(tmp_path_factory.mktemp("llama-executorch"), "llama", LLAMA, weight_std=0.2)
    return path, AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def test_executorch_forward_as_documented(llama, tmp_path):
    """`ExecutorchExporter().export(model, {"input_ids": ids})`, saved as model.pte and run by
    ExecuTorch's runtime with the inputs' values in order: transformers' logits."""
    from executorch.runtime import Runtime

    _, model = llama
    inputs = {"input_ids": torch.tensor([PROMPT])}
    config = AutoExportConfig.from_dict({"export_format": "executorch"})
    assert isinstance(config, ExecutorchConfig) and config.backend == "xnnpack"
    exporter = AutoHfExporter.from_config(config)
    assert isinstance(exporter, ExecutorchExporter)
    exported = exporter.export(model, inputs, config=config)
    assert exported.manifest["verification"]["passed"]
    with torch.no_grad():
        want = model(**inputs).logits
    exported.save(tmp_path / "model.pte")
    assert b"XnnpackBackend" in (tmp_path / "model.pte").read_bytes()
    (got,) = Runtime.get().load_program(str(tmp_path / "model.pte")).load_method("forward").execute(
        list(inputs.values()))
    assert float((got - want).abs().max()) <= 1e-5
    assert torch.allclose(exported(**inputs)["logits"], want, atol=1e-5)
    with pytest.raises(ValueError, match=r"\.pte"):
        exported.save(tmp_path / "model.onnx")


def test_executorch_static_cache_generation(llama, tmp_path):
    """export_for_generation with a static cache: one `forward` method holding the cache; generate
    gives transformers' greedy tokens, also after save_pretrained / from_pretrained."""
    _, model = llama
    ids = torch.tensor([PROMPT])
    exported = ExecutorchExporter().export_for_generation(
        model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
        generation_config=GenerationConfig(cache_implementation="static", max_cache_len=32))
    with torch.no_grad():
        want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
    got = exported.generate(ids, max_new_tokens=NEW, ignore_eos=True)
    assert got.tolist() == want.tolist()
    exported.save_pretrained(tmp_path / "saved")
    again = hfexport.ExportedModel.from_pretrained(tmp_path / "saved")
    assert again.generate(ids, max_new_tokens=NEW, ignore_eos=True).tolist() == want.tolist()


def test_executorch_dynamic_cache_generation(llama):
    """export_for_generation without a static cache: `prefill` and `forward` (decode) methods in one
    program, the cache passed back each step; transformers' greedy tokens."""
    _, model = llama
    ids = torch.tensor([PROMPT])
    exported = ExecutorchExporter().export_for_generation(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    assert exported.manifest["generation"]["cache"] == "dynamic"
    with torch.no_grad():
        want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
    assert exported.generate(ids, max_new_tokens=NEW, ignore_eos=True).tolist() == want.tolist()
    # The components called as forwards: prefill's present is decode's past.
    first = exported.components["prefill"](input_ids=ids)
    assert int(first["logits"][0, -1].argmax()) == want[0, len(PROMPT)]
    nxt = want[:, len(PROMPT):len(PROMPT) + 1]
    second = exported.components["decode"](input_ids=nxt, past_key_values=first["past_key_values"])
    assert int(second["logits"][0, -1].argmax()) == want[0, len(PROMPT) + 1]


def test_executorch_zero_copy_generation(llama, tmp_path):
    """transformers' zero-copy recipe, ExecutorchConfig(alloc_graph_input=False,
    alloc_graph_output=False, alloc_mutable_buffers=False): nothing planned for the method's inputs
    and outputs, the cache passed in and returned ([cache x N, logits, cache x N]); generate gives
    transformers' greedy tokens. Called as a graph, it takes a zero cache or the one it returned."""
    from hfexport.forward import open_graph

    _, model = llama
    ids = torch.tensor([PROMPT])
    config = ExecutorchConfig(alloc_graph_input=False, alloc_graph_output=False, alloc_mutable_buffers=False)
    exported = ExecutorchExporter().export_for_generation(
        model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, config=config,
        generation_config=GenerationConfig(cache_implementation="static", max_cache_len=32))
    with torch.no_grad():
        want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
    assert exported.generate(ids, max_new_tokens=NEW, ignore_eos=True).tolist() == want.tolist()
    exported.save_pretrained(tmp_path / "saved")
    meta = hfexport.executorch_runner.load_program(tmp_path / "saved" / "model.pte").load_method("forward").metadata
    layers = 2 * LLAMA["num_hidden_layers"]
    assert meta.num_inputs() == 3 + layers and meta.num_outputs() == 2 * layers + 1
    assert not any(meta.input_tensor_meta(i).is_memory_planned() for i in range(meta.num_inputs()))
    assert not any(meta.output_tensor_meta(i).is_memory_planned() for i in range(meta.num_outputs()))

    manifest = hfexport.load_manifest(tmp_path / "saved")
    graph = open_graph("executorch", tmp_path / "saved" / "model.pte", manifest.data)
    pairs = manifest.generation["cache_pairs"]
    spec = {i["name"]: i for i in manifest.component("decode")["inputs"]}
    zeros = {p["input"]: np.zeros(spec[p["input"]]["shape"], np.float32) for p in pairs}
    slots = np.arange(32)

    def call(tokens, start, cache):
        positions = np.arange(start, start + len(tokens))[None]
        mask = (slots[None, None, :] <= positions[:, :, None])[:, None]
        return graph({"input_ids": np.array([tokens]), "attention_mask": mask, "position_ids": positions, **cache})

    first = call(PROMPT, 0, zeros)
    assert int(first["logits"][0, -1].argmax()) == want[0, len(PROMPT)]
    returned = {p["input"]: first[p["output"]] for p in pairs}
    second = call([int(want[0, len(PROMPT)])], len(PROMPT), returned)
    assert int(second["logits"][0, -1].argmax()) == want[0, len(PROMPT) + 1]
    with pytest.raises(ValueError, match="zero-copy"):
        call([3], len(PROMPT) + 1, {k: v + 1 for k, v in returned.items()})


@pytest.mark.parametrize("fields,mention", [({"backend": "cuda"}, "backend"), ({"backend": "mlx"}, "backend"),
                                            ({"alloc_graph_input": False}, "alloc_graph_input"),
                                            ({"alloc_mutable_buffers": False}, "alloc_mutable_buffers"),
                                            ({"alloc_graph_output": "no"}, "alloc_graph_output")])
def test_executorch_config_errors(fields, mention):
    with pytest.raises(ConfigError, match=mention):
        ExecutorchConfig(**fields)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_executorch_half_precision_model(dtype, llama):
    """A model loaded in float16 / bfloat16 exported with ExecutorchConfig(dtype=...): verified
    against itself as it loads (transformers in that dtype), and greedy generation gives the
    model's own tokens (dynamic cache; bfloat16 arrays come back as ml_dtypes' bfloat16)."""
    path, _ = llama
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
    ids = torch.tensor([PROMPT])
    config = ExecutorchConfig(dtype=dtype)
    exported = ExecutorchExporter().export(model, {"input_ids": ids}, config=config)
    assert exported.manifest["dtype"] == dtype and exported.manifest["verification"]["passed"]
    generating = ExecutorchExporter().export_for_generation(
        model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, config=config)
    with torch.no_grad():
        want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
    assert generating.generate(ids, max_new_tokens=NEW, ignore_eos=True).tolist() == want.tolist()
    present = generating.components["prefill"](input_ids=ids)["past_key_values"]
    first = present[0] if isinstance(present, (list, tuple)) else next(iter(present.values()))
    first = first[0] if isinstance(first, (list, tuple)) else first
    assert str(first.dtype) == dtype


def test_executorch_config_hfexport_kernels(llama, tmp_path):
    """ExecutorchConfig(kernels="hfexport") is --executorch-kernels hfexport: attention calls
    hfexport::sdpa.out, and generate (which loads hfexport's kernel library) gives transformers'
    greedy tokens; any other value is refused."""
    _, model = llama
    ids = torch.tensor([PROMPT])
    exported = ExecutorchExporter().export_for_generation(
        model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, config=ExecutorchConfig(kernels="hfexport"),
        generation_config=GenerationConfig(cache_implementation="static", max_cache_len=32))
    with torch.no_grad():
        want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
    assert exported.generate(ids, max_new_tokens=NEW, ignore_eos=True).tolist() == want.tolist()
    exported.save_pretrained(tmp_path / "saved")
    assert b"hfexport::sdpa" in (tmp_path / "saved" / "model.pte").read_bytes()
    with pytest.raises(ConfigError, match="kernels"):
        ExecutorchConfig(kernels="fast")
