"""Sentence embeddings: a sentence-transformers checkpoint (modules.json: Transformer, Pooling,
Normalize) exports `sentence_embedding` with its pooling and normalization in the graph (task
sentence-similarity, its default), equal to SentenceTransformer.encode on the same texts: every
pooling mode and a concatenation of two, the v6 and the legacy (pooling_mode_*_tokens) Pooling
configs, on every backend; modules it cannot build refused by name."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_clean_error
from test_encoders import BERT, build_encoder, save_tokenizer

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
TEXTS = ["w5 w6 w7 w8 w9 w10 w11", "w12 w13", "w20 w21 w22 w23", "w30"]


def build_sentence_model(folder, pooling_mode, normalize: bool = True, legacy: bool = False):
    """A tiny BERT with a word-level tokenizer, under sentence-transformers' Pooling (and
    Normalize), saved as SentenceTransformer.save writes it; returns the loaded SentenceTransformer."""
    from sentence_transformers import SentenceTransformer, models

    hf = folder.parent / (folder.name + "-hf")
    build_encoder(hf, BERT)
    save_tokenizer(hf)
    transformer = models.Transformer(str(hf))
    modules = [transformer, models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode=pooling_mode)]
    if normalize:
        modules.append(models.Normalize())
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    if legacy:  # sentence-transformers < 6 wrote one boolean per mode
        modes = [pooling_mode] if isinstance(pooling_mode, str) else pooling_mode
        keys = {"cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens", "mean": "pooling_mode_mean_tokens",
                "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
                "weightedmean": "pooling_mode_weightedmean_tokens", "lasttoken": "pooling_mode_lasttoken"}
        config = {"word_embedding_dimension": BERT["hidden_size"], **{k: m in modes for m, k in keys.items()},
                  "include_prompt": True}
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(config))
    return SentenceTransformer(str(folder), device="cpu")


def our_embeddings(out, folder, fmt) -> np.ndarray:
    from hfexport import ExportedModel
    from transformers import AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), ExportedModel(out)
    # A .pte's plain forward takes batch 1 (its memory is planned at each dim's bound).
    batches = [[t] for t in TEXTS] if fmt == "executorch" else [TEXTS]
    rows = [np.asarray(model(**tokenizer(b, padding=True, return_tensors="np"))["sentence_embedding"]) for b in batches]
    return np.concatenate(rows).astype(np.float32)


@pytest.mark.parametrize("mode,normalize,legacy", [
    ("mean", True, False), ("cls", False, False), ("max", True, False), ("lasttoken", True, True),
    ("mean_sqrt_len_tokens", False, False), ("weightedmean", True, True), (("cls", "mean"), True, False),
], ids=["mean-normalize", "cls", "max", "lasttoken-legacy", "mean_sqrt_len", "weightedmean-legacy", "cls+mean"])
def test_pooling_modes_match_sentence_transformers(tmp_path, export_model, mode, normalize, legacy):
    st = build_sentence_model(tmp_path / "st", mode, normalize, legacy)
    out = export_model(tmp_path / "st", tmp_path / "out", "--format", "onnx")
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "sentence-similarity"
    outputs = [o["name"] for o in manifest["components"]["model"]["outputs"]]
    assert outputs == ["last_hidden_state", "sentence_embedding"]
    np.testing.assert_allclose(our_embeddings(out, tmp_path / "st", "onnx"), st.encode(TEXTS), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ["mean", "lasttoken"])
def test_every_backend_matches_sentence_transformers(tmp_path, export_model, fmt, mode):
    st = build_sentence_model(tmp_path / "st", mode)
    out = export_model(tmp_path / "st", tmp_path / "out", "--format", fmt)
    np.testing.assert_allclose(our_embeddings(out, tmp_path / "st", fmt), st.encode(TEXTS), rtol=1e-4, atol=1e-5)


def test_feature_extraction_of_a_sentence_model(tmp_path, export_model):
    """--task feature-extraction gives the Transformer module's token embeddings alone (what
    sentence-transformers' own ONNX backend and OpenVINO GenAI pool themselves), and export.json
    says how the checkpoint pools them."""
    build_sentence_model(tmp_path / "st", ("cls", "mean"))
    out = export_model(tmp_path / "st", tmp_path / "out", "--format", "onnx", "--task", "feature-extraction")
    manifest = json.loads((out / "export.json").read_text())
    assert [o["name"] for o in manifest["components"]["model"]["outputs"]] == ["last_hidden_state"]
    assert manifest["sentence_pooling"] == {"pooling_mode": ["cls", "mean"], "normalize": True}


@pytest.mark.parametrize("edit,mentions", [
    (lambda d: (d / "1_Pooling" / "config.json").write_text(json.dumps(
        {"embedding_dimension": 64, "pooling_mode": "mean", "include_prompt": False})), ["include_prompt"]),
    (lambda d: (d / "1_Pooling" / "config.json").write_text(json.dumps(
        {"embedding_dimension": 64, "pooling_mode": "median"})), ["pooling_mode", "median"]),
    (lambda d: (d / "modules.json").write_text(json.dumps(json.loads((d / "modules.json").read_text()) + [
        {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"}])), ["Dense", "3_Dense"]),
    (lambda d: (d / "modules.json").write_text(json.dumps(json.loads((d / "modules.json").read_text())[:2] + [
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}])), ["2_Dense", "config.json"]),
    (lambda d: (d / "modules.json").write_text('[{"idx": 0, "type": 5, "path": ""}]'), ["modules.json", "type"]),
    (lambda d: (d / "modules.json").write_text('[{"idx": 0, "type": "sentence_tr'), ["modules.json", "JSON"]),
])
def test_unsupported_modules_are_refused(tmp_path, run_hfexport, edit, mentions):
    build_sentence_model(tmp_path / "st", "mean")
    edit(tmp_path / "st")
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "st", "-o", out), out, *mentions)


def test_unsupported_modules_leave_feature_extraction(tmp_path, export_model):
    """A Dense module that cannot be built (no folder) blocks only the sentence embedding: the
    hidden states still export, and export.json records no pooling for a pipeline to apply (it
    would leave the projection out)."""
    build_sentence_model(tmp_path / "st", "mean")
    modules = json.loads((tmp_path / "st" / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (tmp_path / "st" / "modules.json").write_text(json.dumps(modules))
    out = export_model(tmp_path / "st", tmp_path / "out", "--format", "onnx", "--task", "feature-extraction")
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "feature-extraction" and "sentence_pooling" not in manifest


def test_sentence_similarity_needs_a_sentence_model(tmp_path, run_hfexport):
    build_encoder(tmp_path / "bert", BERT)
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "bert", "-o", out, "--task", "sentence-similarity"), out,
                       "sentence-similarity", "modules.json")


@pytest.mark.parametrize("fmt", ["onnx", "executorch"])
def test_encode_and_cli_run_from_text(tmp_path, export_model, run_hfexport, fmt):
    """Text in, embeddings out with the export's own tokenizer: ExportedModel.encode (as
    SentenceTransformer.encode is called) and `hfexport run OUT --text ...` (one JSON line per text)."""
    from hfexport import ExportedModel

    st = build_sentence_model(tmp_path / "st", "mean")
    out = export_model(tmp_path / "st", tmp_path / "out", "--format", fmt)
    expected = st.encode(TEXTS)
    np.testing.assert_allclose(ExportedModel(out).encode(TEXTS), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ExportedModel(out).encode(TEXTS[1]), expected[1], rtol=1e-4, atol=1e-5)
    proc = run_hfexport("run", out, *[a for t in TEXTS for a in ("--text", t)])
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [line["text"] for line in lines] == TEXTS
    np.testing.assert_allclose(np.array([line["embedding"] for line in lines]), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_transformer_module_in_a_subfolder(tmp_path, export_model, fmt):
    """The older sentence-transformers layout (the Transformer module's config, weights and
    tokenizer in 0_Transformer/, modules.json at the root): the same embeddings, and the export
    folder a sentence-transformers folder with the model at its root (modules.json's Transformer
    path emptied, the other modules copied)."""
    from sentence_transformers import SentenceTransformer

    st = build_sentence_model(tmp_path / "st", "mean")
    legacy = tmp_path / "legacy"
    shutil.copytree(tmp_path / "st", legacy)
    (legacy / "0_Transformer").mkdir()
    for f in list(legacy.iterdir()):
        if f.is_file() and f.name not in ("modules.json", "config_sentence_transformers.json", "README.md"):
            f.rename(legacy / "0_Transformer" / f.name)
    modules = json.loads((legacy / "modules.json").read_text())
    modules[0]["path"] = "0_Transformer"
    (legacy / "modules.json").write_text(json.dumps(modules))
    assert SentenceTransformer(str(legacy), device="cpu").encode(TEXTS) == pytest.approx(st.encode(TEXTS), abs=1e-6)
    out = export_model(legacy, tmp_path / "out", "--format", fmt)
    assert json.loads((out / "modules.json").read_text())[0]["path"] == ""
    assert (out / "tokenizer.json").exists() and not (out / "0_Transformer").exists()
    np.testing.assert_allclose(our_embeddings(out, legacy / "0_Transformer", fmt), st.encode(TEXTS), rtol=1e-4, atol=1e-5)
    assert json.loads((out / "modules.json").read_text())[1:] == modules[1:] and (out / "1_Pooling").is_dir()


@pytest.mark.parametrize("mode,normalize", [("mean", True), ("cls", False), ("lasttoken", True)])
def test_openvino_genai_text_embedding_pipeline(tmp_path, export_model, mode, normalize):
    """OpenVINO GenAI's TextEmbeddingPipeline runs the OpenVINO export of a sentence-transformers
    checkpoint's token embeddings (--task feature-extraction: one output, which the pipeline
    needs) with its tokenizer converted by openvino-tokenizers, pooling as export.json's
    sentence_pooling says; its embeddings are SentenceTransformer.encode's."""
    genai = pytest.importorskip("openvino_genai")
    ov_tokenizers = pytest.importorskip("openvino_tokenizers")
    import openvino as ov
    from transformers import AutoTokenizer

    st = build_sentence_model(tmp_path / "st", mode, normalize)
    out = export_model(tmp_path / "st", tmp_path / "out", "--format", "openvino", "--task", "feature-extraction")
    ov.save_model(ov_tokenizers.convert_tokenizer(AutoTokenizer.from_pretrained(tmp_path / "st")),
                  str(out / "openvino_tokenizer.xml"))
    pooling = json.loads((out / "export.json").read_text())["sentence_pooling"]
    config = genai.TextEmbeddingPipeline.Config()
    kinds = {"mean": "MEAN", "cls": "CLS", "lasttoken": "LAST_TOKEN"}
    config.pooling_type = getattr(genai.TextEmbeddingPipeline.PoolingType, kinds[pooling["pooling_mode"][0]])
    config.normalize = pooling["normalize"]
    config.padding_side = "right" if mode == "lasttoken" else config.padding_side
    pipe = genai.TextEmbeddingPipeline(str(out), "CPU", config, INFERENCE_PRECISION_HINT="f32")  # not bf16 where the CPU has it
    np.testing.assert_allclose(np.array(pipe.embed_documents(TEXTS)), st.encode(TEXTS), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt", FORMATS)
def test_decoder_embedder_like_qwen3_embedding(tmp_path, export_model, fmt):
    """A decoder as a sentence-transformers embedder (Qwen3-Embedding: qwen3 under last-token
    pooling and Normalize, left-padded): sentence_embedding equals SentenceTransformer.encode."""
    from sentence_transformers import SentenceTransformer, models
    from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from conftest import TINY_CONFIG, build_tiny_model

    hf = tmp_path / "qwen3"
    build_tiny_model(hf, "qwen3", dict(TINY_CONFIG))
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, TINY_CONFIG["vocab_size"])}}
    tok = Tokenizer(tok_models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<pad>",
                            padding_side="left").save_pretrained(hf)
    transformer = models.Transformer(str(hf))
    modules = [transformer, models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode="lasttoken"),
               models.Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(tmp_path / "st"))
    st = SentenceTransformer(str(tmp_path / "st"), device="cpu")
    out = export_model(tmp_path / "st", tmp_path / "out", "--format", fmt)
    assert json.loads((out / "export.json").read_text())["task"] == "sentence-similarity"
    np.testing.assert_allclose(our_embeddings(out, tmp_path / "st", fmt), st.encode(TEXTS), rtol=1e-4, atol=1e-5)


def save_dense_model(folder, transformer, pooling_mode: str, dense: list, normalize: bool = True):
    """A SentenceTransformer of `transformer`, the pooling, Dense modules (kwargs each, seeded
    random weights) and Normalize, saved; returns it loaded back."""
    import torch
    from sentence_transformers import SentenceTransformer, models

    torch.manual_seed(3)
    modules = [transformer, models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode=pooling_mode)]
    for kwargs in dense:
        layer = models.Dense(**kwargs)
        with torch.no_grad():
            for p in layer.parameters():
                p.normal_(0.0, 0.2)
        modules.append(layer)
    if normalize:
        modules.append(models.Normalize())
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return SentenceTransformer(str(folder), device="cpu")


@pytest.mark.parametrize("fmt", FORMATS)
def test_dense_modules_like_embeddinggemma(tmp_path, export_model, fmt):
    """EmbeddingGemma's pipeline: gemma3_text with bidirectional attention, mean pooling, two
    bias-free Identity Dense projections (up, then back down) and Normalize. The Dense weights
    come from the modules' own folders; sentence_embedding equals SentenceTransformer.encode."""
    import torch
    from sentence_transformers import models
    from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from conftest import TINY_CONFIG, build_tiny_model

    hf = tmp_path / "gemma3"
    build_tiny_model(hf, "gemma3_text", {**TINY_CONFIG, "num_key_value_heads": 2, "head_dim": 16,
                                         "use_bidirectional_attention": True, "query_pre_attn_scalar": 16})
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, TINY_CONFIG["vocab_size"])}}
    tok = Tokenizer(tok_models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<pad>").save_pretrained(hf)
    transformer = models.Transformer(str(hf))
    width = transformer.get_word_embedding_dimension()
    identity = torch.nn.Identity()
    st = save_dense_model(tmp_path / "st", transformer, "mean", [
        dict(in_features=width, out_features=2 * width, bias=False, activation_function=identity),
        dict(in_features=2 * width, out_features=width, bias=False, activation_function=identity)])
    assert [m["path"] for m in json.loads((tmp_path / "st" / "modules.json").read_text())][2:4] == ["2_Dense", "3_Dense"]
    out = export_model(tmp_path / "st", tmp_path / "out", "--format", fmt)
    np.testing.assert_allclose(our_embeddings(out, tmp_path / "st", fmt), st.encode(TEXTS), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dense", [
    [dict(out_features=32)],  # sentence-transformers' defaults: a bias, Tanh
    [dict(out_features=64, activation_function="relu", use_residual=True)],
    [dict(out_features=48, bias=False, activation_function="gelu", use_residual=True), dict(out_features=16)],
], ids=["tanh-bias", "relu-residual", "gelu-projected-residual-then-tanh"])
def test_dense_module_options(tmp_path, export_model, dense):
    """Dense modules' options over a BERT: the default Tanh with a bias, ReLU / GELU, a residual
    connection (the identity, or its own projection where the widths differ), stacked."""
    import torch
    from sentence_transformers import models

    hf = tmp_path / "st-hf"
    build_encoder(hf, BERT)
    save_tokenizer(hf)
    transformer = models.Transformer(str(hf))
    width = transformer.get_word_embedding_dimension()
    acts = {"relu": torch.nn.ReLU(), "gelu": torch.nn.GELU()}
    layers = []
    for kwargs in dense:
        kwargs = dict(kwargs, in_features=width)
        if "activation_function" in kwargs:
            kwargs["activation_function"] = acts[kwargs["activation_function"]]
        layers.append(kwargs)
        width = kwargs["out_features"]
    st = save_dense_model(tmp_path / "st", transformer, "cls", layers, normalize=False)
    out = export_model(tmp_path / "st", tmp_path / "out", "--format", "onnx")
    np.testing.assert_allclose(our_embeddings(out, tmp_path / "st", "onnx"), st.encode(TEXTS), rtol=1e-4, atol=1e-5)


def edit_json(path, **changes):
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def keep_bin_only(folder):
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")


def truncate(path):
    path.write_bytes(path.read_bytes()[:100])


@pytest.mark.parametrize("edit,mentions", [
    (lambda d: edit_json(d / "config.json", in_features=32), ["in_features", "64"]),
    (lambda d: edit_json(d / "config.json", activation_function="torch.nn.modules.activation.Softsign"),
     ["activation_function", "Softsign"]),
    (lambda d: edit_json(d / "config.json", module_input_name="token_embeddings"), ["module_input_name"]),
    (lambda d: edit_json(d / "config.json", out_features=16), ["linear.weight", "shape"]),
    (keep_bin_only, ["pytorch_model.bin", "safetensors"]),
    (lambda d: truncate(d / "model.safetensors"), ["2_Dense", "model.safetensors"]),
    (lambda d: (d / "config.json").unlink(), ["2_Dense", "config.json"]),
], ids=["in_features", "activation", "input_name", "weight-shape", "bin-only", "truncated", "no-config"])
def test_bad_dense_modules_are_refused(tmp_path, run_hfexport, edit, mentions):
    from sentence_transformers import models

    hf = tmp_path / "st-hf"
    build_encoder(hf, BERT)
    save_tokenizer(hf)
    transformer = models.Transformer(str(hf))
    save_dense_model(tmp_path / "st", transformer, "mean", [dict(in_features=BERT["hidden_size"], out_features=32)])
    edit(tmp_path / "st" / "2_Dense")
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "st", "-o", out), out, *mentions)


PEERS = Path(__file__).resolve().parents[2] / ".venv-optimum-onnx" / "bin" / "python"
ST6 = Path(__file__).resolve().parents[2] / ".venv-st6" / "bin" / "python"


def peer(*args, python: Path = PEERS) -> dict:
    """tests/parity/st_backends.py in the venv sentence-transformers' backends need (version 5's
    by default)."""
    proc = subprocess.run([str(python), str(Path(__file__).with_name("st_backends.py")), *map(str, args)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("fmt,mode,task", [("onnx", "mean", None), ("onnx", "cls", "feature-extraction"),
                                           ("openvino", "max", None)])
def test_sentence_transformers_backends_load_our_exports(tmp_path, export_model, fmt, mode, task):
    """SentenceTransformer(OUT, backend="onnx" | "openvino").encode (sentence-transformers 5.7 with
    optimum's ORTModel / OVModel, their own venv) on the export of a sentence-transformers
    checkpoint: the export folder is a sentence-transformers model folder (modules.json and the
    module folders copied beside the model), and its embeddings are the PyTorch backend's."""
    if not PEERS.exists():
        pytest.skip("no .venv-optimum-onnx (scripts/setup.sh makes it)")
    expected = np.array(peer("build", tmp_path / "st", mode))
    out = export_model(tmp_path / "st", tmp_path / "out", "--format", fmt, *(["--task", task] if task else []))
    assert json.loads((out / "modules.json").read_text()) == json.loads((tmp_path / "st" / "modules.json").read_text())
    got = peer("encode", out, fmt)
    assert got["model_class"] == {"onnx": "ORTModelForFeatureExtraction", "openvino": "OVModelForFeatureExtraction"}[fmt]
    assert Path(got["path"]).resolve().is_relative_to(out.resolve()), got["path"]  # ours, not an export of its own
    np.testing.assert_allclose(np.array(got["embeddings"]), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,task", [("mean", None), ("cls", "feature-extraction")])
def test_sentence_transformers_6_openvino_backend_loads_our_exports(tmp_path, export_model, mode, task):
    """SentenceTransformer(OUT, backend="openvino").encode with sentence-transformers 6 (optimum-intel
    2.2's OVModelForFeatureExtraction, transformers 5.5, .venv-st6) on our export of a checkpoint
    sentence-transformers 6 saved: the PyTorch backend's embeddings. (Its backend="onnx" needs
    optimum-onnx, whose only release pins transformers < 4.58 while sentence-transformers 6 needs
    5: version 5's ONNX backend is tested above.)"""
    if not ST6.exists():
        pytest.skip("no .venv-st6 (scripts/setup.sh makes it)")
    expected = np.array(peer("build", tmp_path / "st", mode, python=ST6))
    out = export_model(tmp_path / "st", tmp_path / "out", "--format", "openvino", *(["--task", task] if task else []))
    got = peer("encode", out, "openvino", python=ST6)
    assert got["model_class"] == "OVModelForFeatureExtraction"
    assert Path(got["path"]).resolve().is_relative_to(out.resolve()), got["path"]
    np.testing.assert_allclose(np.array(got["embeddings"]), expected, rtol=1e-4, atol=1e-5)
