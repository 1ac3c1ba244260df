"""Our exports in the runtimes' own runners, as their users run them.

ExecuTorch: `executorch.extension.llm.runner.TextLLMRunner` (the Python face of the C++ runner
ExecuTorch's Android and iOS apps use) loads `model.pte` exported with `--static-cache
--inputs input_ids,cache_position` (its forward(tokens, input_pos) convention: the KV cache in the
method's buffers, the mask built inside) and the export's `tokenizer.json`, and prints transformers'
greedy continuation, for every family, float32 and 8da4w, with and without hfexport's kernels.
8da4w quantizes activations to int8, so its text is compared with the same program run by
ExecuTorch's runtime through hfexport's loop, and its first token with transformers' over the same
dequantized weights (within the int8 rounding: tokens are not compared where transformers' top two
are that close)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY_CONFIG, build_tiny_model
from tiny_configs import cases

import hfexport
from test_generation import CONV_STATE_TYPES

NEW_TOKENS = 12
MAX_CACHE_LEN = 64
PROMPT = "hello world, the quick"
CORPUS = ["hello world, the quick brown fox jumps over the lazy dog. 0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ!?"] * 20

# The first generation case of each family.
FAMILIES = {}
for _case in cases("generation"):
    FAMILIES.setdefault(_case.model_type, _case.overrides)


def train_tokenizer(directory: Path) -> int:
    """A byte-level BPE tokenizer.json over ASCII text only: every token decodes to whole
    characters, so a random model's tokens print as text (the runner's callback takes UTF-8).
    No eos: the runner and transformers both make exactly NEW_TOKENS tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=120, special_tokens=["<s>", "</s>"],
                                                        show_progress=False))
    tok.save(str(directory / "tokenizer.json"))
    return tok.get_vocab_size()


@pytest.fixture(scope="module")
def family_model(tmp_path_factory):
    built = {}

    def get(model_type: str):
        if model_type not in built:
            d = tmp_path_factory.mktemp(f"runner-{model_type}") / "hf"
            d.mkdir()
            vocab = train_tokenizer(d)
            config = {**TINY_CONFIG, **FAMILIES[model_type], "vocab_size": vocab, "bos_token_id": None,
                      "eos_token_id": None, "pad_token_id": None}
            path, model = build_tiny_model(d, model_type, config, weight_std=0.2)
            train_tokenizer(path)  # save_pretrained left it in place; written again to be sure
            built[model_type] = (path, model)
        return built[model_type]

    return get


def text_llm_runner(pte: Path, tokenizer: Path, prompt: str, n: int) -> str:
    """ExecuTorch's runner, as its docs show it: greedy (temperature 0), n new tokens."""
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    pieces: list[str] = []
    runner = TextLLMRunner(str(pte), str(tokenizer))
    runner.generate(prompt, GenerationConfig(max_new_tokens=n, temperature=0.0, echo=False), pieces.append)
    return "".join(pieces)


def hf_greedy(model, ids: torch.Tensor, n: int) -> torch.Tensor:
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, ids.shape[1]:]


@pytest.mark.parametrize("kernels", ["stock", "hfexport"])
@pytest.mark.parametrize("weights", ["float32", "8da4w"])
@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_executorch_text_llm_runner(model_type, weights, kernels, family_model, tmp_path, export_model):
    pytest.importorskip("executorch")
    import hfexport.executorch_runner as er
    from tokenizers import Tokenizer

    if kernels == "hfexport":
        assert er.load_hfexport_kernels(), "hfexport's ExecuTorch kernel library was not built"
    path, model = family_model(model_type)
    extra = ["--quantize", "int4"] if weights == "8da4w" else []
    out = export_model(path, tmp_path / "out", "--format", "executorch", "--for-generation", "--static-cache",
                       "--max-cache-len", str(MAX_CACHE_LEN), "--inputs", "input_ids,cache_position",
                       "--executorch-kernels", kernels, *extra)
    inputs = json.loads((out / "export.json").read_text())["components"]["decode"]["inputs"]
    assert [i["name"] for i in inputs] == ["input_ids", "cache_position"]
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    text = text_llm_runner(out / "model.pte", out / "tokenizer.json", PROMPT, NEW_TOKENS)
    ids = torch.tensor([tokenizer.encode(PROMPT).ids])
    if weights == "float32":
        want = tokenizer.decode(hf_greedy(model, ids, NEW_TOKENS).tolist(), skip_special_tokens=False)
        assert text == want, f"{model_type}: TextLLMRunner printed {text!r}, transformers {want!r}"
        return
    # 8da4w: the runner runs the program as hfexport's own loop over ExecuTorch's runtime does ...
    ours = hfexport.ExportedModel.from_pretrained(out).generate(ids.numpy(), max_new_tokens=NEW_TOKENS, ignore_eos=True)
    assert text == tokenizer.decode(ours[0, ids.shape[1]:].tolist(), skip_special_tokens=False)
    # ... and its first token is transformers' over the dequantized weights, unless a near-tie.
    from test_quantized import quantized_reference

    with torch.no_grad():
        logits = quantized_reference(model, 4, 32, positive_bf16=True)(ids).logits[0, -1].numpy()
    top = np.sort(logits)[-2:]
    if top[1] - top[0] > 0.05 * float(np.abs(logits).max()):
        assert int(ours[0, ids.shape[1]]) == int(logits.argmax())


def test_executorch_cache_position_form_refuses_what_it_cannot_serve(family_model, tmp_path, run_hfexport):
    """cache_position is the static cache's alternative to mask and positions, nothing else."""
    from conftest import assert_clean_error

    path, _ = family_model("llama")
    base = ["export", str(path), "-o", str(tmp_path / "out"), "--format", "executorch", "--for-generation"]
    for extra, mentions in [
        (["--inputs", "input_ids,cache_position"], ["--inputs", "static"]),
        (["--static-cache", "--max-cache-len", "16", "--inputs", "input_ids,cache_position,attention_mask"],
         ["--inputs"]),
        (["--static-cache", "--max-cache-len", "16", "--inputs", "input_ids,cache_pos"], ["--inputs"]),
        (["--static-cache", "--max-cache-len", "16", "--inputs", "input_ids,cache_position", "--no-alloc-graph-io"],
         ["--inputs", "--no-alloc-graph-io"]),
    ]:
        assert_clean_error(run_hfexport(*base, *extra), tmp_path / "out", *mentions)


def test_cache_position_form_in_every_runner(family_model, tmp_path, export_model):
    """The same form from ONNX and .pt2 runs in hfexport's loops (batch 1), and a left-padded batch
    is refused in one line rather than run wrong."""
    path, model = family_model("qwen3")
    ids = torch.tensor([[5, 9, 17, 33, 2, 41, 7]])
    want = hf_greedy(model, ids, 8).tolist()
    for fmt in ("onnx", "pt2"):
        out = export_model(path, tmp_path / fmt, "--format", fmt, "--for-generation", "--static-cache",
                           "--max-cache-len", "32", "--inputs", "input_ids,cache_position")
        exported = hfexport.ExportedModel.from_pretrained(out)
        assert exported.generate(ids.numpy(), max_new_tokens=8, ignore_eos=True)[0, 7:].tolist() == want, fmt
        out = export_model(path, tmp_path / f"{fmt}-b2", "--format", fmt, "--for-generation", "--static-cache",
                           "--max-cache-len", "32", "--batch-size", "2", "--inputs", "input_ids,cache_position")
        batch = np.array([[0, 0, 5, 9], [3, 4, 5, 9]])
        with pytest.raises(hfexport.GenerationError, match="cache_position"):
            hfexport.ExportedModel.from_pretrained(out).generate(batch, attention_mask=(batch != 0).astype(np.int64),
                                                                 max_new_tokens=2)


def test_hfexport_generate_runs_the_cache_position_form(family_model, tmp_path, export_model, hfexport_bin):
    """`hfexport generate` over a .pte of this form (hfexport's C++ ExecuTorch loop)."""
    pytest.importorskip("executorch")
    path, model = family_model("llama")
    out = export_model(path, tmp_path / "out", "--format", "executorch", "--for-generation", "--static-cache",
                       "--max-cache-len", "32", "--inputs", "input_ids,cache_position")
    ids = [5, 9, 17, 33, 2, 41, 7]
    proc = subprocess.run([str(hfexport_bin), "generate", str(out), "--input-ids", ",".join(map(str, ids)),
                           "--max-new-tokens", "8", "--ignore-eos"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert [int(t) for t in proc.stdout.split()] == hf_greedy(model, torch.tensor([ids]), 8).tolist()


OPTIMUM = Path(__file__).resolve().parents[2] / ".venv-optimum-onnx" / "bin" / "python"


def optimum_generate(out: Path, ids: np.ndarray, mask: np.ndarray, n: int, tmp_path: Path) -> subprocess.CompletedProcess:
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"input_ids": ids.tolist(), "attention_mask": mask.tolist(), "max_new_tokens": n}))
    return subprocess.run([str(OPTIMUM), str(Path(__file__).with_name("optimum_causal_lm.py")), str(out), str(request)],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("model_type, layout", [(t, "optimum") for t in FAMILIES] + [("llama", "default")])
def test_optimum_ort_model_for_causal_lm(model_type, layout, family_model, tmp_path, export_model):
    """`ORTModelForCausalLM.from_pretrained(OUT).generate(...)` on the ONNX generation export
    (one graph for prompt and steps, `past_key_values.{i}.key` -> `present.{i}.key`) laid out as
    optimum writes it (`--onnx-layout optimum`: onnx/model.onnx + onnx/model.onnx_data) and, for
    one family, as hfexport's default (decode.onnx, which optimum also finds), on a
    left-padded batch of two: transformers' greedy tokens. optimum builds the first step's empty
    past from its own reading of config.json (head_dim only for a few model types, else hidden /
    heads; num_key_value_heads only for others: huggingface/optimum#2379); where that reading is
    not the cache shape (which is the model's), it cannot run the export, and the test shows that
    it is optimum's reading that is off."""
    if not OPTIMUM.is_file():
        pytest.skip("no .venv-optimum-onnx (scripts/setup.sh makes it)")
    from test_generation import hf_generate, make_prompts

    path, model = family_model(model_type)
    out = export_model(path, tmp_path / "out", "--for-generation", *(["--onnx-layout", layout] if layout != "default" else []))
    if layout == "optimum":
        assert sorted(p.name for p in (out / "onnx").iterdir()) == ["model.onnx", "model.onnx_data"]
    ids, mask = make_prompts(model.config.vocab_size, (9, 5))
    proc = optimum_generate(out, ids, mask, NEW_TOKENS, tmp_path)
    if model_type == "granitemoehybrid":
        assert proc.returncode != 0 and "layer_types must be a list strings in" in proc.stderr, proc.stderr[-3000:]
        pytest.xfail("optimum-onnx pins transformers < 4.58, whose GraniteMoeHybridConfig refuses the layer_types "
                     "names transformers 5 writes (linear_attention, full_attention); past that it would feed "
                     "past_key_values.{i} to every layer, as with lfm2")
    if "does not recognize this architecture" in proc.stderr:
        assert proc.returncode != 0 and f"model type `{model_type}`" in proc.stderr, proc.stderr[-3000:]
        pytest.xfail(f"optimum-onnx pins transformers < 4.58, which has no {model_type}")
    if proc.returncode == 3:
        shapes = json.loads(proc.stdout.strip().splitlines()[-1])
        config = model.config
        head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        assert shapes["graph"] == [getattr(config, "num_key_value_heads", config.num_attention_heads), head]
        assert shapes["optimum_reads"] != shapes["graph"]
        pytest.xfail(f"optimum reads the cache as {shapes['optimum_reads']} (kv heads, head size), the model's is "
                     f"{shapes['graph']} (huggingface/optimum#2379)")
    if model_type in CONV_STATE_TYPES:
        assert proc.returncode != 0 and "KeyError: 'past_key_values.0.key'" in proc.stderr, proc.stderr[-3000:]
        pytest.xfail("optimum-onnx's ORTModelForCausalLM feeds past_key_values.{i} to every layer; a convolution "
                     "layer's state is past_conv.{i} (transformers.js's name), which it does not know")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == hf_generate(model, ids, mask, NEW_TOKENS).tokens.tolist()


def test_optimum_layout_in_hfexport_and_onnxruntime_genai(family_model, tmp_path, export_model):
    """The optimum layout is still an hfexport export: `hfexport generate`, ExportedModel and
    onnxruntime-genai (its genai_config.json names onnx/model.onnx) run it."""
    pytest.importorskip("onnxruntime_genai")
    from test_generation import hf_generate, make_prompts

    path, model = family_model("llama")
    out = export_model(path, tmp_path / "out", "--for-generation", "--onnx-layout", "optimum")
    assert json.loads((out / "genai_config.json").read_text())["model"]["decoder"]["filename"] == "onnx/model.onnx"
    ids, mask = make_prompts(model.config.vocab_size, (7,))
    want = hf_generate(model, ids, mask, 8).tokens[0].tolist()
    exported = hfexport.ExportedModel.from_pretrained(out)
    assert exported.generate(ids, max_new_tokens=8, ignore_eos=True)[0, 7:].tolist() == want
    exported.save_pretrained(tmp_path / "copy")  # onnx/ comes along
    copy = hfexport.ExportedModel.from_pretrained(tmp_path / "copy")
    assert copy.generate(ids, max_new_tokens=8, ignore_eos=True)[0, 7:].tolist() == want
    exported["decode"].save(tmp_path / "single" / "decode.onnx")  # one graph, its data beside it
    assert (tmp_path / "single" / "decode.onnx.data").is_file()
    from test_onnxruntime_genai import genai_generate

    assert genai_generate(out, ids, 8)[0] == want


def test_optimum_layout_refuses_what_optimum_cannot_run(family_model, tmp_path, run_hfexport):
    from conftest import assert_clean_error

    path, _ = family_model("llama")
    base = ["export", str(path), "-o", str(tmp_path / "out"), "--onnx-layout"]
    for extra, mentions in [
        (["optimum", "--for-generation", "--static-cache", "--max-cache-len", "16"], ["--onnx-layout", "--static-cache"]),
        (["transformers.js", "--for-generation"], ["--onnx-layout", "optimum"]),
        (["optimum", "--format", "openvino"], ["--onnx-layout", "onnx"]),
    ]:
        assert_clean_error(run_hfexport(*base, *extra), tmp_path / "out", *mentions)
    # The layout's one graph for prompt and steps, with any op profile (multi-token decode implied).
    assert run_hfexport(*base, "optimum", "--for-generation", "--onnx-ops", "standard").returncode == 0
    manifest = json.loads((tmp_path / "out" / "export.json").read_text())
    assert list(manifest["components"]) == ["decode"] and manifest["components"]["decode"]["file"] == "onnx/model.onnx"
