"""hfexport's side of bench/bench_seq2seq.py (the main venv): the default path users call,
hfexport's runner through hfexport.open_runner. Prints one JSON line.

  time-whisper OUT NEW REPEATS
      encode 30 s of random log-mel features and generate 1 and exactly NEW tokens (eos ignored)
      with Whisper's prompt and processors (hfexport.seq2seq.whisper_generate); median seconds.
  time-t5 OUT NEW REPEATS
      encode 32 random input tokens and generate 1 and NEW tokens (eos ignored)
      (hfexport.seq2seq.text2text_generate); median seconds of each.
  export-transformers CKPT OUT
      the transformers.exporters peer: the checkpoint loaded in float32, then
      OnnxExporter().export_for_generation(model, inputs, OnnxConfig(dynamic=True)) with the inputs
      generate() takes (30 s of features for Whisper, 32 tokens for T5) and save_pretrained(OUT).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

from hfexport.runner import open_runner
from hfexport.seq2seq import text2text_generate, whisper_generate


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def export_transformers(ckpt: str, out: str) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq
    from transformers.exporters import OnnxConfig, OnnxExporter

    speech = AutoConfig.from_pretrained(ckpt).model_type == "whisper"
    model = (AutoModelForSpeechSeq2Seq if speech else AutoModelForSeq2SeqLM).from_pretrained(ckpt, dtype=torch.float32)
    rng = np.random.default_rng(0)
    inputs = ({"input_features": torch.from_numpy(rng.standard_normal((1, 80, 3000)).astype(np.float32))} if speech
              else {"input_ids": torch.from_numpy(rng.integers(2, 32000, size=(1, 32))),
                    "attention_mask": torch.ones(1, 32, dtype=torch.int64)})
    exported = OnnxExporter().export_for_generation(model.eval(), inputs, OnnxConfig(dynamic=True))
    exported.save_pretrained(out)
    return {"components": list(exported.components)}


def main() -> None:
    if sys.argv[1] == "export-transformers":
        print(json.dumps(export_transformers(sys.argv[2], sys.argv[3])))
        return
    task, out, new, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    runner = open_runner(out)
    gen = json.loads(open(f"{out}/generation_config.json").read())
    if task == "time-whisper":
        features = np.random.default_rng(0).standard_normal((1, 80, 3000)).astype(np.float32)

        def run(n):
            return lambda: whisper_generate(runner, features, gen, n, eos_token_ids=[])
    else:
        ids = np.random.default_rng(0).integers(2, 32000, size=(1, 32))

        def run(n):
            return lambda: text2text_generate(runner, ids, None, {}, n, eos_token_ids=[])

    result = {"one_token_s": median_time(run(1), repeats), "all_tokens_s": median_time(run(new), repeats)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
