"""Encoder task heads on every backend against the head class in transformers: text
classification (BERT's pooler + classifier; RoBERTa's dense + tanh head — cross-encoder
rerankers are this; ELECTRA's dense + GELU), token classification, fill-mask (the decoder tied to the word embeddings or
not) and question answering (start / end logits), each chosen from config.json's architectures,
at every real position of a right-padded batch."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from test_encoders import BERT, FAMILIES, build_encoder, encoder_inputs, model_inputs, save_tokenizer

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
@pytest.mark.parametrize("model_type", ["bert", "roberta", "distilbert", "electra", "mpnet", "modernbert", "deberta-v2"])
def test_heads_match_transformers(tmp_path, export_model, support_matrix, model_type, head, fmt):
    from hfexport import ExportedModel

    task, outputs, overrides = HEADS[head]
    if model_type == "electra":  # embeddings narrower than the layers, hidden_act not the heads' GELU
        overrides = {**overrides, "embedding_size": 48, "hidden_act": "gelu_new"}
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
    err = 0.0
    for name in outputs:
        got, want = np.asarray(ours[name], np.float32), getattr(expected, name).numpy()
        assert got.shape == want.shape, name
        if head != "ForSequenceClassification":  # one row each (the first token's); else the real positions
            got, want = got[real], want[real]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        err = max(err, float(np.abs(got - want).max()))
    support_matrix.record(model_type, f"encoder {task}", True, err, backend=fmt)


def test_untied_masked_lm_decoder(tmp_path, export_model):
    """tie_word_embeddings false: the decoder's own weights, not the word embeddings."""
    model = build_head_model(tmp_path / "model", "bert", "ForMaskedLM", {"tie_word_embeddings": False})
    assert not torch.equal(model.cls.predictions.decoder.weight, model.bert.embeddings.word_embeddings.weight)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx")
    inputs = encoder_inputs(BERT["vocab_size"])
    check_logits_at_real_positions(model, out, inputs)


def check_logits_at_real_positions(model, out, inputs: dict) -> None:
    """The export's logits equal the transformers head class's at every real position."""
    from hfexport import ExportedModel

    with torch.no_grad():
        expected = model(**{k: torch.from_numpy(v) for k, v in inputs.items()}).logits.numpy()
    real = inputs["attention_mask"].astype(bool)
    np.testing.assert_allclose(np.asarray(ExportedModel(out)(**inputs)["logits"])[real], expected[real],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("head", ["ForSequenceClassification", "ForTokenClassification", "ForMaskedLM"])
def test_cli_run_matches_transformers_pipelines(tmp_path, export_model, run_hfexport, head):
    """`hfexport run OUT --text ...` prints what transformers' pipeline gives for the task: the top
    label and its score, each token's label and score, the top-5 fills of a [MASK]."""
    from transformers import AutoTokenizer, pipeline

    task, _, overrides = HEADS[head]
    model = build_head_model(tmp_path / "model", "bert", head, overrides)
    save_tokenizer(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx")
    texts = ["w5 w6 [MASK] w8 w9", "w12 [MASK] w14"] if task == "fill-mask" else ["w5 w6 w7 w8 w9", "w12 w13"]
    proc = run_hfexport("run", out, *[a for t in texts for a in ("--text", t)])
    assert proc.returncode == 0, proc.stderr
    ours = [json.loads(line) for line in proc.stdout.splitlines()]
    reference = pipeline(task, model=model, tokenizer=AutoTokenizer.from_pretrained(tmp_path / "model"), device="cpu")
    for text, got in zip(texts, ours):
        assert got["text"] == text
        want = reference(text)
        if task == "text-classification":
            assert got["label"] == want[0]["label"]
            assert abs(got["score"] - want[0]["score"]) < 1e-4
        elif task == "token-classification":
            assert [(t["token"], t["label"]) for t in got["tokens"]] == [(w["word"], w["entity"]) for w in want]
            np.testing.assert_allclose([t["score"] for t in got["tokens"]], [w["score"] for w in want], atol=1e-4)
        else:
            assert [c["token"] for c in got["masks"][0]] == [w["token_str"] for w in want]
            np.testing.assert_allclose([c["score"] for c in got["masks"][0]], [w["score"] for w in want], atol=1e-4)


OPTIMUM = Path(__file__).resolve().parents[2] / ".venv-optimum-onnx" / "bin" / "python"
ORT_MODELS = {"Model": "ORTModelForFeatureExtraction", "ForSequenceClassification": "ORTModelForSequenceClassification",
              "ForTokenClassification": "ORTModelForTokenClassification", "ForMaskedLM": "ORTModelForMaskedLM",
              "ForQuestionAnswering": "ORTModelForQuestionAnswering"}


@pytest.mark.parametrize("head", list(ORT_MODELS))
def test_optimum_ort_models_run_our_exports(tmp_path, export_model, head):
    """`ORTModelFor<Task>.from_pretrained(OUT)(**inputs)` (optimum-onnx 0.1.0, its own venv) on the
    ONNX export laid out as optimum writes it (`--onnx-layout optimum`): transformers' outputs."""
    if not OPTIMUM.is_file():
        pytest.skip("no .venv-optimum-onnx (scripts/setup.sh makes it)")
    overrides = HEADS[head][2] if head in HEADS else {}
    model = build_head_model(tmp_path / "model", "bert", head, overrides)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx", "--onnx-layout", "optimum")
    inputs = encoder_inputs(BERT["vocab_size"])
    request = tmp_path / "request.json"
    request.write_text(json.dumps({k: v.tolist() for k, v in inputs.items()}))
    proc = subprocess.run([str(OPTIMUM), str(Path(__file__).with_name("optimum_encoder.py")), str(out),
                           ORT_MODELS[head], str(request)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours = json.loads(proc.stdout.splitlines()[-1])
    with torch.no_grad():
        expected = model(**{k: torch.from_numpy(v) for k, v in inputs.items()})
    real = inputs["attention_mask"].astype(bool)
    assert ours, "optimum returned no outputs"
    for name, got in ours.items():
        got, want = np.asarray(got, np.float32), getattr(expected, name).numpy()
        if got.ndim >= 2 and got.shape[:2] == real.shape:
            got, want = got[real], want[real]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def check_rerank_pipeline(out, query: str, docs: list, expected: np.ndarray) -> None:
    """TextRerankPipeline(OUT).rerank(query, docs), as its docs show it (every document back,
    f32 inference): the expected scores, best first."""
    import openvino_genai as genai

    config = genai.TextRerankPipeline.Config()
    config.top_n = len(docs)
    pipe = genai.TextRerankPipeline(str(out), "CPU", config, INFERENCE_PRECISION_HINT="f32")
    ranked = pipe.rerank(query, docs)
    assert [index for index, _ in ranked] == list(np.argsort(-expected))
    np.testing.assert_allclose([score for _, score in sorted(ranked)], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("labels", [1, 2])
def test_openvino_genai_text_rerank_pipeline(tmp_path, export_model, labels):
    """OpenVINO GenAI's TextRerankPipeline runs the OpenVINO export of a cross-encoder (a
    ...ForSequenceClassification: the query and each document as a pair, the `logits` output),
    tokenizer from openvino-tokenizers: its scores are transformers' sigmoid of the one logit
    (with two labels, the softmax's second column), ranked."""
    genai = pytest.importorskip("openvino_genai")
    ov_tokenizers = pytest.importorskip("openvino_tokenizers")
    import openvino as ov
    from transformers import AutoTokenizer

    model = build_head_model(tmp_path / "model", "bert", "ForSequenceClassification", {"num_labels": labels})
    save_tokenizer(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "openvino")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    ov.save_model(ov_tokenizers.convert_tokenizer(tokenizer), str(out / "openvino_tokenizer.xml"))
    query, docs = "w5 w6 w7", ["w8 w9 w10 w11", "w12", "w5 w6 w20 w21 w22", "w30 w31"]
    with torch.no_grad():
        logits = model(**tokenizer([query] * len(docs), docs, padding=True, return_tensors="pt")).logits
    expected = (torch.sigmoid(logits[:, 0]) if labels == 1 else torch.softmax(logits, -1)[:, 1]).numpy()
    check_rerank_pipeline(out, query, docs, expected)


def test_openvino_genai_text_rerank_pipeline_decoder_reranker(tmp_path, export_model):
    """TextRerankPipeline on a decoder reranker laid out as Qwen3-Reranker is (qwen3, left
    padding): the OpenVINO export of its plain forward (logits at every position), which the
    pipeline scores as the softmax of the last token's "no" / "yes" logits over query + document;
    the scores are transformers' (positions from the mask, as the pipeline feeds them)."""
    genai = pytest.importorskip("openvino_genai")
    ov_tokenizers = pytest.importorskip("openvino_tokenizers")
    import openvino as ov
    from tokenizers import Tokenizer, decoders, models as tok_models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from conftest import TINY_CONFIG, build_tiny_model

    hf, model = build_tiny_model(tmp_path / "qwen3", "qwen3", dict(TINY_CONFIG))
    # A byte-level BPE (Qwen's kind) small enough for the tiny vocabulary, with "yes" and "no" tokens.
    tok = Tokenizer(tok_models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["yes", "no"] * 50 + [" ".join(f"w{i}" for i in range(j, j + 8)) for j in range(40)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=150, special_tokens=["<pad>"]))
    vocab = tok.get_vocab()
    assert max(vocab.values()) < TINY_CONFIG["vocab_size"] and {"yes", "no"} <= set(vocab)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", padding_side="left")
    tokenizer.save_pretrained(hf)
    out = export_model(hf, tmp_path / "out", "--format", "openvino")
    ov_tokenizer, ov_detokenizer = ov_tokenizers.convert_tokenizer(tokenizer, with_detokenizer=True)
    ov.save_model(ov_tokenizer, str(out / "openvino_tokenizer.xml"))
    ov.save_model(ov_detokenizer, str(out / "openvino_detokenizer.xml"))  # the pipeline finds yes / no there
    query, docs = "w5 w6 w7 yes", [" w8 w9 w10 w11", " w12", " w5 w6 w20 w21 w22 no", " w30 w31"]
    batch = tokenizer([query + d for d in docs], padding=True, return_tensors="pt")
    positions = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        last = model(**batch, position_ids=positions).logits[:, -1]
    expected = torch.softmax(last[:, [vocab["no"], vocab["yes"]]], -1)[:, 1].numpy()
    check_rerank_pipeline(out, query, docs, expected)
