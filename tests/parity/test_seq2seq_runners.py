"""Encoder-decoder exports in the runtimes' own runners (issue 31), against transformers' greedy
tokens:

- optimum-onnx's `ORTModelForSeq2SeqLM` (T5, umT5, BART, mBART, Marian) and
  `ORTModelForSpeechSeq2Seq` (Whisper) over `--for-generation --onnx-layout optimum`:
  onnx/encoder_model.onnx (last_hidden_state only), onnx/decoder_model.onnx (the first step:
  encoder_hidden_states in, the cross-attention keys and values it projects out as
  present.{i}.encoder.*, with the fresh self-attention cache) and onnx/decoder_with_past_model.onnx
  (the steps: past_key_values.{i}.decoder.* and .encoder.* in, the cross-attention state read and
  never re-emitted), one data file for all three; in each op profile.
- optimum-intel's `OVModelForSeq2SeqLM` / `OVModelForSpeechSeq2Seq` and OpenVINO GenAI's
  `WhisperPipeline` (raw audio in, text out; the tokenizer converted by openvino-tokenizers) over
  the default OpenVINO export: openvino_encoder_model.xml and a stateful
  openvino_decoder_model.xml taking input_ids, encoder_hidden_states and beam_idx, whose first call
  after a reset projects the cross-attention state into its variables (ReadValue initialised from
  the projection) beside the self-attention cache.
- onnxruntime-genai's whisper model type (its `Generator`) over the ONNX export of a past -> present
  op profile, through the genai_config.json the export writes; and its multimodal processor (an
  audio file and a prompt text in, through the audio_processor_config.json the export writes and a
  byte-level BPE tokenizer that onnxruntime-extensions loads).

hfexport's runner and `ExportedModel` run the same files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import test_bart_generation as bart
import test_t5_generation as t5
import test_whisper_generation as whisper

OPTIMUM = Path(__file__).resolve().parents[2] / ".venv-optimum-onnx" / "bin" / "python"
FILES = ["decoder_model.onnx", "decoder_with_past_model.onnx", "encoder_model.onnx", "model.onnx_data"]
TEXT = {"t5-relu-tied": "t5", "t5v1.1-gated-untied": "t5", "umt5": "t5", "bart": "bart", "mbart": "bart", "marian": "bart"}
# Each op profile writes the two decoders differently (GroupQueryAttention, MultiHeadAttention, ai.onnx).
PROFILES = {"default": [], "standard": ["--onnx-ops", "standard"], "ort": ["--onnx-ops", "ort"]}


def optimum_generate(out: Path, request: dict, tmp_path: Path) -> dict:
    """optimum's class request["class"] (ORTModelFor... or OVModelFor...) over `out`, in its venv."""
    if not OPTIMUM.is_file():
        pytest.skip("no .venv-optimum-onnx (scripts/setup.sh makes it)")
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    proc = subprocess.run([str(OPTIMUM), str(Path(__file__).with_name("optimum_seq2seq.py")), str(out), str(path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_layout(out: Path, manifest: dict) -> None:
    assert sorted(p.name for p in (out / "onnx").iterdir()) == FILES
    assert manifest["generation"]["components"] == ["encoder", "prefill", "decoder"]
    components = manifest["components"]
    assert [o["name"] for o in components["encoder"]["outputs"]] == ["last_hidden_state"]
    first_inputs = [i["name"] for i in components["prefill"]["inputs"]]
    assert "encoder_hidden_states" in first_inputs and not any(n.startswith("past_key_values") for n in first_inputs)
    assert "present.0.encoder.key" in [o["name"] for o in components["prefill"]["outputs"]]
    step_inputs = [i["name"] for i in components["decoder"]["inputs"]]
    assert "past_key_values.0.encoder.key" in step_inputs and "position_ids" not in step_inputs
    assert not any(".encoder." in o["name"] for o in components["decoder"]["outputs"])


@pytest.fixture(scope="module")
def text_models(tmp_path_factory):
    built = {}
    for name, family in TEXT.items():
        folder = tmp_path_factory.mktemp("optimum-seq2seq") / name
        if family == "t5":
            model_type, overrides = t5.VARIANTS[name]
            built[name] = (folder, t5.build(folder, model_type, overrides))
        else:
            built[name] = (folder, bart.build(folder, *bart.VARIANTS[name]))
    return built


@pytest.mark.parametrize("variant", list(TEXT))
@pytest.mark.parametrize("profile", list(PROFILES))
def test_ort_model_for_seq2seq_lm(tmp_path, text_models, export_model, support_matrix, variant, profile):
    from hfexport import ExportedModel
    from hfexport.runner import open_runner
    from hfexport.seq2seq import text2text_generate

    family = t5 if TEXT[variant] == "t5" else bart
    folder, model = text_models[variant]
    out = export_model(folder, tmp_path / "out", "--for-generation", "--onnx-layout", "optimum", *PROFILES[profile])
    check_layout(out, json.loads((out / "export.json").read_text()))
    ids, mask = family.batch()
    expected = family.reference(model, ids, mask, 12)
    assert len({tuple(r) for r in expected}) == 2, "rows should differ for the test to mean something"
    got = optimum_generate(out, {"class": "ORTModelForSeq2SeqLM", "input_ids": ids.tolist(),
                                 "attention_mask": mask.tolist(), "max_new_tokens": 12}, tmp_path)
    assert got["sessions"] == {"decoder": "decoder_model.onnx", "decoder_with_past": "decoder_with_past_model.onnx"}
    np.testing.assert_array_equal(np.array(got["ids"]), expected)
    # The same files in hfexport's runner and its Python API.
    gen = json.loads((out / "generation_config.json").read_text())
    np.testing.assert_array_equal(text2text_generate(open_runner(out), ids, mask, gen, 12), expected)
    api = ExportedModel(out).generate(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=12)
    np.testing.assert_array_equal(np.asarray(api), expected)
    support_matrix.record(model.config.model_type, f"text2text-generation (optimum ORTModelForSeq2SeqLM, {profile})",
                          True, 0.0, backend="onnx")


@pytest.mark.parametrize("profile", list(PROFILES))
def test_ort_model_for_speech_seq2seq(tmp_path, export_model, support_matrix, profile):
    from hfexport.runner import open_runner
    from hfexport.seq2seq import whisper_generate

    model = whisper.build(tmp_path / "model", whisper.MULTILINGUAL)
    out = export_model(tmp_path / "model", tmp_path / "out", "--for-generation", "--onnx-layout", "optimum",
                       *PROFILES[profile])
    check_layout(out, json.loads((out / "export.json").read_text()))
    feats = whisper.features(whisper.clips())
    np.save(tmp_path / "features.npy", feats)
    gen = json.loads((out / "generation_config.json").read_text())
    for kwargs in ({}, {"language": "fr", "task": "translate"}):  # the language detected, then given
        expected = whisper.reference_generate(model, feats, 12, **kwargs)
        got = optimum_generate(out, {"class": "ORTModelForSpeechSeq2Seq", "input_features": str(tmp_path / "features.npy"),
                                     "max_new_tokens": 12, "generate": kwargs}, tmp_path)
        np.testing.assert_array_equal(np.array(got["ids"]), expected)
        np.testing.assert_array_equal(whisper_generate(open_runner(out), feats, gen, 12, **kwargs), expected)
    support_matrix.record("whisper", f"automatic-speech-recognition (optimum ORTModelForSpeechSeq2Seq, {profile})",
                          True, 0.0, backend="onnx")


# -- OpenVINO: optimum-intel and OpenVINO GenAI ---------------------------------------------------

def check_stateful_decoder(out: Path) -> None:
    import openvino as ov

    decoder = ov.Core().read_model(str(out / "openvino_decoder_model.xml"))
    assert sorted(i.get_any_name() for i in decoder.inputs) in (
        ["beam_idx", "encoder_hidden_states", "input_ids"],
        ["beam_idx", "encoder_attention_mask", "encoder_hidden_states", "input_ids"])
    assert [o.get_any_name() for o in decoder.outputs] == ["logits"]
    assert any(v.get_info().variable_id == "past_key_values.0.encoder.key" for v in decoder.get_variables())


@pytest.mark.parametrize("variant", ["t5v1.1-gated-untied", "umt5", "bart", "marian"])
def test_ov_model_for_seq2seq_lm(tmp_path, text_models, export_model, support_matrix, variant):
    from hfexport.runner import open_runner
    from hfexport.seq2seq import text2text_generate

    family = t5 if TEXT[variant] == "t5" else bart
    folder, model = text_models[variant]
    out = export_model(folder, tmp_path / "out", "--format", "openvino", "--for-generation")
    check_stateful_decoder(out)
    ids, mask = family.batch()
    expected = family.reference(model, ids, mask, 12)
    got = optimum_generate(out, {"class": "OVModelForSeq2SeqLM", "input_ids": ids.tolist(),
                                 "attention_mask": mask.tolist(), "max_new_tokens": 12}, tmp_path)
    np.testing.assert_array_equal(np.array(got["ids"]), expected)
    gen = json.loads((out / "generation_config.json").read_text())
    np.testing.assert_array_equal(text2text_generate(open_runner(out), ids, mask, gen, 12), expected)
    support_matrix.record(model.config.model_type, "text2text-generation (optimum-intel OVModelForSeq2SeqLM)",
                          True, 0.0, backend="openvino")


def whisper_with_tokenizer(folder: Path):
    """The test's Whisper with a word-level tokenizer openvino-tokenizers converts (words joined
    by spaces; the special tokens skipped in text) and the feature extractor's config."""
    import transformers
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    model = whisper.build(folder, whisper.MULTILINGUAL)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(whisper.WHISPER["vocab_size"])}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    specials = (0, 1, whisper.EOS, whisper.START, whisper.EN, whisper.FR, whisper.TRANSLATE, whisper.TRANSCRIBE,
                whisper.NO_TIMESTAMPS)
    tok.add_special_tokens([AddedToken(f"w{i}", special=True) for i in specials])
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0",
                                                     eos_token=f"w{whisper.EOS}", pad_token="w0")
    tokenizer.save_pretrained(folder)
    transformers.WhisperFeatureExtractor(feature_size=80).save_pretrained(folder)
    return model, tokenizer


def test_openvino_whisper_in_optimum_intel_and_genai(tmp_path, export_model, support_matrix):
    genai = pytest.importorskip("openvino_genai")
    ov_tokenizers = pytest.importorskip("openvino_tokenizers")
    import openvino as ov
    from hfexport.runner import open_runner
    from hfexport.seq2seq import whisper_generate

    model, tokenizer = whisper_with_tokenizer(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "openvino", "--for-generation")
    check_stateful_decoder(out)
    assert (out / "preprocessor_config.json").is_file()
    tok, detok = ov_tokenizers.convert_tokenizer(tokenizer, with_detokenizer=True)
    ov.save_model(tok, str(out / "openvino_tokenizer.xml"))
    ov.save_model(detok, str(out / "openvino_detokenizer.xml"))

    audio = whisper.clips()
    feats = whisper.features(audio)
    np.save(tmp_path / "features.npy", feats)
    gen = json.loads((out / "generation_config.json").read_text())
    pipe = genai.WhisperPipeline(str(out), "CPU", INFERENCE_PRECISION_HINT="f32", KV_CACHE_PRECISION="f32")
    # The language detected, given, and given with the other task. (GenAI's prompt without a task
    # is transcribe's; transformers' leaves the task token out: the cases name one.)
    for kwargs in ({"task": "transcribe"}, {"language": "en", "task": "transcribe"}, {"language": "fr", "task": "translate"}):
        expected = whisper.reference_generate(model, feats, 12, **kwargs)
        got = optimum_generate(out, {"class": "OVModelForSpeechSeq2Seq", "input_features": str(tmp_path / "features.npy"),
                                     "max_new_tokens": 12, "generate": kwargs}, tmp_path)
        np.testing.assert_array_equal(np.array(got["ids"]), expected)
        np.testing.assert_array_equal(whisper_generate(open_runner(out), feats, gen, 12, **kwargs), expected)
        genai_kwargs = {k: f"<|{v}|>" if k == "language" else v for k, v in kwargs.items()}
        for clip, row in zip(audio, expected):  # the pipeline computes its own features from the audio
            text = pipe.generate(clip.tolist(), max_new_tokens=12, **genai_kwargs).texts[0]
            assert text == tokenizer.decode(row, skip_special_tokens=True), kwargs
    support_matrix.record("whisper", "automatic-speech-recognition (optimum-intel OVModelForSpeechSeq2Seq, "
                          "OpenVINO GenAI WhisperPipeline)", True, 0.0, backend="openvino")


# -- onnxruntime-genai ---------------------------------------------------------------------------

def plain_greedy(model, feats: np.ndarray, prompt: list[int], new: int) -> np.ndarray:
    """transformers' Whisper from a given prompt, argmax each step and no logits processors (as
    onnxruntime-genai's Generator runs it)."""
    ids = torch.tensor([prompt] * feats.shape[0])
    with torch.no_grad():
        encoded = model.get_encoder()(torch.from_numpy(feats))
        for _ in range(new):
            logits = model(encoder_outputs=encoded, decoder_input_ids=ids).logits[:, -1]
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids.numpy()


@pytest.mark.parametrize("profile", ["standard", "ort"])
def test_onnxruntime_genai_whisper(tmp_path, export_model, support_matrix, profile):
    """onnxruntime-genai's whisper model type over the ONNX export of a past -> present op profile
    (its decoder takes no mask: the cache's length is the past; genai_config.json maps its names
    onto ours): the Generator, given the features and Whisper's prompt, generates transformers'
    argmax tokens for a batch of two clips. The default profile's shared-buffer decoder needs a
    mask, which onnxruntime-genai's whisper does not feed: no genai_config.json there."""
    og = pytest.importorskip("onnxruntime_genai")
    model = whisper.build(tmp_path / "model", whisper.MULTILINGUAL)
    out = export_model(tmp_path / "model", tmp_path / "out", "--for-generation", "--onnx-ops", profile)
    config = json.loads((out / "genai_config.json").read_text())
    assert config["model"]["type"] == "whisper"
    assert config["model"]["encoder"]["outputs"]["cross_present_key_names"] == "present.%d.encoder.key"
    assert (out / "audio_processor_config.json").is_file()
    default = export_model(tmp_path / "model", tmp_path / "default", "--for-generation")
    assert not (default / "genai_config.json").exists() and not (default / "audio_processor_config.json").exists()

    feats = whisper.features(whisper.clips())
    prompt = [whisper.START, whisper.FR, whisper.TRANSCRIBE, whisper.NO_TIMESTAMPS]
    expected = plain_greedy(model, feats, prompt, 12)
    assert len({tuple(r) for r in expected}) == 2, "rows should differ for the test to mean something"
    genai_model = og.Model(str(out))
    params = og.GeneratorParams(genai_model)
    params.set_search_options(max_length=len(prompt) + 12, batch_size=2)
    generator = og.Generator(genai_model, params)
    inputs = og.NamedTensors()
    inputs["input_features"] = feats
    generator.set_inputs(inputs)
    generator.append_tokens(np.array([prompt] * 2, np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    for row in range(2):
        got = np.array(generator.get_sequence(row))
        assert len(got) > len(prompt) + 4, got  # (it stops at eos)
        np.testing.assert_array_equal(got, expected[row, : len(got)])
    support_matrix.record("whisper", f"automatic-speech-recognition (onnxruntime-genai, {profile})", True, 0.0,
                          backend="onnx")


def bpe_whisper(folder):
    """A tiny Whisper whose tokenizer is byte-level BPE (the kind onnxruntime-extensions loads, as
    a real Whisper's is): the 256 byte symbols, then Whisper's special tokens."""
    import transformers
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    specials = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|fr|>", "<|translate|>", "<|transcribe|>",
                "<|notimestamps|>"]
    eos, start, en, fr, translate, transcribe, no_timestamps = range(len(alphabet), len(alphabet) + len(specials))
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True) for t in specials])
    ids = dict(eos_token_id=eos, decoder_start_token_id=start, pad_token_id=eos, bos_token_id=eos)
    torch.manual_seed(0)
    config = transformers.WhisperConfig(**{**whisper.WHISPER, **ids, "vocab_size": len(alphabet) + len(specials)})
    config._attn_implementation = "eager"
    model = transformers.WhisperForConditionalGeneration(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.5 if "embed_positions" in name or "encoder_attn" in name else 0.03)
    model.generation_config = transformers.GenerationConfig(
        **ids, lang_to_id={"<|en|>": en, "<|fr|>": fr}, task_to_id={"translate": translate, "transcribe": transcribe},
        no_timestamps_token_id=no_timestamps, is_multilingual=True)
    model.eval().save_pretrained(folder)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "WhisperTokenizer", **{
        k: "<|endoftext|>" for k in ("bos_token", "eos_token", "unk_token", "pad_token")}}))
    return model, tok, [start, fr, transcribe, no_timestamps]


def test_onnxruntime_genai_whisper_processor(tmp_path, export_model, support_matrix):
    """onnxruntime-genai's own path from an audio file: og.Audios.open + the model's multimodal
    processor (the features by onnxruntime-extensions, as audio_processor_config.json names them;
    the prompt tokenized by its BPE) feed the Generator, whose tokens are transformers' argmax
    tokens; its tokenizer decodes text as ours does. (onnxruntime-extensions'
    features are its own STFT's, not WhisperFeatureExtractor's: for this model the tokens agree.)"""
    og = pytest.importorskip("onnxruntime_genai")
    from transformers import WhisperFeatureExtractor

    model, tok, prompt = bpe_whisper(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--for-generation", "--onnx-ops", "standard")
    steps = json.loads((out / "audio_processor_config.json").read_text())["feature_extraction"]["sequence"]
    assert [s["operation"]["type"] for s in steps] == ["AudioDecoder", "STFTNorm", "LogMelSpectrum"]
    clip = whisper.clips(1)[0]
    whisper.write_wav(tmp_path / "clip.wav", clip)
    pcm = np.round(np.clip(clip, -1, 1) * 32767).astype(np.int16).astype(np.float32) / 32768
    feats = WhisperFeatureExtractor()(pcm, sampling_rate=whisper.RATE, return_tensors="np").input_features
    expected = plain_greedy(model, feats, prompt, 12)[0]

    genai_model = og.Model(str(out))
    processor = genai_model.create_multimodal_processor()
    inputs = processor([tok.decode(prompt, skip_special_tokens=False)], audios=og.Audios.open(str(tmp_path / "clip.wav")))
    np.testing.assert_array_equal(inputs["input_ids"].as_numpy()[0], prompt)
    params = og.GeneratorParams(genai_model)
    params.set_search_options(max_length=len(expected))
    generator = og.Generator(genai_model, params)
    generator.set_inputs(inputs)
    while not generator.is_done():
        generator.generate_next_token()
    got = np.array(generator.get_sequence(0))
    np.testing.assert_array_equal(got, expected[: len(got)])
    assert len(got) == len(expected)
    # (random bytes make no text: its tokenizer decodes ours on a real sentence)
    sentence = " Bonjour, le monde: 42 ok."
    assert processor.decode(np.array(tok.encode(sentence).ids, np.int32)) == sentence
    support_matrix.record("whisper", "automatic-speech-recognition (onnxruntime-genai processor)", True, 0.0,
                          backend="onnx")
