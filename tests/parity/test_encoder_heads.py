"""Encoder task heads on every backend against the head class in transformers: text
classification (BERT's pooler + classifier; RoBERTa's dense + tanh head — cross-encoder
rerankers are this), token classification, fill-mask (the decoder tied to the word embeddings or
not) and question answering (start / end logits), each chosen from config.json's architectures,
at every real position of a right-padded batch."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from test_encoders import BERT, FAMILIES, build_encoder, encoder_inputs, model_inputs

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
LABELS = {"id2label": {"0": "neg", "1": "neutral", "2": "pos"}, "label2id": {"neg": 0, "neutral": 1, "pos": 2}}
# head class -> (task, outputs, config overrides)
HEADS = {
    "ForSequenceClassification": ("text-classification", ["logits"], LABELS),
    "ForTokenClassification": ("token-classification", ["logits"], LABELS),
    "ForMaskedLM": ("fill-mask", ["logits"], {}),
    "ForQuestionAnswering": ("question-answering", ["start_logits", "end_logits"], {}),
}


def build_head_model(folder, model_type: str, head: str, overrides: dict):
    import transformers

    build_encoder(folder, {**BERT, **overrides}, head=head, model_type=model_type)
    cls = getattr(transformers, FAMILIES[model_type] + head)
    return cls.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("head", list(HEADS))
@pytest.mark.parametrize("model_type", ["bert", "roberta", "distilbert"])
def test_heads_match_transformers(tmp_path, export_model, model_type, head, fmt):
    from hfexport import ExportedModel

    task, outputs, overrides = HEADS[head]
    model = build_head_model(tmp_path / "model", model_type, head, overrides)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == task
    assert [o["name"] for o in manifest["components"]["model"]["outputs"]] == outputs
    inputs = model_inputs(model_type, encoder_inputs(BERT["vocab_size"], lengths=(9,) if fmt == "executorch" else (12, 9, 5),
                                                     pad=model.config.pad_token_id))
    with torch.no_grad():
        expected = model(**{k: torch.from_numpy(v) for k, v in inputs.items()})
    ours = ExportedModel(out)(**inputs)
    real = inputs["attention_mask"].astype(bool)
    for name in outputs:
        got, want = np.asarray(ours[name], np.float32), getattr(expected, name).numpy()
        assert got.shape == want.shape, name
        if head == "ForSequenceClassification":  # one row each: the first token's
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        else:
            np.testing.assert_allclose(got[real], want[real], rtol=1e-4, atol=1e-4)


def test_untied_masked_lm_decoder(tmp_path, export_model):
    """tie_word_embeddings false: the decoder's own weights, not the word embeddings."""
    from hfexport import ExportedModel

    model = build_head_model(tmp_path / "model", "bert", "ForMaskedLM", {"tie_word_embeddings": False})
    assert not torch.equal(model.cls.predictions.decoder.weight, model.bert.embeddings.word_embeddings.weight)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx")
    inputs = encoder_inputs(BERT["vocab_size"])
    with torch.no_grad():
        expected = model(**{k: torch.from_numpy(v) for k, v in inputs.items()}).logits.numpy()
    real = inputs["attention_mask"].astype(bool)
    np.testing.assert_allclose(np.asarray(ExportedModel(out)(**inputs)["logits"])[real], expected[real],
                               rtol=1e-4, atol=1e-4)
