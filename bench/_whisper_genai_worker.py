"""OpenVINO GenAI's WhisperPipeline side of bench/bench_seq2seq.py (the main venv, where
openvino-genai and openvino-tokenizers are installed). Prints one JSON line.

  prepare OUT
      Gives an OpenVINO Whisper export what the pipeline loads besides the models, when the
      benchmark's random checkpoint has none: a word-level tokenizer over the model's vocabulary
      ("w0".."wN", converted by openvino-tokenizers into openvino_tokenizer.xml /
      openvino_detokenizer.xml), WhisperFeatureExtractor's preprocessor_config.json (80 mel
      channels) and the multilingual entries of whisper-small's generation config (language and
      task token ids, no-timestamps) the pipeline requires. The same files go into every export
      compared.
  time OUT NEW REPEATS
      WhisperPipeline(OUT, "CPU") with its default properties, as users create it: generate() over
      30 s of 16 kHz audio (noise at speech level), English transcription, 1 and exactly NEW new
      tokens (min_new_tokens = max_new_tokens, eos ignored); median seconds of each. The pipeline
      computes the features.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from _seq2seq_worker import median_time  # (same venv)

# whisper-small's ids for these (the checkpoint's generation_config.json lists 99 languages).
WHISPER_SMALL_GENERATION = {"is_multilingual": True, "lang_to_id": {"<|en|>": 50259, "<|fr|>": 50265},
                            "task_to_id": {"transcribe": 50359, "translate": 50358}, "no_timestamps_token_id": 50363,
                            "prev_sot_token_id": 50361}


def prepare(out: Path) -> dict:
    import openvino as ov
    import openvino_tokenizers
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab_size = json.loads((out / "config.json").read_text())["vocab_size"]
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab_size)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0")
    encoder, decoder = openvino_tokenizers.convert_tokenizer(tokenizer, with_detokenizer=True)
    ov.save_model(encoder, str(out / "openvino_tokenizer.xml"))
    ov.save_model(decoder, str(out / "openvino_detokenizer.xml"))
    if not (out / "preprocessor_config.json").exists():
        transformers.WhisperFeatureExtractor(feature_size=80).save_pretrained(out)
    gen = json.loads((out / "generation_config.json").read_text())
    gen.update(WHISPER_SMALL_GENERATION)
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    return {"prepared": str(out)}


def time_pipeline(out: Path, new: int, repeats: int) -> dict:
    import openvino_genai

    pipe = openvino_genai.WhisperPipeline(str(out), "CPU")
    audio = (0.1 * np.random.default_rng(0).standard_normal(30 * 16000)).astype(np.float32).tolist()
    words = {}

    def run(n):
        def call():
            words[n] = len(pipe.generate(audio, max_new_tokens=n, min_new_tokens=n, ignore_eos=True, language="<|en|>",
                                         task="transcribe").texts[0].split())
        return call

    result = {"one_token_s": median_time(run(1), repeats), "all_tokens_s": median_time(run(new), repeats)}
    result["words"] = words[new]  # the text's tokens (special ones left out of the text)
    return result


def main() -> None:
    task, out, *rest = sys.argv[1:]
    if task == "prepare":
        result = prepare(Path(out))
    else:
        result = time_pipeline(Path(out), int(rest[0]), int(rest[1]))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
