"""Whisper speech recognition (issue 31): the `encoder` component (which also writes each decoder
layer's cross-attention keys and values once) and the `decoder` component (its self-attention
cache, reading that state unchanged every step), against transformers' WhisperForConditionalGeneration:
encoder output and first-step logits within 1e-4, and greedy generation token-identical to
`model.generate` — Whisper's prompt (decoder start, language given or detected, task,
no-timestamps) and its suppressed tokens included — for a batch of two clips, in each ONNX cache
mechanic (onnxruntime's GroupQueryAttention over one shared buffer, the default; past -> present
with the standard op set; the ort op set without GQA), and in OpenVINO, .pt2 and ExecuTorch.
`hfexport transcribe` prints the text of a WAV file."""

from __future__ import annotations

import json
import wave

import numpy as np
import pytest
import torch

from conftest import assert_clean_error

RATE = 16000
# Token ids of the tiny vocabulary's special tokens, at its end as in a real checkpoint (the ids
# after no-timestamps are timestamps: none here).
EOS, START, EN, FR, TRANSLATE, TRANSCRIBE, NO_TIMESTAMPS = 2, 94, 95, 96, 97, 98, 99
WHISPER = dict(vocab_size=100, d_model=64, encoder_layers=2, encoder_attention_heads=4, decoder_layers=2,
               decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_target_positions=48,
               pad_token_id=0, bos_token_id=1, eos_token_id=EOS, decoder_start_token_id=START)
MULTILINGUAL = dict(decoder_start_token_id=START, eos_token_id=EOS, pad_token_id=0, bos_token_id=1,
                    lang_to_id={"<|en|>": EN, "<|fr|>": FR}, task_to_id={"translate": TRANSLATE, "transcribe": TRANSCRIBE},
                    no_timestamps_token_id=NO_TIMESTAMPS, is_multilingual=True, suppress_tokens=[3, 7, 11],
                    begin_suppress_tokens=[EOS, 13])
ENGLISH = dict(decoder_start_token_id=START, eos_token_id=EOS, pad_token_id=0, bos_token_id=1,
               forced_decoder_ids=[[1, NO_TIMESTAMPS]], no_timestamps_token_id=NO_TIMESTAMPS, suppress_tokens=[5],
               begin_suppress_tokens=[EOS])


def build(folder, generation: dict, mels: int = 80, tie: bool = True):
    import transformers

    torch.manual_seed(0)
    config = transformers.WhisperConfig(**WHISPER, num_mel_bins=mels, tie_word_embeddings=tie)
    config._attn_implementation = "eager"
    model = transformers.WhisperForConditionalGeneration(config)
    with torch.no_grad():  # sharp cross-attention and positions: each clip gets its own varied tokens
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.5 if "embed_positions" in name or "encoder_attn" in name else 0.03)
    model.generation_config = transformers.GenerationConfig(**generation)
    model.eval().save_pretrained(folder)
    write_tokenizer(folder)
    return model


def write_tokenizer(folder):
    """A word-level tokenizer over the tiny vocabulary, its special tokens marked special."""
    from tokenizers import Tokenizer, models

    vocab = {f"w{i}": i for i in range(WHISPER["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    from tokenizers import AddedToken

    tok.add_special_tokens([AddedToken(f"w{i}", special=True) for i in (0, 1, EOS, START, EN, FR, TRANSLATE,
                                                                        TRANSCRIBE, NO_TIMESTAMPS)])
    tok.save(str(folder / "tokenizer.json"))
    return tok


def clips(count: int = 2):
    """A tone and noise, each nearly 30 s (so that most frames differ between them)."""
    rng = np.random.default_rng(1)
    t = np.arange(28 * RATE) / RATE
    voiced = (0.3 * np.sin(2 * np.pi * 220 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))).astype(np.float32)
    noisy = (0.3 * rng.standard_normal(27 * RATE)).astype(np.float32)
    return [voiced, noisy][:count]


def features(audio, mels: int = 80) -> np.ndarray:
    from hfexport.audio import whisper_features

    return np.stack([whisper_features(a, feature_size=mels) for a in audio])


def reference_generate(model, feats, max_new_tokens: int, **kwargs) -> np.ndarray:
    with torch.no_grad():
        return model.generate(torch.from_numpy(feats), max_new_tokens=max_new_tokens, **kwargs).numpy()


MODES = {"gqa-shared-buffer": [], "standard": ["--onnx-ops", "standard"], "ort": ["--onnx-ops", "ort"],
         "static": ["--static-cache", "--max-cache-len", "32", "--batch-size", "2"]}
# The other formats, with their static caches (ExecuTorch's programs serve batch 1).
FORMATS = {"openvino": ["--format", "openvino"], "pt2": ["--format", "pt2"], "executorch": ["--format", "executorch"],
           "pt2-static": ["--format", "pt2", "--static-cache", "--max-cache-len", "32", "--batch-size", "2"],
           "executorch-static": ["--format", "executorch", "--static-cache", "--max-cache-len", "32"]}


@pytest.fixture(scope="module")
def multilingual(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whisper") / "model"
    return folder, build(folder, MULTILINGUAL)


@pytest.mark.parametrize("mode", list(MODES))
def test_generation_matches_transformers(tmp_path, multilingual, export_model, support_matrix, mode):
    from hfexport import ExportedModel
    from hfexport.runner import open_runner
    from hfexport.seq2seq import whisper_generate

    folder, model = multilingual
    out = export_model(folder, tmp_path / "out", "--for-generation", *MODES[mode])
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "automatic-speech-recognition"
    assert manifest["generation"]["components"] == ["encoder", "decoder"]
    decoder_inputs = [i["name"] for i in manifest["components"]["decoder"]["inputs"]]
    assert "past_key_values.0.encoder.key" in decoder_inputs  # read, never re-emitted by the decoder:
    assert not any(o["name"].startswith("present.0.encoder") for o in manifest["components"]["decoder"]["outputs"])
    feats = features(clips())

    # The encoder's output, and the first step's logits over the cross-attention state it wrote.
    runner = open_runner(out)
    encoded = runner.encode(input_features=feats)
    with torch.no_grad():
        expected = model.get_encoder()(torch.from_numpy(feats)).last_hidden_state.numpy()
        prompt = torch.tensor([[START, FR, TRANSCRIBE, NO_TIMESTAMPS]] * 2)
        first = model(input_features=torch.from_numpy(feats), decoder_input_ids=prompt).logits[:, -1].numpy()
    np.testing.assert_allclose(encoded["last_hidden_state"], expected, rtol=1e-4, atol=1e-4)
    logits = runner.prefill(prompt.numpy(), np.ones((2, 4), np.int64), 1)
    np.testing.assert_allclose(logits, first, rtol=1e-4, atol=1e-4)
    err = float(np.abs(logits - first).max())

    # Greedy generation: language detected, then given with a task; through the Python API too.
    gen = json.loads((out / "generation_config.json").read_text())
    for kwargs in ({}, {"language": "fr", "task": "translate"}, {"language": "en"}):
        expected_ids = reference_generate(model, feats, 12, **kwargs)
        ours = whisper_generate(open_runner(out), feats, gen, 12, **kwargs)
        np.testing.assert_array_equal(ours, expected_ids)
    api = ExportedModel(out).generate(input_features=torch.from_numpy(feats), max_new_tokens=12, language="fr")
    np.testing.assert_array_equal(api.numpy(), reference_generate(model, feats, 12, language="fr"))
    support_matrix.record("whisper", f"generation ({mode})", True, err, backend="onnx")


def test_python_api_export_for_generation(multilingual):
    """The seeds' API on the live model: `export_for_generation(model, inputs)` returns the encoder and
    decoder, verified against the model on `inputs`, and generates as the model does."""
    from hfexport.exporters import OnnxExporter

    _, model = multilingual
    feats = features(clips())
    exported = OnnxExporter().export_for_generation(model, {"input_features": torch.from_numpy(feats)})
    assert list(exported) == ["encoder", "decoder"]
    assert exported.manifest["verification"]["passed"] is True
    np.testing.assert_array_equal(exported.generate(input_features=feats, max_new_tokens=8, language="fr"),
                                  reference_generate(model, feats, 8, language="fr"))


@pytest.mark.parametrize("args", [["--dtype", "float16"], ["--format", "openvino", "--dtype", "float16"],
                                  ["--format", "pt2", "--dtype", "bfloat16"]], ids=["onnx-fp16", "openvino-fp16", "pt2-bf16"])
def test_half_precision(tmp_path, multilingual, export_model, args):
    """Half-precision exports take float32 features through the same API (cast to the export's
    dtype) and keep the first step's logits within half precision of transformers'."""
    from hfexport.runner import open_runner
    from hfexport.seq2seq import whisper_generate

    folder, model = multilingual
    out = export_model(folder, tmp_path / "out", "--for-generation", *args)
    feats = features(clips())
    gen = json.loads((out / "generation_config.json").read_text())
    logs = []
    whisper_generate(open_runner(out), feats, gen, 4, language="fr", step_logits=logs)
    prompt = torch.tensor([[START, FR, TRANSCRIBE, NO_TIMESTAMPS]] * 2)
    with torch.no_grad():
        first = model(input_features=torch.from_numpy(feats), decoder_input_ids=prompt).logits[:, -1].numpy()
    scale = float(np.abs(first).max())
    assert float(np.abs(np.asarray(logs[0], np.float32) - first).max()) <= (0.02 if "float16" in args else 0.05) * scale


def test_english_only_forced_prompt_128_mels_untied(tmp_path, export_model):
    """forced_decoder_ids (an English-only checkpoint's prompt), large-v3's 128 channels, a stored proj_out."""
    from hfexport.runner import open_runner
    from hfexport.seq2seq import whisper_generate

    model = build(tmp_path / "model", ENGLISH, mels=128, tie=False)
    out = export_model(tmp_path / "model", tmp_path / "out", "--for-generation")
    feats = features(clips(), mels=128)
    gen = json.loads((out / "generation_config.json").read_text())
    ours = whisper_generate(open_runner(out), feats, gen, 16)
    np.testing.assert_array_equal(ours, reference_generate(model, feats, 16))


def write_wav(path, samples: np.ndarray, rate: int = RATE) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())


def test_transcribe_prints_the_text(tmp_path, multilingual, export_model, run_hfexport):
    from transformers import WhisperFeatureExtractor

    folder, model = multilingual
    out = export_model(folder, tmp_path / "out", "--for-generation")
    audio = clips(1)[0]
    write_wav(tmp_path / "clip.wav", audio)
    proc = run_hfexport("transcribe", out, tmp_path / "clip.wav", "--language", "fr", "--max-new-tokens", "10")
    assert proc.returncode == 0, proc.stderr
    # transformers from the same 16-bit samples, through its own feature extractor.
    pcm = np.round(np.clip(audio, -1, 1) * 32767).astype(np.int16).astype(np.float32) / 32768
    feats = WhisperFeatureExtractor()(pcm, sampling_rate=RATE, return_tensors="np").input_features
    ids = reference_generate(model, feats, 10, language="fr")[0]
    expected = write_tokenizer(tmp_path).decode([int(i) for i in ids], skip_special_tokens=True).strip()
    assert proc.stdout.strip() == expected


@pytest.mark.parametrize("fmt,subtype", [("FLAC", "PCM_16"), ("MP3", "MPEG_LAYER_III")])
def test_transcribe_reads_compressed_audio(tmp_path, multilingual, export_model, run_hfexport, fmt, subtype):
    """FLAC and MP3 (through soundfile, stereo averaged to mono): the text transformers gives for
    the samples the file decodes to."""
    import soundfile
    from transformers import WhisperFeatureExtractor

    folder, model = multilingual
    out = export_model(folder, tmp_path / "out", "--for-generation")
    clip = clips(1)[0]
    path = tmp_path / f"clip.{fmt.lower()}"
    soundfile.write(str(path), np.stack([clip, 0.5 * clip], axis=1), RATE, format=fmt, subtype=subtype)
    decoded, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    assert rate == RATE
    feats = WhisperFeatureExtractor()(decoded.mean(axis=1), sampling_rate=RATE, return_tensors="np").input_features
    ids = reference_generate(model, feats, 10, language="fr")[0]
    expected = write_tokenizer(tmp_path).decode([int(i) for i in ids], skip_special_tokens=True).strip()
    proc = run_hfexport("transcribe", out, path, "--language", "fr", "--max-new-tokens", "10")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == expected and expected


def test_transcribe_refuses_bad_audio(tmp_path, multilingual, export_model, run_hfexport):
    folder, _ = multilingual
    out = export_model(folder, tmp_path / "out", "--for-generation")
    write_wav(tmp_path / "fast.wav", clips(1)[0], rate=44100)
    (tmp_path / "junk.wav").write_bytes(b"RIFF\x00\x00")
    for name, mention in (("fast.wav", "16000 Hz"), ("junk.wav", "junk.wav"),
                          ("missing.wav", "no such file")):
        assert_clean_error(run_hfexport("transcribe", out, tmp_path / name), None, mention)
    assert_clean_error(run_hfexport("generate", out, "--input-ids", "1"), None, "hfexport transcribe")


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_matches_transformers(tmp_path, multilingual, export_model, support_matrix, fmt):
    """The same two components in OpenVINO (the decoder's self-attention cache in its variables),
    .pt2 programs and an ExecuTorch program (methods `encoder` and `text_decoder`, batch 1)."""
    from hfexport.runner import open_runner
    from hfexport.seq2seq import whisper_generate

    folder, model = multilingual
    out = export_model(folder, tmp_path / "out", "--for-generation", *FORMATS[fmt])
    feats = features(clips(1 if fmt.startswith("executorch") else 2))
    runner = open_runner(out)
    encoded = runner.encode(input_features=feats)
    prompt = np.array([[START, FR, TRANSCRIBE, NO_TIMESTAMPS]] * len(feats), np.int64)
    with torch.no_grad():
        expected = model.get_encoder()(torch.from_numpy(feats)).last_hidden_state.numpy()
        first = model(input_features=torch.from_numpy(feats), decoder_input_ids=torch.from_numpy(prompt)).logits[:, -1].numpy()
    np.testing.assert_allclose(encoded["last_hidden_state"], expected, rtol=1e-4, atol=1e-4)
    logits = runner.prefill(prompt, np.ones_like(prompt), 1)
    np.testing.assert_allclose(logits, first, rtol=1e-4, atol=1e-4)
    gen = json.loads((out / "generation_config.json").read_text())
    for kwargs in ({}, {"language": "fr", "task": "translate"}):
        np.testing.assert_array_equal(whisper_generate(open_runner(out), feats, gen, 12, **kwargs),
                                      reference_generate(model, feats, 12, **kwargs))
    support_matrix.record("whisper", f"generation ({fmt})", True, float(np.abs(logits - first).max()),
                          backend=fmt.split("-")[0])


@pytest.mark.parametrize("args,mentions", [
    ([], ["--for-generation", "--task feature-extraction"]),
])
def test_refusals(tmp_path, multilingual, run_hfexport, args, mentions):
    folder, _ = multilingual
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", folder, "-o", out, *args), out, *mentions)


def test_missing_cross_attention_weight(tmp_path, multilingual, run_hfexport):
    """A decoder layer's cross-attention projection (which the encoder component reads) missing:
    one line naming it, nothing written."""
    import shutil

    import safetensors.torch as st

    folder, _ = multilingual
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    tensors = st.load_file(broken / "model.safetensors")
    del tensors["model.decoder.layers.1.encoder_attn.k_proj.weight"]
    st.save_file(tensors, broken / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", broken, "-o", out, "--for-generation"), out,
                       "model.decoder.layers.1.encoder_attn.k_proj.weight")
