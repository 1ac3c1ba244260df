"""An ONNX generation export loads in onnxruntime-genai (og.Model reads the genai_config.json the
exporter writes) and its own C++ loop, og.Generator with greedy search, generates token for token
what transformers generates, its logits within 1e-4. The default export (ort-gqa: one decode graph,
the cache shared in place) and the standard-op multi-token one (the cache passed past -> present)
both; exports onnxruntime-genai cannot run (prefill + decode graphs, static caches) get no config."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_generation import CONFIGS, TOL, hf_generate, make_prompts, tiny  # noqa: F401 (fixture)

og = pytest.importorskip("onnxruntime_genai")

NEW_TOKENS = 12
GENAI_CASES = ["llama-gqa-tied-rope_llama3", "mistral-gqa-rope_linear", "qwen2-gqa-qkv_bias-theta1e6",
               "qwen3-gqa-qk_norm-head_dim16"]
# The first generation case of every other model type (onnxruntime-genai's loop only reads the
# config's model type for its own defaults; the graph is ours).
# lfm2: its convolution layers' state named in the config (past_conv_names, layer_types, conv_cache_size);
# qwen3_5 and granitemoehybrid: convolution and recurrent state by name templates, no layer_types.
GENAI_TYPES = {"gemma", "gemma2", "gemma3_text", "phi3", "granite", "smollm3", "lfm2", "lfm2_moe",
               "qwen3_5_text", "qwen3_5_moe_text", "granitemoehybrid"}
_FIRST = {m: n for n, (m, _) in reversed(CONFIGS.items())}
GENAI_CASES += [n for t, n in _FIRST.items() if t in GENAI_TYPES]
# Model types onnxruntime-genai 0.18 refuses (or, gpt2, runs with other inputs): no config for them.
NO_GENAI_CASES = [n for t, n in _FIRST.items() if t not in GENAI_TYPES | {"llama", "mistral", "qwen2", "qwen3"}]


def genai_generate(out, prompt: np.ndarray, n: int) -> tuple[list[int], list[np.ndarray]]:
    model = og.Model(str(out))
    params = og.GeneratorParams(model)
    total = prompt.shape[1] + n
    # min_length: the tiny models' eos must not end the comparison early.
    params.set_search_options(max_length=total, min_length=total, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt.astype(np.int32))
    tokens, logits = [], []
    while not generator.is_done():
        logits.append(np.array(generator.get_logits()).reshape(1, -1))
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return tokens, logits


@pytest.mark.parametrize("args", [[], ["--onnx-ops", "standard", "--multi-token-decode"]],
                         ids=["default", "standard-multi-token"])
@pytest.mark.parametrize("name", GENAI_CASES)
def test_genai_generator_matches_transformers(name, args, tiny, tmp_path, export_model):  # noqa: F811
    tm = tiny(name)
    out = export_model(tm.model_dir, tmp_path / "out", "--for-generation", *args)
    config = json.loads((out / "genai_config.json").read_text())
    assert config["search"]["past_present_share_buffer"] is (not args)
    check_genai_generation(name, tm.model, tm.vocab, out)


def test_genai_runs_the_text_model_of_a_qwen3_5_vision_language_checkpoint(tmp_path, export_model):
    """Qwen3.5 ships as Qwen3_5ForConditionalGeneration: the export is its text model, which
    onnxruntime-genai runs as its `qwen3_5_text` type (the type its own builder writes for it), the
    convolution and recurrent state found through the name templates."""
    from conftest import build_tiny_model
    from test_onnx_parity import BASE
    from tiny_configs import case
    from transformers import AutoModelForCausalLM

    text = {**BASE, **case("qwen3_5_text-gqa-khead2-vhead4-conv4-rope_half").overrides}
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4, out_hidden_size=BASE["hidden_size"])
    model_dir, _ = build_tiny_model(tmp_path / "hf", "qwen3_5", dict(text_config=text, vision_config=vision),
                                    causal_lm=False)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32).eval()
    out = export_model(model_dir, tmp_path / "out", "--for-generation")
    genai = json.loads((out / "genai_config.json").read_text())["model"]
    assert genai["type"] == "qwen3_5_text"
    assert genai["decoder"]["inputs"]["past_recurrent_names"] == "past_ssm.%d"
    check_genai_generation("qwen3_5", model, text["vocab_size"], out)


def check_genai_generation(name, model, vocab, out) -> None:
    ids, mask = make_prompts(vocab, (9,))
    want = hf_generate(model, ids, mask, NEW_TOKENS)
    tokens, logits = genai_generate(out, ids, NEW_TOKENS)
    # min_length keeps onnxruntime-genai from ending early by suppressing eos; transformers (eos
    # unset) may pick it: compare up to that step (its logits included).
    want_tokens = want.tokens[0].tolist()
    eos = model.config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    n = next((i for i, t in enumerate(want_tokens) if t in eos), NEW_TOKENS)
    assert tokens[:n] == want_tokens[:n], f"{name}: onnxruntime-genai {tokens} vs transformers {want_tokens}"
    err = max(float(np.abs(got - ref).max()) for got, ref in zip(logits[: n + 1], want.logits[: n + 1]))
    assert err <= TOL, f"{name}: onnxruntime-genai logits differ from transformers' by {err:.3e}"


@pytest.mark.parametrize("name", NO_GENAI_CASES)
def test_no_genai_config_for_model_types_genai_cannot_run(name, tiny, tmp_path, export_model):  # noqa: F811
    out = export_model(tiny(name).model_dir, tmp_path / "out", "--for-generation")
    assert not (out / "genai_config.json").exists()


@pytest.mark.parametrize("args", [["--onnx-ops", "ort"], ["--static-cache", "--max-cache-len", "32"]])
def test_no_genai_config_where_genai_cannot_run(args, tiny, tmp_path, export_model):  # noqa: F811
    out = export_model(tiny(GENAI_CASES[0]).model_dir, tmp_path / "out", "--for-generation", *args)
    assert not (out / "genai_config.json").exists()
    assert not (export_model(tiny(GENAI_CASES[0]).model_dir, tmp_path / "fwd") / "genai_config.json").exists()
