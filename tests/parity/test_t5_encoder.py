"""The T5 family's encoder (issue 31, the encoder half of t5 / mt5 / umt5): T5EncoderModel's
last_hidden_state on every backend against transformers — ReLU and gated feed-forwards, a
head size other than d_model / heads, relative buckets past max_distance, one bias table shared
(t5, mt5) or one per layer (umt5), left- and right-padded batches —; the encoder of a
T5ForConditionalGeneration checkpoint with --task feature-extraction (its generation, without
--for-generation, refused by name; generation: test_t5_generation.py); a sentence-T5-shaped sentence-transformers model (mean pooling,
Dense, Normalize) against encode; refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_clean_error
from test_encoders import encoder_inputs

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
CLASSES = {"t5": "T5", "mt5": "MT5", "umt5": "UMT5"}
# d_kv 24 x 4 heads = 96 != d_model 64; 16 buckets (4 exact per direction) reaching 20, under rows
# of 30 tokens: every kind of bucket.
T5 = dict(vocab_size=160, d_model=64, d_kv=24, d_ff=128, num_layers=2, num_heads=4,
          relative_attention_num_buckets=16, relative_attention_max_distance=20, pad_token_id=0)


def build(folder, model_type: str, feed_forward: str, head: str = "EncoderModel", **overrides):
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, CLASSES[model_type] + "Config")(**T5, feed_forward_proj=feed_forward, **overrides)
    config._attn_implementation = "eager"
    model = getattr(transformers, CLASSES[model_type] + head)(config)
    with torch.no_grad():  # wider than the default init, so that every term shows
        for name, p in model.named_parameters():
            p.uniform_(0.5, 1.5) if "norm" in name else p.normal_(0.0, 0.15)
    model.eval().save_pretrained(folder)
    return model.get_encoder() if head != "EncoderModel" else model


def inputs_for(fmt: str, left: bool) -> dict:
    inputs = encoder_inputs(T5["vocab_size"], lengths=(30,) if fmt == "executorch" else (30, 21, 5), left=left)
    inputs.pop("token_type_ids")
    return inputs


def check(out, encoder, inputs) -> float:
    from hfexport import ExportedModel

    ours = np.asarray(ExportedModel(out)(**inputs)["last_hidden_state"], np.float32)
    with torch.no_grad():
        expected = encoder(**{k: torch.from_numpy(v) for k, v in inputs.items()}).last_hidden_state.numpy()
    real = inputs["attention_mask"].astype(bool)
    np.testing.assert_allclose(ours[real], expected[real], rtol=1e-4, atol=1e-4)
    return float(np.abs(ours[real] - expected[real]).max())


@pytest.mark.parametrize("left", [False, True], ids=["right_padded", "left_padded"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("model_type,feed_forward", [("t5", "relu"), ("mt5", "gated-gelu"), ("umt5", "gated-silu")])
def test_encoder_matches_transformers(tmp_path, export_model, support_matrix, model_type, feed_forward, fmt, left):
    encoder = build(tmp_path / "model", model_type, feed_forward)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "feature-extraction"
    assert [i["name"] for i in manifest["components"]["model"]["inputs"]] == ["input_ids", "attention_mask"]
    err = check(out, encoder, inputs_for(fmt, left))
    support_matrix.record(model_type, f"encoder feature-extraction {'left' if left else 'right'}-padded", True, err,
                          backend=fmt)


@pytest.mark.parametrize("model_type", ["t5", "umt5"])
def test_encoder_of_a_conditional_generation_checkpoint(tmp_path, export_model, run_hfexport, model_type):
    """T5ForConditionalGeneration (decoder and LM head beside the encoder, tied embeddings): its
    default task, generation, is refused without --for-generation; --task feature-extraction exports the encoder."""
    encoder = build(tmp_path / "model", model_type, "gated-gelu", head="ForConditionalGeneration")
    refused = tmp_path / "refused"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", refused), refused,
                       "text2text-generation", "--for-generation", "--task feature-extraction")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx", "--task", "feature-extraction")
    check(out, encoder, inputs_for("onnx", left=True))


def test_sentence_t5(tmp_path, export_model):
    """sentence-T5's pipeline: T5EncoderModel, mean pooling, a bias-free Identity Dense, Normalize."""
    from sentence_transformers import models
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models as tok_models, pre_tokenizers

    from test_sentence_embeddings import TEXTS, our_embeddings, save_dense_model

    hf = tmp_path / "t5"
    build(hf, "t5", "relu")
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"w{i}": i for i in range(3, T5["vocab_size"])}}
    tok = Tokenizer(tok_models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="</s>").save_pretrained(hf)
    transformer = models.Transformer(str(hf))
    width = transformer.get_word_embedding_dimension()
    st = save_dense_model(tmp_path / "st", transformer, "mean",
                          [dict(in_features=width, out_features=width, bias=False,
                                activation_function=torch.nn.Identity())])
    out = export_model(tmp_path / "st", tmp_path / "out", "--format", "onnx")
    assert json.loads((out / "export.json").read_text())["task"] == "sentence-similarity"
    np.testing.assert_allclose(our_embeddings(out, tmp_path / "st", "onnx"), st.encode(TEXTS), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("overrides,args,mentions", [
    ({"feed_forward_proj": "gated-gelu-tanh"}, [], ["feed_forward_proj", "gated-gelu-tanh"]),
    ({"feed_forward_proj": "relu6"}, [], ["feed_forward_proj", "relu6"]),
    ({"relative_attention_num_buckets": 2}, [], ["relative_attention_num_buckets"]),
    ({}, ["--task", "text-classification"], ["task", "feature-extraction"]),
    ({}, ["--for-generation"], ["decode loop"]),
])
def test_refusals(tmp_path, run_hfexport, overrides, args, mentions):
    build(tmp_path / "model", "t5", "relu")
    if overrides:
        config = json.loads((tmp_path / "model" / "config.json").read_text())
        (tmp_path / "model" / "config.json").write_text(json.dumps({**config, **overrides}))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out, *args), out, *mentions)
