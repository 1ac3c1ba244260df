"""`hfexport transcribe OUT_DIR AUDIO [--language L] [--task transcribe|translate]
[--max-new-tokens N] [--timestamps]`: speech to text. The audio: WAV through Python's wave module, or
any format the soundfile package reads when it is installed. A Whisper export (--for-generation):
log-mel features computed by hfexport's C++ core exactly as WhisperFeatureExtractor computes them
(the whole file: padded to 30 s when shorter), the export's encoder and decoder generating greedily
as WhisperForConditionalGeneration.generate does (Whisper's prompt and suppressed tokens; audio
over 30 s decoded sequentially in 30 s windows with timestamps), the text printed with its special
and timestamp tokens left out; --timestamps prints a line per segment, "[start --> end] text",
times in seconds. A wav2vec2 CTC export: the samples
normalised as Wav2Vec2FeatureExtractor does, the forward's logits' argmax per frame decoded as
Wav2Vec2CTCTokenizer.decode does (repeats merged, blanks dropped, word delimiters as spaces)."""

from __future__ import annotations

import argparse
import json
import sys
import wave
from pathlib import Path

import numpy as np

from .manifest import DECODER, ManifestError
from .runner import GenerationError, open_runner

_PCM = {1: np.int8, 2: np.int16, 4: np.int32}


class AudioError(ValueError):
    pass


def _read_wave(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as w:
        width, channels, rate = w.getsampwidth(), w.getnchannels(), w.getframerate()
        raw = w.readframes(w.getnframes())
    if width not in _PCM:
        raise AudioError(f"{path}: {8 * width}-bit PCM is not supported (8, 16 or 32-bit)")
    data = np.frombuffer(raw, _PCM[width]).astype(np.float32)
    if width == 1:  # 8-bit WAV is unsigned
        data = np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0
    data /= float(2 ** (8 * width - 1))
    return data.reshape(-1, channels), rate


def read_audio(path: str | Path) -> tuple[np.ndarray, int]:
    """Mono float32 samples in [-1, 1] and the sampling rate (channels averaged)."""
    path = Path(path)
    if not path.is_file():
        raise AudioError(f"{path}: no such file")
    try:
        frames, rate = _read_wave(path)
    except (wave.Error, EOFError) as e:
        try:
            import soundfile
        except ImportError:
            raise AudioError(f"{path}: not a PCM WAV file ({e}); other formats need the soundfile package") from None
        try:
            frames, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
        except RuntimeError as e2:
            raise AudioError(f"{path}: cannot read audio ({e2})") from None
    return frames.mean(axis=1).astype(np.float32), int(rate)


def features_for(out_dir: Path, samples: np.ndarray, rate: int) -> np.ndarray:
    from .audio import whisper_features

    config_path = out_dir / "preprocessor_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    expected = int(config.get("sampling_rate") or 16000)
    if rate != expected:
        raise AudioError(f"audio at {rate} Hz: the model takes {expected} Hz (resample it first)")
    chunk = int(config.get("chunk_length") or 30)
    mels = _mel_bins(out_dir)
    # Longer audio keeps its own length (the extractor's truncation=False, padding="longest").
    return whisper_features(samples, preprocessor_config=config or None, feature_size=mels,
                            pad_to_chunk=len(samples) <= chunk * rate)[None]


def ctc_transcribe(out_dir: Path, samples: np.ndarray, rate: int) -> str:
    """A CTC model's text: the forward's logits [1, frames, vocab] decoded with the export's vocab.json."""
    from .exporters import ExportedModel

    config_path = out_dir / "preprocessor_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    expected = int(config.get("sampling_rate") or 16000)
    if rate != expected:
        raise AudioError(f"audio at {rate} Hz: the model takes {expected} Hz (resample it first)")
    values = samples.astype(np.float32)
    if config.get("do_normalize", True):  # Wav2Vec2FeatureExtractor: zero mean, unit variance
        values = (values - values.mean()) / np.sqrt(values.var() + 1e-7)
    low, high = ExportedModel(out_dir)._manifest.dim_bounds("samples")
    if not low <= len(values) <= high:
        raise AudioError(f"audio of {len(values)} samples: the export takes {low} to {high} (--dim samples=MIN:MAX)")
    logits = np.asarray(ExportedModel(out_dir)(input_values=values[None])["logits"])
    return ctc_decode(out_dir, logits[0].argmax(-1))


def ctc_decode(out_dir: Path, ids) -> str:
    """Wav2Vec2CTCTokenizer.decode(ids): repeats merged, the pad (blank) token dropped, the word
    delimiter as a space."""
    from itertools import groupby

    vocab_path = out_dir / "vocab.json"
    if not vocab_path.is_file():
        raise AudioError(f"{out_dir}: no vocab.json (export a checkpoint with its CTC tokenizer)")
    tokens = {int(i): t for t, i in json.loads(vocab_path.read_text()).items()}
    tok_config_path = out_dir / "tokenizer_config.json"
    tok_config = json.loads(tok_config_path.read_text()) if tok_config_path.is_file() else {}
    pad, delimiter = tok_config.get("pad_token", "<pad>"), tok_config.get("word_delimiter_token", "|")
    for added in tok_config.get("added_tokens_decoder", {}).items():
        tokens.setdefault(int(added[0]), added[1].get("content", ""))
    chars = [t for t, _ in groupby(tokens.get(int(i), "") for i in ids)]
    return "".join(" " if c == delimiter else c for c in chars if c != pad).strip()


def _mel_bins(out_dir: Path) -> int:
    config = json.loads((out_dir / "config.json").read_text())
    return int(config.get("num_mel_bins", 80))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        print(f"hfexport: error: transcribe: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="hfexport transcribe", description=__doc__)
    p.add_argument("out_dir")
    p.add_argument("audio")
    p.add_argument("--language", help="the spoken language (a code or name); detected when not given")
    p.add_argument("--task", choices=["transcribe", "translate"])
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--timestamps", action="store_true", help="print each segment with its start and end times")
    args = p.parse_args(argv)
    out_dir = Path(args.out_dir)
    try:
        from .manifest import MODEL, load_manifest
        from .seq2seq import whisper_generate
        from .text import TextCodec

        manifest = load_manifest(out_dir)
        if manifest.data.get("task") != "automatic-speech-recognition":
            raise GenerationError(f"{out_dir}: not a speech recognition export (its task is {manifest.data.get('task')!r}: "
                                  "export a Whisper checkpoint with --for-generation, or a wav2vec2 CTC checkpoint)")
        if manifest.has_component(MODEL):  # one forward: a CTC model
            samples, rate = read_audio(args.audio)
            print(ctc_transcribe(out_dir, samples, rate))
            return 0
        runner = open_runner(out_dir)
        if not hasattr(runner, "encode") or not runner.manifest.has_component(DECODER):
            raise GenerationError(f"{out_dir}: not a speech recognition export (export a Whisper checkpoint "
                                  "with --for-generation)")
        samples, rate = read_audio(args.audio)
        features = features_for(out_dir, samples, rate)
        gen_path = out_dir / "generation_config.json"
        gen = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
        codec = TextCodec(out_dir)
        segments: list = []
        whisper_generate(runner, features, gen, args.max_new_tokens, language=args.language, task=args.task,
                         return_timestamps=args.timestamps, segments=segments)
    except (GenerationError, ManifestError, AudioError, ValueError) as e:
        print(f"hfexport: error: {e}", file=sys.stderr)
        return 1
    stamps = gen.get("no_timestamps_token_id")
    if args.timestamps:
        for s in segments[0]:
            print(f"[{s['start']:.2f} --> {s['end']:.2f}] {spoken_text(codec, s['tokens'], stamps)}".rstrip())
    else:
        print(spoken_text(codec, [t for s in segments[0] for t in s["tokens"]], stamps))
    return 0


def spoken_text(codec, tokens, no_timestamps: int | None) -> str:
    """The text of Whisper tokens without the special and timestamp tokens (those after
    <|notimestamps|>), as WhisperTokenizer.decode gives it."""
    keep = [int(t) for t in tokens if not isinstance(no_timestamps, int) or int(t) <= no_timestamps]
    return codec.decode(keep).strip()


if __name__ == "__main__":
    sys.exit(main())
