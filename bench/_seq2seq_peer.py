"""The peers' side of bench/bench_seq2seq.py, run in the optimum venv (.venv-optimum-onnx: the
transformers optimum-onnx pins). Prints one JSON line.

  build whisper|t5 DIR SEED
      A checkpoint of whisper-small's or flan-t5-base's shapes with random weights (the classes' own
      initialisation), float32 safetensors, its generation config.
  time-whisper ONNX_DIR NEW REPEATS
      optimum's ORTModelForSpeechSeq2Seq on optimum-cli's export: generate() over 30 s of random
      log-mel features, 1 and exactly NEW new tokens (min_new_tokens = max_new_tokens); median
      seconds of each.
  time-t5 ONNX_DIR NEW REPEATS
      optimum's ORTModelForSeq2SeqLM: generate() from 32 random input tokens, 1 and NEW new tokens;
      median seconds of each (the difference over NEW - 1 steps is the decode rate).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

WHISPER_SMALL = dict(vocab_size=51865, d_model=768, encoder_layers=12, decoder_layers=12, encoder_attention_heads=12,
                     decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072, num_mel_bins=80,
                     max_source_positions=1500, max_target_positions=448)
FLAN_T5_BASE = dict(vocab_size=32128, d_model=768, d_kv=64, d_ff=2048, num_layers=12, num_decoder_layers=12, num_heads=12,
                    feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0,
                    pad_token_id=0, eos_token_id=1)


def build(kind: str, folder: str, seed: int) -> dict:
    import torch
    import transformers

    torch.manual_seed(seed)
    if kind == "whisper":
        model = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(**WHISPER_SMALL))
    else:
        model = transformers.T5ForConditionalGeneration(transformers.T5Config(**FLAN_T5_BASE))
    model.eval().save_pretrained(folder, safe_serialization=True)
    return {"parameters": sum(p.numel() for p in model.parameters())}


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def time_whisper(folder: str, new: int, repeats: int) -> dict:
    import torch
    from optimum.onnxruntime import ORTModelForSpeechSeq2Seq

    model = ORTModelForSpeechSeq2Seq.from_pretrained(folder)
    features = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 80, 3000)).astype(np.float32))

    def run(n):
        return lambda: model.generate(features, max_new_tokens=n, min_new_tokens=n, do_sample=False)

    return {"one_token_s": median_time(run(1), repeats), "all_tokens_s": median_time(run(new), repeats)}


def time_t5(folder: str, new: int, repeats: int) -> dict:
    import torch
    from optimum.onnxruntime import ORTModelForSeq2SeqLM

    model = ORTModelForSeq2SeqLM.from_pretrained(folder)
    ids = torch.from_numpy(np.random.default_rng(0).integers(2, 32000, size=(1, 32)))

    def run(n):
        return lambda: model.generate(input_ids=ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)

    return {"one_token_s": median_time(run(1), repeats), "all_tokens_s": median_time(run(new), repeats)}


def main() -> None:
    task, *args = sys.argv[1:]
    if task == "build":
        result = build(args[0], args[1], int(args[2]))
    elif task == "time-whisper":
        result = time_whisper(args[0], int(args[1]), int(args[2]))
    else:
        result = time_t5(args[0], int(args[1]), int(args[2]))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
