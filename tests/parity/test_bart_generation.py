"""The BART family's text-to-text generation (issue 31): bart (post-norm, learned positions with an
offset, layernorm_embedding), mbart (pre-norm, scaled embeddings, closing LayerNorms) and marian
(sinusoidal positions computed as transformers does, no embedding norm), against transformers'
*ForConditionalGeneration: the encoder's output and first-step logits within 1e-4 (final_logits_bias
included), greedy generation token-identical to `model.generate` — forced BOS / EOS tokens of the
generation config included — for a right-padded batch, in each ONNX cache mechanic, and in
OpenVINO, .pt2 and ExecuTorch; the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_clean_error

BART = dict(vocab_size=120, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
# class, config overrides, generation config, weight init (std, cross-attention std): chosen so that
# the two rows' tokens differ (the random models soon repeat a token).
VARIANTS = {
    "bart": ("Bart", dict(), dict(forced_bos_token_id=0, forced_eos_token_id=2), (0.1, 1.5)),
    "mbart": ("MBart", dict(scale_embedding=True), dict(forced_bos_token_id=7), (0.4, 0.6)),
    "marian": ("Marian", dict(scale_embedding=True, decoder_start_token_id=1), dict(), (0.1, 1.5)),
}
MODES = {"gqa-shared-buffer": [], "standard": ["--onnx-ops", "standard"], "ort": ["--onnx-ops", "ort"],
         "static": ["--static-cache", "--max-cache-len", "32", "--batch-size", "2"]}
# The other formats, with their static caches (ExecuTorch's programs serve batch 1).
FORMATS = {"openvino": ["--format", "openvino"], "pt2": ["--format", "pt2"], "executorch": ["--format", "executorch"],
           "pt2-static": ["--format", "pt2", "--static-cache", "--max-cache-len", "32", "--batch-size", "2"],
           "executorch-static": ["--format", "executorch", "--static-cache", "--max-cache-len", "32"]}


def build(folder, cls: str, overrides: dict, generation: dict, init: tuple[float, float]):
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, cls + "Config")(**{**BART, **overrides})
    config._attn_implementation = "eager"
    model = getattr(transformers, "MarianMTModel" if cls == "Marian" else cls + "ForConditionalGeneration")(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            elif "embed_positions" not in name or cls != "Marian":
                p.normal_(0.0, init[1] if "encoder_attn" in name else init[0])
        model.final_logits_bias.normal_(0.0, 0.05)
    gen = {k: v for k, v in BART.items() if k.endswith("token_id")}
    gen.update(decoder_start_token_id=config.decoder_start_token_id, **generation)
    model.generation_config = transformers.GenerationConfig(**gen)
    model.eval().save_pretrained(folder)
    return model


def batch():
    rng = np.random.default_rng(5)
    ids = rng.integers(3, BART["vocab_size"], size=(2, 10)).astype(np.int64)
    ids[:, -1] = BART["eos_token_id"]
    mask = np.ones_like(ids)
    ids[1, 6:], mask[1, 6:] = BART["pad_token_id"], 0
    ids[1, 5] = BART["eos_token_id"]
    return ids, mask


def reference(model, ids, mask, new: int) -> np.ndarray:
    with torch.no_grad():
        return model.generate(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                              max_new_tokens=new, do_sample=False, num_beams=1).numpy()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    built = {}
    for name, (cls, overrides, generation, init) in VARIANTS.items():
        folder = tmp_path_factory.mktemp("bart") / name
        built[name] = (folder, build(folder, cls, overrides, generation, init))
    return built


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("mode", list(MODES))
def test_generation_matches_transformers(tmp_path, models, export_model, support_matrix, variant, mode):
    from hfexport.runner import open_runner
    from hfexport.seq2seq import text2text_generate

    folder, model = models[variant]
    out = export_model(folder, tmp_path / "out", "--for-generation", *MODES[mode])
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "text2text-generation"
    ids, mask = batch()
    runner = open_runner(out)
    encoded = runner.encode(input_ids=ids, attention_mask=mask)
    start = model.config.decoder_start_token_id
    prompt = np.array([[start, 17, 33, 40]] * 2, np.int64)
    with torch.no_grad():
        expected = model.get_encoder()(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
        first = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                      decoder_input_ids=torch.from_numpy(prompt)).logits[:, -1].numpy()
    real = mask.astype(bool)
    np.testing.assert_allclose(encoded["last_hidden_state"][real], expected.last_hidden_state.numpy()[real],
                               rtol=1e-4, atol=1e-4)
    logits = runner.prefill(prompt, np.ones_like(prompt), 1)
    np.testing.assert_allclose(logits, first, rtol=1e-4, atol=1e-4)
    expected_ids = reference(model, ids, mask, 12)
    assert len({tuple(r) for r in expected_ids}) == 2, "rows should differ for the test to mean something"
    gen = json.loads((out / "generation_config.json").read_text())
    np.testing.assert_array_equal(text2text_generate(open_runner(out), ids, mask, gen, 12), expected_ids)
    support_matrix.record(variant, f"text2text-generation ({mode})", True, float(np.abs(logits - first).max()),
                          backend="onnx")


@pytest.mark.parametrize("variant", ["mbart", "marian"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_matches_transformers(tmp_path, models, export_model, support_matrix, variant, fmt):
    from hfexport.runner import open_runner
    from hfexport.seq2seq import text2text_generate

    folder, model = models[variant]
    out = export_model(folder, tmp_path / "out", "--for-generation", *FORMATS[fmt])
    ids, mask = batch()
    if fmt.startswith("executorch"):  # its programs serve batch 1
        ids, mask = ids[1:], mask[1:]
    start = model.config.decoder_start_token_id
    prompt = np.array([[start, 17, 33, 40]] * len(ids), np.int64)
    runner = open_runner(out)
    runner.encode(input_ids=ids, attention_mask=mask)
    with torch.no_grad():
        first = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                      decoder_input_ids=torch.from_numpy(prompt)).logits[:, -1].numpy()
    logits = runner.prefill(prompt, np.ones_like(prompt), 1)
    np.testing.assert_allclose(logits, first, rtol=1e-4, atol=1e-4)
    gen = json.loads((out / "generation_config.json").read_text())
    np.testing.assert_array_equal(text2text_generate(open_runner(out), ids, mask, gen, 12), reference(model, ids, mask, 12))
    support_matrix.record(variant, f"text2text-generation ({fmt})", True, float(np.abs(logits - first).max()),
                          backend=fmt.split("-")[0])


@pytest.mark.parametrize("args,mentions", [
    ([], ["text2text-generation", "--for-generation"]),
    (["--for-generation", "--task", "feature-extraction"], ["decode loop"]),
])
def test_refusals(tmp_path, models, run_hfexport, args, mentions):
    folder, _ = models["bart"]
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", folder, "-o", out, *args), out, *mentions)


def test_unsupported_config_keys(tmp_path, models, run_hfexport):
    """Marian's separate decoder vocabulary is refused by its key; so is an attention head count
    that does not divide d_model."""
    import shutil

    folder, _ = models["marian"]
    for key, value in (("decoder_vocab_size", 77), ("decoder_attention_heads", 5)):
        broken = tmp_path / key
        shutil.copytree(folder, broken)
        config = json.loads((broken / "config.json").read_text())
        (broken / "config.json").write_text(json.dumps({**config, key: value}))
        out = tmp_path / f"out-{key}"
        assert_clean_error(run_hfexport("export", broken, "-o", out, "--for-generation"), out, key)
