"""An ONNX generation export loads in onnxruntime-genai (og.Model reads the genai_config.json the
exporter writes) and its own C++ loop, og.Generator with greedy search, generates token for token
what transformers generates, its logits within 1e-4. The default export (ort-gqa: one decode graph,
the cache shared in place) and the standard-op multi-token one (the cache passed past -> present)
both; exports onnxruntime-genai cannot run (prefill + decode graphs, static caches) get no config."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_generation import CONFIGS, TOL, hf_generate, make_prompts, tiny  # noqa: F401 (fixture)

og = pytest.importorskip("onnxruntime_genai")

NEW_TOKENS = 12
GENAI_CASES = ["llama-gqa-tied-rope_llama3", "mistral-gqa-rope_linear", "qwen2-gqa-qkv_bias-theta1e6",
               "qwen3-gqa-qk_norm-head_dim16"]


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
    ids, mask = make_prompts(tm.vocab, (9,))
    want = hf_generate(tm.model, ids, mask, NEW_TOKENS)
    tokens, logits = genai_generate(out, ids, NEW_TOKENS)
    assert tokens == want.tokens[0].tolist(), f"{name}: onnxruntime-genai {tokens} vs transformers {want.tokens[0]}"
    err = max(float(np.abs(got - ref).max()) for got, ref in zip(logits, want.logits))
    assert err <= TOL, f"{name}: onnxruntime-genai logits differ from transformers' by {err:.3e}"


@pytest.mark.parametrize("args", [["--onnx-ops", "ort"], ["--static-cache", "--max-cache-len", "32"]])
def test_no_genai_config_where_genai_cannot_run(args, tiny, tmp_path, export_model):  # noqa: F811
    out = export_model(tiny(GENAI_CASES[0]).model_dir, tmp_path / "out", "--for-generation", *args)
    assert not (out / "genai_config.json").exists()
    assert not (export_model(tiny(GENAI_CASES[0]).model_dir, tmp_path / "fwd") / "genai_config.json").exists()
