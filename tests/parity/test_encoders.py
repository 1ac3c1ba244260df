"""Text encoders (issue 30, first step): BERT's and the RoBERTa family's (roberta, xlm-roberta,
camembert: positions numbered after the padding token) feature extraction on every backend
against transformers' base model — last_hidden_state at every real position and pooler_output —
for right- and left-padded batches with two token-type segments; checkpoints as the base model
saves them (no prefix, with the pooler) and as a head class saves them (the family's prefix, head
weights unread, no pooler); inputs cut down to input_ids; bad configs and misuse refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_clean_error

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
# model_type -> transformers' config class prefix (BertConfig, BertModel, BertForMaskedLM, ...)
FAMILIES = {"bert": "Bert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert",
            "distilbert": "DistilBert", "electra": "Electra", "mpnet": "MPNet", "modernbert": "ModernBert",
            "deberta-v2": "DebertaV2"}
# DistilBERT's config spells the sizes its own way, and has no token types.
DISTIL_KEYS = {"hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
               "intermediate_size": "hidden_dim", "hidden_act": "activation"}


NO_TOKEN_TYPES = ("distilbert", "mpnet", "modernbert")
# ModernBERT's keys, and a window (local_attention 8: 4 keys each side) shorter than the test rows,
# with local and global layers (every second global) and a pad token inside the tiny vocabulary.
MODERNBERT = {"hidden_act": "hidden_activation", "layer_norm_eps": "norm_eps"}
# DeBERTa-v3's shape: disentangled attention (both terms, keys shared with the content
# projections), log buckets (8, reaching 32) over LayerNorm'ed relative embeddings, no absolute
# positions; token types kept from BERT's config.
DEBERTA_V3 = {"relative_attention": True, "pos_att_type": ["p2c", "c2p"], "position_buckets": 8,
              "max_relative_positions": 32, "norm_rel_ebd": "layer_norm", "share_att_key": True,
              "position_biased_input": False}


def family_config(model_type: str, config: dict) -> dict:
    if model_type == "modernbert":
        renamed = {MODERNBERT.get(k, k): v for k, v in config.items() if k != "type_vocab_size"}
        return {"local_attention": 8, "global_attn_every_n_layers": 2, "pad_token_id": 0,
                **renamed}
    if model_type == "deberta-v2":
        return {**DEBERTA_V3, **config}
    if model_type != "distilbert":
        return config
    return {DISTIL_KEYS.get(k, k): v for k, v in config.items() if k not in ("type_vocab_size", "layer_norm_eps")}


def model_inputs(model_type: str, inputs: dict) -> dict:
    return {k: v for k, v in inputs.items() if not (model_type in NO_TOKEN_TYPES and k == "token_type_ids")}
BERT = dict(vocab_size=160, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=32, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu")


def build_encoder(out_dir, config: dict, head: str = "Model", seed: int = 0, model_type: str = "bert"):
    """A random-weight encoder of `model_type` saved as its `head` class ("Model", "ForMaskedLM")
    saves it; returns (out_dir, the base model in eval mode)."""
    import transformers

    torch.manual_seed(seed)
    cfg = getattr(transformers, FAMILIES[model_type] + "Config")(**family_config(model_type, config))
    cfg._attn_implementation = "eager"
    model = getattr(transformers, FAMILIES[model_type] + head)(cfg)
    with torch.no_grad():  # wider than the default init, so that every term shows in the outputs
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
            elif "norm" in name.lower():
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.08)
    model.eval()
    model.save_pretrained(out_dir)
    return out_dir, model.base_model.eval()


def save_tokenizer(folder) -> None:
    """A word-level BERT tokenizer over the tiny vocabulary: [PAD] [UNK] [CLS] [SEP] [MASK] w5 ..."""
    from transformers import BertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, BERT["vocab_size"])]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizer(str(folder / "vocab.txt"), do_lower_case=False).save_pretrained(folder)


def encoder_inputs(vocab: int, lengths=(12, 9, 5), left: bool = False, seed: int = 7, pad: int = 0):
    """A batch padded with `pad` (the tokenizer's pad token), two segments per row (token types
    0 then 1)."""
    rng = np.random.default_rng(seed)
    seq = max(lengths)
    ids = np.full((len(lengths), seq), pad, np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        span = slice(seq - n, seq) if left else slice(0, n)
        ids[row, span] = rng.integers(2, vocab, size=n)  # neither BERT's pad (0) nor RoBERTa's (1)
        mask[row, span] = 1
        types[row, span] = (np.arange(n) >= n // 2).astype(np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def reference(model, inputs: dict) -> dict:
    kwargs = {k: torch.from_numpy(v) for k, v in inputs.items()}
    with torch.no_grad():
        model(**kwargs)  # the first eager forward of a process may differ at padded rows (see hf_logits)
        out = model(**kwargs)
    result = {"last_hidden_state": out.last_hidden_state.numpy()}
    if getattr(out, "pooler_output", None) is not None:
        result["pooler_output"] = out.pooler_output.numpy()
    return result


def run_export(out, inputs: dict) -> dict:
    from hfexport import ExportedModel

    return {k: np.asarray(v, np.float32) for k, v in ExportedModel(out)(**inputs).items()}


def check(ours: dict, expected: dict, mask: np.ndarray) -> float:
    """Asserts the outputs at the real positions; returns the largest difference."""
    assert sorted(ours) == sorted(expected)
    real = mask.astype(bool)
    np.testing.assert_allclose(ours["last_hidden_state"][real], expected["last_hidden_state"][real], rtol=1e-4, atol=1e-4)
    err = float(np.abs(ours["last_hidden_state"][real] - expected["last_hidden_state"][real]).max())
    if "pooler_output" in expected:
        np.testing.assert_allclose(ours["pooler_output"], expected["pooler_output"], rtol=1e-4, atol=1e-4)
        err = max(err, float(np.abs(ours["pooler_output"] - expected["pooler_output"]).max()))
    return err


@pytest.mark.parametrize("left", [False, True], ids=["right_padded", "left_padded"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_encoder_matches_transformers(tmp_path, export_model, support_matrix, model_type, fmt, left):
    model_dir, model = build_encoder(tmp_path / "model", BERT, model_type=model_type)
    out = export_model(model_dir, tmp_path / "out", "--format", fmt)
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "feature-extraction"
    entry = manifest["components"]["model"]
    types = model_type not in NO_TOKEN_TYPES
    pooler = model_type not in ("distilbert", "electra", "modernbert", "deberta-v2")
    assert [i["name"] for i in entry["inputs"]] == ["input_ids", "attention_mask"] + (["token_type_ids"] if types else [])
    assert [o["name"] for o in entry["outputs"]] == ["last_hidden_state"] + (["pooler_output"] if pooler else [])
    # A .pte's plain forward takes batch 1 (its memory is planned at each dim's bound).
    inputs = model_inputs(model_type, encoder_inputs(BERT["vocab_size"], lengths=(9, ) if fmt == "executorch" else (12, 9, 5),
                                                     left=left, pad=model.config.pad_token_id))
    err = check(run_export(out, inputs), reference(model, inputs), inputs["attention_mask"])
    support_matrix.record(model_type, f"encoder feature-extraction {'left' if left else 'right'}-padded", True, err,
                          backend=fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("model_type", ["bert", "roberta", "distilbert", "electra", "mpnet", "modernbert", "deberta-v2"])
def test_head_checkpoint_and_fewer_inputs(tmp_path, export_model, model_type, fmt):
    """A ...ForMaskedLM checkpoint (weights under the family's prefix, the MLM head unread, no
    pooler) as --task feature-extraction, its forward taking input_ids alone (every token
    attended, token type 0), with gelu_new; ELECTRA with embeddings as wide as its layers (no
    projection)."""
    extra = {"embedding_size": BERT["hidden_size"]} if model_type == "electra" else {}
    model_dir, model = build_encoder(tmp_path / "model", {**BERT, "hidden_act": "gelu_new", **extra},
                                     head="ForMaskedLM", model_type=model_type)
    out = export_model(model_dir, tmp_path / "out", "--format", fmt, "--inputs", "input_ids",
                       "--task", "feature-extraction")
    entry = json.loads((out / "export.json").read_text())["components"]["model"]
    assert [o["name"] for o in entry["outputs"]] == ["last_hidden_state"]
    inputs = {"input_ids": encoder_inputs(BERT["vocab_size"], lengths=(7,) if fmt == "executorch" else (7, 7))["input_ids"]}
    check(run_export(out, inputs), reference(model, inputs), np.ones_like(inputs["input_ids"]))


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_mpnet_relative_buckets_over_long_sequences(tmp_path, export_model, fmt):
    """MPNet's relative position bias at distances past every bucket edge (8, 16, 32, 64, 128):
    the buckets are transformers' float32 ones."""
    config = {**BERT, "max_position_embeddings": 160}
    model_dir, model = build_encoder(tmp_path / "model", config, model_type="mpnet")
    out = export_model(model_dir, tmp_path / "out", "--format", fmt)
    inputs = model_inputs("mpnet", encoder_inputs(BERT["vocab_size"], lengths=(150, 131), pad=1))
    check(run_export(out, inputs), reference(model, inputs), inputs["attention_mask"])


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_modernbert_config_styles(tmp_path, export_model, fmt):
    """ModernBERT's 4.x config (global_rope_theta / local_rope_theta / global_attn_every_n_layers,
    no layer_types or rope_parameters) and explicit layer_types with biases on (norm, attention,
    MLP): transformers' numbers, left-padded, hidden states through the layers' own RoPE bases."""
    config = {**BERT, "global_rope_theta": 500.0, "local_rope_theta": 50.0, "norm_bias": True,
              "attention_bias": True, "mlp_bias": True, "num_hidden_layers": 4}
    model_dir, model = build_encoder(tmp_path / "model", config, model_type="modernbert")
    saved = json.loads((model_dir / "config.json").read_text())
    legacy = {k: v for k, v in saved.items() if k not in ("layer_types", "rope_parameters")}
    (model_dir / "config.json").write_text(json.dumps({**legacy, "global_rope_theta": 500.0, "local_rope_theta": 50.0}))
    out = export_model(model_dir, tmp_path / "out", "--format", fmt)
    inputs = model_inputs("modernbert", encoder_inputs(BERT["vocab_size"], left=True, pad=0))
    check(run_export(out, inputs), reference(model, inputs), inputs["attention_mask"])


def test_modernbert_mean_pooled_classifier(tmp_path, export_model):
    """classifier_pooling "mean": the rows' mean over their real tokens before the head."""
    from test_encoder_heads import build_head_model
    from hfexport import ExportedModel

    model = build_head_model(tmp_path / "model", "modernbert", "ForSequenceClassification",
                             {"classifier_pooling": "mean", "num_labels": 3})
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx")
    inputs = model_inputs("modernbert", encoder_inputs(BERT["vocab_size"], pad=0))
    with torch.no_grad():
        expected = model(**{k: torch.from_numpy(v) for k, v in inputs.items()}).logits.numpy()
    np.testing.assert_allclose(np.asarray(ExportedModel(out)(**inputs)["logits"]), expected, rtol=1e-4, atol=1e-4)


def test_layer_norm_gamma_beta_names(tmp_path, export_model):
    """A BERT checkpoint with the TF-era LayerNorm.gamma / LayerNorm.beta names (transformers
    renames them to weight / bias as it loads): the same numbers."""
    from safetensors.torch import load_file, save_file

    model_dir, model = build_encoder(tmp_path / "model", BERT)
    weights = load_file(model_dir / "model.safetensors")
    renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in weights.items()}
    assert sum(k.endswith("LayerNorm.gamma") for k in renamed) == 2 * BERT["num_hidden_layers"] + 1
    save_file(renamed, model_dir / "model.safetensors", metadata={"format": "pt"})
    out = export_model(model_dir, tmp_path / "out", "--format", "onnx")
    inputs = encoder_inputs(BERT["vocab_size"])
    check(run_export(out, inputs), reference(model, inputs), inputs["attention_mask"])


def test_mpnet_refuses_fewer_buckets_than_its_attention_reads(tmp_path, run_hfexport):
    model_dir, _ = build_encoder(tmp_path / "model", BERT, model_type="mpnet")
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "relative_attention_num_buckets": 16}))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", model_dir, "-o", out), out, "relative_attention_num_buckets", "32")


@pytest.mark.parametrize("overrides,args,mentions", [
    ({"position_embedding_type": "relative_key"}, [], ["position_embedding_type", "relative_key"]),
    ({"is_decoder": True}, [], ["is_decoder"]),
    ({}, ["--for-generation"], ["encoder", "decode loop"]),
    ({}, ["--task", "text-generation"], ["task", "feature-extraction"]),
    ({}, ["--inputs", "attention_mask"], ["inputs", "input_ids"]),
    ({}, ["--inputs", "input_ids,pixel_values"], ["pixel_values", "token_type_ids"]),
])
def test_bert_refusals(tmp_path, run_hfexport, overrides, args, mentions):
    model_dir, _ = build_encoder(tmp_path / "model", BERT)
    if overrides:
        config = json.loads((model_dir / "config.json").read_text())
        (model_dir / "config.json").write_text(json.dumps({**config, **overrides}))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", model_dir, "-o", out, *args), out, *mentions)


@pytest.mark.parametrize("profile", ["ort", "ort-gqa"])
def test_bert_onnx_op_profiles(tmp_path, export_model, profile):
    """onnxruntime's fused ops (LayerNorm with the residual; GroupQueryAttention is causal and
    declines bidirectional attention) give the same numbers."""
    model_dir, model = build_encoder(tmp_path / "model", BERT)
    out = export_model(model_dir, tmp_path / "out", "--format", "onnx", "--onnx-ops", profile)
    inputs = encoder_inputs(BERT["vocab_size"])
    check(run_export(out, inputs), reference(model, inputs), inputs["attention_mask"])


def test_token_types_are_an_input_only_where_there_are_several(tmp_path, export_model):
    """RoBERTa checkpoints have type_vocab_size 1 and tokenizers that return no token_type_ids:
    the export takes input_ids and attention_mask (token type 0 inside), as optimum's does."""
    from hfexport import ExportedModel

    model_dir, model = build_encoder(tmp_path / "model", {**BERT, "type_vocab_size": 1}, model_type="roberta")
    out = export_model(model_dir, tmp_path / "out", "--format", "onnx")
    entry = json.loads((out / "export.json").read_text())["components"]["model"]
    assert [i["name"] for i in entry["inputs"]] == ["input_ids", "attention_mask"]
    inputs = encoder_inputs(BERT["vocab_size"], pad=model.config.pad_token_id)
    inputs.pop("token_type_ids")
    check(run_export(out, inputs), reference(model, inputs), inputs["attention_mask"])
