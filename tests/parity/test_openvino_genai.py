"""An OpenVINO export, with its tokenizer converted by openvino-tokenizers, loads and generates in
openvino_genai.LLMPipeline — the way users run OpenVINO LLMs — exactly as transformers does."""

from __future__ import annotations

import openvino as ov
import pytest
import torch
from conftest import TINY_CONFIG, build_tiny_model
from tiny_configs import cases

genai = pytest.importorskip("openvino_genai")
ov_tokenizers = pytest.importorskip("openvino_tokenizers")


def word_tokenizer(vocab_size: int):
    """A word-level tokenizer over "w3".."wN" (ids = numbers) with <unk>/<s>/</s> at 0/1/2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<unk>")


# The first generation case of every family: LLMPipeline reads only the IR's interface.
FAMILIES = {}
for _case in cases("generation"):
    FAMILIES.setdefault(_case.model_type, _case.overrides)


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_llm_pipeline_generates_like_transformers(model_type, tmp_path, export_model):
    config = {**TINY_CONFIG, **FAMILIES[model_type], "vocab_size": 128, "bos_token_id": 1, "eos_token_id": 2}
    model_dir, model = build_tiny_model(tmp_path / "hf", model_type, config, weight_std=0.2)
    tokenizer = word_tokenizer(128)
    tokenizer.save_pretrained(model_dir)
    out = export_model(model_dir, tmp_path / "ov", "--format", "openvino", "--for-generation")
    tok, detok = ov_tokenizers.convert_tokenizer(tokenizer, with_detokenizer=True)
    ov.save_model(tok, str(out / "openvino_tokenizer.xml"))
    ov.save_model(detok, str(out / "openvino_detokenizer.xml"))

    prompt = "w5 w9 w17 w33 w44 w7"
    # The default backend (paged attention) rebuilds attention without our mask, so a sliding
    # window is lost there: those models take the stateful SDPA backend (README, OpenVINO).
    backend = {"ATTENTION_BACKEND": "SDPA"} if FAMILIES[model_type].get("sliding_window") else {}
    pipe = genai.LLMPipeline(str(out), "CPU", **backend, INFERENCE_PRECISION_HINT="f32", KV_CACHE_PRECISION="f32")
    config = genai.GenerationConfig()
    config.max_new_tokens = 16
    config.ignore_eos = True
    got = pipe.generate(prompt, config)

    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False,
                             eos_token_id=None, pad_token_id=0)[0, ids.shape[1]:]
    assert len(ref) == 16
    # GenAI's detokenizer drops special tokens (ids 0..2 here); compare the same way.
    assert str(got) == tokenizer.decode(ref, skip_special_tokens=True)
