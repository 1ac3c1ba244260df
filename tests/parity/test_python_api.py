"""The Python API: transformers.exporters' documented code (../shared/notes/transformers-exporters-api.md)
with only the import changed (`from hfexport import ...`) and hub ids replaced by a local tiny
checkpoint with a tokenizer trained here. Every export is run by its real runtime and compared with
transformers eager, as the parity suites do."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hfexport._core", reason="the compiled core is not built")

import hfexport  # noqa: E402
from hfexport import (AutoExportConfig, AutoHfExporter, ConfigError, Dim, ExportedModel, OnnxConfig,  # noqa: E402
                      OnnxExporter, OpenVINOConfig, OpenVINOExporter, WeightQuantizer, decompose_for_generation)

TOL = 1e-4
CORPUS = ["the quick brown fox jumps over the lazy dog", "hello world, hello export", "a tiny model says hi",
          "token ids in, text out", "generation with a static cache", "ünïcode bytes too ✓"] * 20
CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def train_tokenizer(directory: Path):
    """A byte-level BPE tokenizer (bos added, left padding, a chat template), saved in `directory`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   padding_side="left")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return fast


QWEN3 = dict(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=64, rms_norm_eps=1e-6,
             pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(checkpoint dir, eager model, tokenizer): the tokenizer's files sit in the checkpoint."""
    from conftest import build_tiny_model

    directory = tmp_path_factory.mktemp("qwen3-api")
    path, model = build_tiny_model(directory, "qwen3", QWEN3)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()  # name_or_path = the dir
    tokenizer = train_tokenizer(path)
    return path, model, tokenizer


@pytest.fixture(scope="module")
def inputs(tiny):
    _, _, tokenizer = tiny
    return tokenizer(["hello world, hello export", "hi"], return_tensors="pt", padding=True)


def eager_logits(model, inputs) -> np.ndarray:
    with torch.no_grad():
        return model(**inputs).logits.numpy()


def assert_close_where_real(got, ref, mask, tol=TOL):
    real = np.asarray(mask).astype(bool)
    err = float(np.abs(np.asarray(got)[real] - ref[real]).max())
    assert err <= tol, f"max diff {err}"
    return err


# --------------------------------------------------------------------------------------------
# The documented examples


def test_docs_onnx_export_save_and_onnxruntime(tiny, inputs, tmp_path):
    """exporter.export(model, inputs, config=OnnxConfig(dynamic=True)); onnx_program.save("model.onnx");
    InferenceSession("model.onnx").run(None, {k: v.numpy() for k, v in inputs.items()})."""
    import onnxruntime

    _, model, _ = tiny
    exporter = OnnxExporter()
    config = OnnxConfig(dynamic=True)
    onnx_program = exporter.export(model, inputs, config=config)
    onnx_program.save(tmp_path / "model.onnx")
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"))
    assert [i.name for i in session.get_inputs()] == list(inputs.keys())  # exactly the sample inputs
    outputs = session.run(None, {k: v.numpy() for k, v in inputs.items()})
    assert_close_where_real(outputs[0], eager_logits(model, inputs), inputs["attention_mask"])
    verification = onnx_program.manifest["verification"]
    assert verification["passed"] and verification["max_abs_diff"] <= TOL
    # A second program saved into the same folder keeps its own weights.
    exporter.export(model, {"input_ids": inputs["input_ids"]}, config=config).save(tmp_path / "other.onnx")
    assert (tmp_path / "other.onnx.data").is_file()
    outputs = onnxruntime.InferenceSession(str(tmp_path / "model.onnx")).run(None, {k: v.numpy() for k, v in inputs.items()})
    assert_close_where_real(outputs[0], eager_logits(model, inputs), inputs["attention_mask"])


@pytest.mark.parametrize("keys", [("input_ids",), ("input_ids", "attention_mask", "position_ids")])
def test_graph_takes_exactly_the_sample_inputs(tiny, inputs, keys):
    """Without attention_mask or position_ids the graph derives them as the model's forward does."""
    _, model, _ = tiny
    sample = {k: inputs[k] for k in keys if k in inputs}
    if "position_ids" in keys:
        sample["position_ids"] = (inputs["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    exported = OnnxExporter().export(model, sample, OnnxConfig(dynamic=True))
    assert [i["name"] for i in exported.manifest["components"]["model"]["inputs"]] == list(sample)
    ref = eager_logits(model, sample)
    got = exported(**sample).logits
    assert isinstance(got, torch.Tensor)
    mask = sample.get("attention_mask", torch.ones_like(sample["input_ids"]))
    assert_close_where_real(got.numpy(), ref, mask)


def test_auto_export_config_and_auto_exporter(tiny, inputs, tmp_path):
    import onnxruntime

    _, model, _ = tiny
    config = AutoExportConfig.from_dict({"export_format": "onnx", "dynamic": True})
    assert isinstance(config, OnnxConfig) and config.dynamic
    exporter = AutoHfExporter.from_config(config)
    assert isinstance(exporter, OnnxExporter)
    exporter.export(model, inputs, config=config).save(tmp_path / "model.onnx")
    got = onnxruntime.InferenceSession(str(tmp_path / "model.onnx")).run(None, {k: v.numpy() for k, v in inputs.items()})
    assert_close_where_real(got[0], eager_logits(model, inputs), inputs["attention_mask"])
    ov = AutoExportConfig.from_dict({"export_format": "openvino", "compress_to_fp16": False})
    assert isinstance(ov, OpenVINOConfig) and isinstance(AutoHfExporter.from_config(ov), OpenVINOExporter)
    assert isinstance(AutoHfExporter.from_config({"export_format": "openvino"}), OpenVINOExporter)


@pytest.mark.parametrize("dim", ["torch", "hfexport"])
def test_dynamic_shapes_with_dim_bounds(tiny, inputs, dim):
    """dynamic_shapes={"input_ids": {0: batch, 1: seq}, ...} with Dim(name, min=, max=) bounds: the
    bounds are the export's (manifest dims), and other shapes inside them run."""
    _, model, tokenizer = tiny
    make = torch.export.Dim if dim == "torch" else Dim
    batch, seq = make("batch", min=1, max=8), make("seq", min=1, max=48)
    config = OnnxConfig(dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
                        prefer_deferred_runtime_asserts_over_guards=True)
    exported = OnnxExporter().export(model, inputs, config=config)
    assert exported.manifest["dims"]["batch"] == {"min": 1, "max": 8}
    assert exported.manifest["dims"]["sequence"] == {"min": 1, "max": 48}
    other = tokenizer(["a tiny model says hi", "the quick brown fox", "hello"], return_tensors="pt", padding=True)
    assert_close_where_real(exported(**other).logits.numpy(), eager_logits(model, other), other["attention_mask"])


def test_not_dynamic_fixes_the_sample_shapes(tiny, inputs):
    _, model, _ = tiny
    exported = OnnxExporter().export(model, inputs, OnnxConfig())  # transformers' default: dynamic=False
    batch, seq = inputs["input_ids"].shape
    assert exported.manifest["export_config"]["dynamic"] is False
    assert exported.manifest["export_config"]["dims"] == {"batch": {"min": batch, "max": batch},
                                                          "sequence": {"min": seq, "max": seq}}
    assert exported.manifest["components"]["model"]["inputs"][0]["shape"] == [batch, seq]  # static
    assert exported.manifest["verification"]["passed"]


def test_openvino_export_and_call(tiny, inputs, tmp_path):
    import openvino as ov

    _, model, _ = tiny
    exported = OpenVINOExporter().export(model, inputs, OpenVINOConfig(dynamic=True))
    exported.save(tmp_path / "model.xml")
    compiled = ov.Core().compile_model(str(tmp_path / "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    got = compiled({k: v.numpy() for k, v in inputs.items()})[0]
    assert_close_where_real(got, eager_logits(model, inputs), inputs["attention_mask"])
    fp16 = OpenVINOExporter().export(model, inputs, OpenVINOConfig(dynamic=True, compress_to_fp16=True))
    assert fp16.manifest["dtype"] == "float16" and fp16.manifest["verification"]["passed"]


# --------------------------------------------------------------------------------------------
# Generation


GENERATION_MODES = {
    # name: (exporter, config, export_for_generation kwargs, components)
    "onnx-prefill-decode": (OnnxExporter, {"dynamic": True}, {}, ["prefill", "decode"]),
    "onnx-multi-token": (OnnxExporter, {"dynamic": True}, {"multi_token_decode": True}, ["decode"]),
    "onnx-ort-fusions": (OnnxExporter, {"dynamic": True, "ort_fusions": "cpu"}, {}, ["decode"]),
    "onnx-static": (OnnxExporter, {"dynamic": True}, {"multi_token_decode": True, "static": 40}, ["decode"]),
    "openvino": (OpenVINOExporter, {"dynamic": True}, {}, ["decode"]),
}


@pytest.mark.parametrize("mode", list(GENERATION_MODES))
def test_export_for_generation_generates_like_transformers(tiny, inputs, mode):
    from transformers import GenerationConfig

    _, model, _ = tiny
    exporter_class, config, kwargs, components = GENERATION_MODES[mode]
    kwargs = dict(kwargs)
    if "static" in kwargs:
        kwargs["generation_config"] = GenerationConfig(cache_implementation="static", max_cache_len=kwargs.pop("static"))
    exporter = exporter_class()
    exported = exporter.export_for_generation(model, inputs, config=exporter.config_class(**config), **kwargs)
    assert list(exported.components) == components and list(exported) == components
    assert exported.manifest["verification"]["passed"], exported.manifest["verification"]
    got = exported.generate(inputs["input_ids"], attention_mask=inputs["attention_mask"], max_new_tokens=8)
    with torch.no_grad():
        ref = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert torch.equal(got, ref), f"\n{got}\n{ref}"
    sampled = exported.generate(inputs["input_ids"], attention_mask=inputs["attention_mask"], max_new_tokens=4,
                                do_sample=True, temperature=0.8, top_k=20, top_p=0.9, seed=0)
    assert sampled.shape[0] == 2 and sampled.shape[1] <= inputs["input_ids"].shape[1] + 4


# Each format's exporter and config, as transformers.exporters' docs spell them.
STAGE_FORMATS = {"onnx": ("OnnxExporter", "OnnxConfig", dict(dynamic=True)),
                 "openvino": ("OpenVINOExporter", "OpenVINOConfig", {}),
                 "dynamo": ("DynamoExporter", "DynamoConfig", {}),
                 "executorch": ("ExecutorchExporter", "ExecutorchConfig", {})}


def stage_files(exported) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(exported.directory.iterdir())
            if p.is_file() and p.name != "export.json"}


@pytest.mark.parametrize("fmt", list(STAGE_FORMATS))
def test_decompose_for_generation_then_export_each(fmt, tiny, inputs, tmp_path):
    """The documented flow, verbatim: each stage runs eagerly, then is exported. The eager call
    must not change what is exported (the cache it was given stays as captured): the files are
    those of an export without the eager call, and each verification passes on the stage's kwargs."""
    if fmt in ("openvino", "executorch"):
        pytest.importorskip(fmt)
    _, model, _ = tiny
    exporter_class, config_class, options = STAGE_FORMATS[fmt]
    exporter, config = getattr(hfexport, exporter_class)(), getattr(hfexport, config_class)(**options)
    exported = {}
    # ---- as the docs print it (model ids, paths and the device aside)
    components = decompose_for_generation(model, inputs)
    def cache_lengths():  # transformers 5.24 passes the cache as `cache`, earlier ones `past_key_values`
        return {name: next(kwargs[k] for k in ("cache", "past_key_values") if kwargs.get(k) is not None).get_seq_length()
                for name, (_, kwargs) in components.items()}

    lengths = cache_lengths()
    for name, (submodel, subinputs) in components.items():
        eager_outputs = submodel(**subinputs)  # sanity-check the eager forward before exporting
        exported[name] = exporter.export(submodel, subinputs, config=config)
    # ----
    assert lengths["decode"] > 0
    assert cache_lengths() == lengths, "the eager call changed the captured cache"
    assert list(exported) == ["prefill", "decode"]
    untouched = decompose_for_generation(model, inputs)
    for name, (submodel, subinputs) in components.items():
        assert eager_outputs.logits.shape[0] == inputs["input_ids"].shape[0]
        assert list(exported[name].components) == [name] or fmt == "openvino"
        verification = exported[name].manifest["verification"]
        assert verification.get("passed") is not False, verification
        # formats whose graphs take a given cache are verified on the stage's own kwargs
        if fmt in ("onnx", "dynamo") or name == "prefill":
            assert verification["compared"] and verification["max_abs_diff"] <= TOL, verification
        again = exporter.export(untouched[name][0], untouched[name][1], config=config)
        assert stage_files(again) == stage_files(exported[name]), f"{fmt} {name}: the eager call changed the export"
        assert again.manifest.get("verification") == verification
    if fmt == "onnx":
        import onnxruntime

        for name in exported:
            exported[name].save(tmp_path / f"{name}.onnx")
            session = onnxruntime.InferenceSession(str(tmp_path / f"{name}.onnx"))
            assert ("past_key_values.0.key" in {i.name for i in session.get_inputs()}) == (name == "decode")
        # the decode graph runs on the stage's own kwargs after the eager call (it failed in
        # onnxruntime when the call had grown the cache)
        decode_inputs = components["decode"][1]
        got = exported["decode"](**decode_inputs)["logits"]
        with torch.no_grad():
            want = model(**copy.deepcopy(dict(decode_inputs))).logits
        assert float(np.abs(np.asarray(got)[:, -1] - want[:, -1].numpy()).max()) <= TOL
    (only_decode,) = decompose_for_generation(model, inputs, multi_token_decode=True)
    assert only_decode == "decode"


def test_static_cache_decode_loop_over_the_saved_graph(tiny, tmp_path):
    """The ONNX Runtime loop of the docs: zeroed buffers shaped from each input.* (the symbolic dim
    = max_cache_len), each input/output pair bound to one buffer, a 4-D bool mask, positions
    advanced by the tokens fed, logits for every query position."""
    import onnxruntime as ort
    from transformers import GenerationConfig

    _, model, tokenizer = tiny
    prompt = tokenizer(["hello world, hello export"], return_tensors="pt")
    max_cache_len, new_tokens = 32, 8
    exported = OnnxExporter().export_for_generation(
        model, prompt, config=OnnxConfig(dynamic=True), multi_token_decode=True,
        generation_config=GenerationConfig(cache_implementation="static", max_cache_len=max_cache_len))
    exported["decode"].save(tmp_path / "decode.onnx")
    session = ort.InferenceSession(str(tmp_path / "decode.onnx"))
    binding = session.io_binding()
    buffers = {}
    for spec in session.get_inputs():
        if spec.name.startswith("input."):
            shape = [d if isinstance(d, int) else max_cache_len for d in spec.shape]
            buffers[spec.name] = ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, np.float32))
            binding.bind_ortvalue_input(spec.name, buffers[spec.name])
    ids = prompt["input_ids"].numpy()
    position, tokens = 0, []
    feed = ids
    for _ in range(new_tokens):
        query = feed.shape[1]
        positions = np.arange(position, position + query)[None]
        mask = (np.arange(max_cache_len)[None, None, None, :] <= positions[:, None, :, None])
        binding.bind_cpu_input("input_ids", feed.astype(np.int64))
        binding.bind_cpu_input("position_ids", positions.astype(np.int64))
        binding.bind_cpu_input("attention_mask", mask)
        binding.clear_binding_outputs()  # logits first (their shape changes), then each cache onto its buffer
        binding.bind_output("logits")
        for name, buf in buffers.items():
            binding.bind_ortvalue_output("output." + name[len("input."):], buf)
        session.run_with_iobinding(binding)
        logits = binding.get_outputs()[0].numpy()
        assert logits.shape[1] == query  # every query position
        token = int(logits[0, -1].argmax())
        tokens.append(token)
        position += query
        feed = np.array([[token]])
    with torch.no_grad():
        ref = model.generate(**prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    assert tokens == ref[0, ids.shape[1]:].tolist()


# --------------------------------------------------------------------------------------------
# ExportedModel files


def test_save_pretrained_from_pretrained_and_call(tiny, inputs, tmp_path):
    _, model, _ = tiny
    exported = OnnxExporter().export(model, inputs, OnnxConfig(dynamic=True))
    exported.save_pretrained(tmp_path / "exported")
    assert {"export.json", "model.onnx", "model.onnx.data", "config.json", "tokenizer.json"} <= {
        p.name for p in (tmp_path / "exported").iterdir()}
    loaded = ExportedModel.from_pretrained(tmp_path / "exported", device="cpu")
    assert list(loaded.components) == ["model"]
    with pytest.raises(ValueError, match="cuda"):
        ExportedModel.from_pretrained(tmp_path / "exported", device="cuda")
    outputs = loaded(**inputs, token_type_ids=torch.zeros_like(inputs["input_ids"]))  # unknown kwargs are dropped
    assert_close_where_real(outputs.logits.numpy(), eager_logits(model, inputs), inputs["attention_mask"])
    assert loaded.config.model_type == "qwen3"
    generation = OnnxExporter().export_for_generation(model, inputs, OnnxConfig(dynamic=True))
    generation.save_pretrained(tmp_path / "generation")
    again = ExportedModel.from_pretrained(tmp_path / "generation")
    with torch.no_grad():
        ref = model.generate(**inputs, max_new_tokens=5, do_sample=False)
    assert torch.equal(again.generate(**inputs, max_new_tokens=5), ref)


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.parametrize("source", ["checkpoint", "live"])
@pytest.mark.parametrize("mode", ["forward", "generation"])
def test_cli_and_python_exports_are_byte_identical(tiny, inputs, tmp_path, export_model, source, mode):
    path, model, _ = tiny
    exporter, config = OnnxExporter(), OnnxConfig(dynamic=True, ort_fusions="cpu")
    subject = str(path) if source == "checkpoint" else model
    if mode == "forward":
        exported = exporter.export(subject, {"input_ids": inputs["input_ids"]}, config, verify=False)
        cli = ["--onnx-ops", "ort", "--inputs", "input_ids"]
    else:
        exported = exporter.export_for_generation(subject, inputs, config, verify=False)
        cli = ["--for-generation", "--onnx-ops", "ort-gqa"]
    exported.save_pretrained(tmp_path / "python")
    export_model(path, tmp_path / "cli", *cli)
    python_files, cli_files = _files(tmp_path / "python"), _files(tmp_path / "cli")
    assert sorted(python_files) == sorted(cli_files)
    differ = [name for name in cli_files if python_files[name] != cli_files[name]]
    assert not differ, f"files differ: {differ}"


def test_verification_is_recorded_only_in_export_json(tiny, inputs, tmp_path):
    _, model, _ = tiny
    exporter, config = OnnxExporter(), OnnxConfig(dynamic=True)
    plain = exporter.export(model, inputs, config, verify=False)
    checked = exporter.export(model, inputs, config)
    assert "verification" not in plain.manifest and checked.manifest["verification"]["passed"]
    plain.save_pretrained(tmp_path / "a")
    checked.save_pretrained(tmp_path / "b")
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert [n for n in a if a[n] != b[n]] == ["export.json"]
    manifest = json.loads(b["export.json"])
    del manifest["verification"]
    assert manifest == json.loads(a["export.json"])


def test_quantizer_maps_to_weight_quantization(tiny, inputs):
    _, model, _ = tiny
    exported = OnnxExporter().export(model, inputs, OnnxConfig(dynamic=True, quantizer=WeightQuantizer("int8")))
    assert exported.manifest["quantization"]["weights"] == "int8"
    verification = exported.manifest["verification"]
    assert verification["tolerance"] is None and verification["max_abs_diff"] < 0.1  # quantized: recorded only


# --------------------------------------------------------------------------------------------
# Zero-copy export from a live model


RSS_SCRIPT = textwrap.dedent("""
    import json, sys, torch
    from transformers import AutoModelForCausalLM, Qwen3Config
    from hfexport import OnnxConfig, OnnxExporter

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=8192, hidden_size=512, intermediate_size=1536, num_hidden_layers=12,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=512,
                         tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(config).eval()
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    inputs = {"input_ids": torch.ones(1, 4, dtype=torch.long)}
    exporter = OnnxExporter()
    before = status("VmRSS:")
    open("/proc/self/clear_refs", "w").write("5")  # peak RSS := current RSS
    exported = exporter.export(model, inputs, OnnxConfig(dynamic=True), verify=False)
    peak = status("VmHWM:")
    print(json.dumps({"weights": weights, "before": before, "peak": peak}))
""")


# What the export itself holds at its peak, whatever the model's size: the weight writer's bands
# (16 MiB read + 16 MiB transposed per worker thread, up to 4) and the graph.
EXPORT_BOUND = 96 << 20


def test_live_model_export_copies_no_weights(tmp_path):
    """Peak RSS during the export of a live 180 MB model stays within the model's own memory plus a
    bound that does not grow with the model: the core reads the model's tensors where they are (a
    copy of the weights alone would add 180 MB)."""
    proc = subprocess.run([sys.executable, "-c", RSS_SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    added = m["peak"] - m["before"]
    print(f"weights {m['weights'] / 2**20:.0f} MiB, export added {added / 2**20:.1f} MiB "
          f"({100 * added / m['weights']:.1f} % of the weights)")
    assert m["weights"] > 1.5 * EXPORT_BOUND  # a copy of the weights could not hide under the bound
    assert added < EXPORT_BOUND, f"export added {added / 2**20:.1f} MiB of {m['weights'] / 2**20:.0f} MiB weights"


# --------------------------------------------------------------------------------------------
# Text in, text out


def _generation_export(tiny, tmp_path, **config) -> Path:
    _, model, tokenizer = tiny
    exported = OnnxExporter().export_for_generation(model, tokenizer(["hi"], return_tensors="pt"),
                                                    OnnxConfig(dynamic=True, **config), verify=False)
    exported.save_pretrained(tmp_path / "gen")
    return tmp_path / "gen"


def _reference_text(model, tokenizer, ids: list[int], max_new_tokens: int) -> str:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)


@pytest.mark.parametrize("chat", [False, True])
def test_cli_prompt_round_trips_text(tiny, tmp_path, hfexport_bin, chat):
    from conftest import cli_env

    _, model, tokenizer = tiny
    out = _generation_export(tiny, tmp_path, ort_fusions="cpu")
    prompt, system = "hello world, hello", "be brief"
    args = [str(hfexport_bin), "generate", str(out), "--prompt", prompt, "--max-new-tokens", "12"]
    if chat:
        args += ["--chat", "--system", system]
        ids = tokenizer.apply_chat_template([{"role": "system", "content": system},
                                             {"role": "user", "content": prompt}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False)
    else:
        ids = tokenizer(prompt)["input_ids"]
    proc = subprocess.run(args, capture_output=True, env=cli_env(), timeout=120)  # bytes: the text may hold \r
    assert proc.returncode == 0, proc.stderr
    expected = _reference_text(model, tokenizer, list(ids), 12)
    assert expected.strip(), "the reference generated no text: the test would not see a difference"
    assert proc.stdout.decode() == expected + "\n"
    # The Python generate takes text too, and streams it.
    exported = ExportedModel.from_pretrained(out)
    pieces = []
    text = exported.generate(prompt, max_new_tokens=12, chat=chat, system=system if chat else None,
                             streamer=pieces.append)
    assert text == expected and "".join(pieces) == expected


def test_cli_prompt_errors_are_one_line(tiny, tmp_path, run_hfexport):
    from conftest import assert_clean_error

    out = _generation_export(tiny, tmp_path)
    assert_clean_error(run_hfexport("generate", out, "--prompt", "hi", "--input-ids", "1,2"), None, "--prompt")
    assert_clean_error(run_hfexport("generate", out, "--input-ids", "1,2", "--chat"), None, "--chat")
    (out / "tokenizer.json").unlink()
    assert_clean_error(run_hfexport("generate", out, "--prompt", "hi"), None, "tokenizer.json")


# --------------------------------------------------------------------------------------------
# Version pinning


def test_runtime_version_drift_warns_once_naming_both(tiny, inputs, tmp_path, caplog, run_hfexport):
    import onnxruntime

    _, model, _ = tiny
    exported = OnnxExporter().export_for_generation(model, inputs, OnnxConfig(dynamic=True), verify=False)
    assert exported.manifest["tested_with"]["onnxruntime"] == onnxruntime.__version__
    exported.save_pretrained(tmp_path / "e")
    manifest = json.loads((tmp_path / "e" / "export.json").read_text())
    manifest["tested_with"]["onnxruntime"] = "0.1.0"
    (tmp_path / "e" / "export.json").write_text(json.dumps(manifest))
    with caplog.at_level("WARNING", logger="hfexport"):
        ExportedModel.from_pretrained(tmp_path / "e").generate(inputs["input_ids"], max_new_tokens=2)
    drift = [r.message for r in caplog.records if "tested with" in r.message]
    assert len(drift) == 1 and "onnxruntime 0.1.0" in drift[0] and onnxruntime.__version__ in drift[0]
    proc = run_hfexport("generate", tmp_path / "e", "--input-ids", "1,5,6", "--max-new-tokens", "2")
    assert proc.returncode == 0 and "onnxruntime 0.1.0" in proc.stderr


def test_openvino_cli_runner_warns_on_drift(tiny, inputs, tmp_path, run_hfexport):
    _, model, _ = tiny
    exported = OpenVINOExporter().export_for_generation(model, inputs, OpenVINOConfig(dynamic=True), verify=False)
    exported.save_pretrained(tmp_path / "e")
    manifest = json.loads((tmp_path / "e" / "export.json").read_text())
    assert "openvino" in manifest["tested_with"]
    manifest["tested_with"]["openvino"] = "1999.1.0"
    (tmp_path / "e" / "export.json").write_text(json.dumps(manifest))
    proc = run_hfexport("generate", tmp_path / "e", "--input-ids", "1,5,6", "--max-new-tokens", "2")
    assert proc.returncode == 0, proc.stderr
    assert "openvino 1999.1.0" in proc.stderr


# --------------------------------------------------------------------------------------------
# Bad options: one clear error naming the field


@pytest.mark.parametrize("make, mentions", [
    (lambda: OnnxConfig(dynamik=True), "dynamik"),
    (lambda: OnnxConfig(opset_version=17), "opset_version"),
    (lambda: OnnxConfig(ort_fusions="cuda"), "ort_fusions"),
    (lambda: OnnxConfig(dtype="int8"), "dtype"),
    (lambda: OnnxConfig(quantizer=object()), "quantizer"),
    (lambda: OpenVINOConfig(compress_to_fp16=True, dtype="bfloat16"), "compress_to_fp16"),
    (lambda: AutoExportConfig.from_dict({"export_format": "executorch", "backend": "cuda"}), "backend"),
    (lambda: AutoExportConfig.from_dict({"export_format": "tflite"}), "tflite"),
    (lambda: AutoExportConfig.from_dict({"dynamic": True}), "export_format"),
])
def test_bad_config_fields_are_named(make, mentions):
    with pytest.raises(ConfigError, match=mentions):
        make()


def test_bad_export_requests_are_named_and_leave_nothing(tiny, inputs, tmp_path):
    import tempfile

    _, model, _ = tiny
    before = set(Path(tempfile.gettempdir()).glob("hfexport-*"))
    with pytest.raises(hfexport.ExportError, match="token_type_ids"):
        OnnxExporter().export(model, {**inputs, "token_type_ids": torch.zeros_like(inputs["input_ids"])},
                              OnnxConfig(dynamic=True))
    with pytest.raises(ConfigError, match="dynamic_shapes: 'pixel_values'"):
        OnnxExporter().export(model, inputs, OnnxConfig(dynamic_shapes={"pixel_values": {0: Dim("b")}}))
    with pytest.raises(ConfigError, match="stateful"):
        OpenVINOExporter().export_for_generation(model, inputs, OpenVINOConfig(stateful=False))
    with pytest.raises(ConfigError, match="cache_implementation 'offloaded'"):
        OnnxExporter().export_for_generation(model, inputs, OnnxConfig(),
                                             generation_config={"cache_implementation": "offloaded"})
    with pytest.raises(hfexport.ExportError, match="missing"):
        OnnxExporter().export(tmp_path / "missing", inputs)
    with pytest.raises(TypeError, match="OnnxConfig"):
        OnnxExporter().export(model, inputs, OpenVINOConfig())
    assert set(Path(tempfile.gettempdir()).glob("hfexport-*")) <= before  # no new (earlier exports may go)


def test_checkpoint_path_export_verifies_on_request(tiny, inputs):
    path, _, _ = tiny
    exported = OnnxExporter().export(str(path), inputs, OnnxConfig(dynamic=True), verify=True)
    assert exported.manifest["verification"]["passed"]
    assert "verification" not in OnnxExporter().export(path, inputs, OnnxConfig(dynamic=True)).manifest


# --------------------------------------------------------------------------------------------
# Every family from a live model: state_dict layouts (tied weights, buffers, fused experts)


def _first_case_of_each_family():
    from tiny_configs import cases

    seen, out = set(), []
    for c in cases("forward"):
        if c.model_type not in seen:
            seen.add(c.model_type)
            out.append(c)
    return out


@pytest.mark.parametrize("case", _first_case_of_each_family(), ids=lambda c: c.name)
def test_every_family_exports_from_a_live_model(case, tmp_path):
    from conftest import build_tiny_model

    _, model = build_tiny_model(tmp_path / "ckpt", case.model_type, case.config)
    ids = torch.tensor([[1, 5, 9, 14, 3, 7], [0, 0, 4, 8, 12, 6]])
    inputs = {"input_ids": ids, "attention_mask": (ids != 0).long()}
    exported = OnnxExporter().export(model, inputs, OnnxConfig(dynamic=True))
    verification = exported.manifest["verification"]
    assert verification["passed"] and verification["max_abs_diff"] <= TOL, verification


def test_bfloat16_live_model_exports_in_float32(tiny, inputs):
    """A bf16 model's weights are read as bf16 and widened by the core (no copy in Python)."""
    path, _, _ = tiny
    from transformers import AutoModelForCausalLM

    bf16 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    exported = OnnxExporter().export(bf16, inputs, OnnxConfig(dynamic=True), verify=False)
    assert exported.manifest["source"]["dtype"] == "bfloat16" and exported.manifest["dtype"] == "float32"
    with torch.no_grad():
        ref = bf16.float()(**inputs).logits.numpy()  # the same bf16 values, computed in float32
    assert_close_where_real(exported(**inputs).logits.numpy(), ref, inputs["attention_mask"])


def test_verification_above_tolerance_warns(tiny, inputs, caplog, monkeypatch):
    from hfexport import exporters

    _, model, _ = tiny
    monkeypatch.setitem(exporters.TOLERANCE, "float32", 0.0)  # any rounding difference is now too much
    with caplog.at_level("WARNING", logger="hfexport"):
        exported = OnnxExporter().export(model, inputs, OnnxConfig(dynamic=True))
    verification = exported.manifest["verification"]
    assert verification["passed"] is False and verification["max_abs_diff"] > 0
    assert any("differ from the eager model" in r.message for r in caplog.records)


@pytest.mark.parametrize("module, names", [
    ("configs", ["OnnxConfig", "OpenVINOConfig", "ExportConfigMixin"]), ("auto", ["AutoExportConfig", "AutoHfExporter"]),
    ("base", ["ExportedModel", "ExportedComponent", "HfExporter"]), ("utils", ["decompose_for_generation"]),
    ("exporter_onnx", ["OnnxExporter"]), ("exporter_openvino", ["OpenVINOExporter"])])
def test_transformers_exporters_module_paths(module, names):
    """`from transformers.exporters.<module> import X` becomes `from hfexport.<module> import X`."""
    import importlib

    loaded = importlib.import_module(f"hfexport.{module}")
    for name in names:
        assert getattr(loaded, name) is getattr(hfexport, name)
