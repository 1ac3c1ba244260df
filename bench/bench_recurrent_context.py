"""Prefill and decode of a hybrid recurrent decoder (Qwen3.5-0.8B-shaped: gated DeltaNet layers
between gated attention; or --model lfm2-1.2b: short convolutions between GQA layers) at two
context lengths, through the path users call.

For each export form, one process per (form, context): `hfexport.open_runner(OUT)` and
`hfexport.generate(runner, prompt, max_new_tokens=N, ignore_eos=True)` on a random prompt of
`context` tokens, timed with the `on_tokens` callback:

  prefill   the prompt in (as the runner feeds it: one call, or calls of the manifest's
            prefill_chunk), first token out: ms, and ms per prompt token
  decode    the steps after it: ms per step (median), tok/s, and tok/s as a fraction of the
            read-bandwidth ceiling (measured float32 MatMul streaming bandwidth / the weight bytes
            a step reads: the export's data file less the untied embedding table)

Forms: `onnx` (--for-generation: ort-gqa, the delta rule as onnxruntime's LinearAttention),
`onnx-standard` (--onnx-ops standard --multi-token-decode: the one-chunk decomposition, prompt fed
in 64-token calls), `openvino` (the decomposition in OpenVINO, 64-token calls), `pt2` (the default .pt2 export: a
prefill program without a past, the whole prompt in one call, and a one-token decode) and
`pt2-multi-token` (--multi-token-decode: 64-token calls). The issue's claims:
decode per step flat in the context (ratio of the two contexts ~1.0), prefill linear (ms per prompt
token about flat). A benchmark, not a test.

    .venv/bin/python bench/bench_recurrent_context.py --layers 4 --contexts 64,256 --new-tokens 4  # trial
    .venv/bin/python bench/bench_recurrent_context.py --json recurrent.json                         # full
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_export import MODELS, default_hfexport, ensure_checkpoint  # noqa: E402
from bench_generate import run_worker  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FORMS = {"onnx": ["--for-generation"],
         "onnx-standard": ["--for-generation", "--onnx-ops", "standard", "--multi-token-decode"],
         "openvino": ["--format", "openvino", "--for-generation"],
         "pt2": ["--format", "pt2", "--for-generation"],
         "pt2-multi-token": ["--format", "pt2", "--for-generation", "--multi-token-decode"]}


def time_generation(out: Path, context: int, new_tokens: int, vocab: int) -> dict:
    """In this process: one warm-up generation on a short prompt, then the timed one."""
    import numpy as np

    import hfexport

    runner = hfexport.open_runner(out)
    rng = np.random.default_rng(0)
    hfexport.generate(runner, rng.integers(3, vocab, (1, 8)), max_new_tokens=2, ignore_eos=True)
    ids = rng.integers(3, vocab, (1, context))
    stamps: list[float] = []
    start = time.perf_counter()
    hfexport.generate(runner, ids, max_new_tokens=new_tokens, ignore_eos=True,
                      on_tokens=lambda _: stamps.append(time.perf_counter()))
    steps = [b - a for a, b in zip(stamps, stamps[1:])]
    return {"prefill_ms": (stamps[0] - start) * 1e3, "decode_ms_per_step": statistics.median(steps) * 1e3,
            "steps": len(steps)}


def step_bytes(out: Path, hidden: int, vocab: int, tied: bool) -> int:
    """Weight bytes a batch-1 step streams: the data files (a .pt2 or .pte holds its weights), less an untied embedding table (gathered)."""
    data = sum(p.stat().st_size for p in out.iterdir() if p.suffix in (".data", ".bin", ".pt2", ".pte"))
    return data - (0 if tied else vocab * hidden * 4)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/hfexport-bench"))
    p.add_argument("--model", choices=[m for m in MODELS if m.startswith(("qwen3.5", "lfm2"))], default="qwen3.5-0.8b")
    p.add_argument("--layers", type=int, help="decoder layers (default: the real model's)")
    p.add_argument("--contexts", default="128,4096", help="prompt lengths")
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--forms", default=",".join(FORMS))
    p.add_argument("--hfexport", type=Path, default=default_hfexport(REPO))
    p.add_argument("--json", type=Path)
    p.add_argument("--worker", nargs=4, metavar=("OUT", "CONTEXT", "NEW", "VOCAB"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        out, context, new, vocab = args.worker
        print(json.dumps(time_generation(Path(out), int(context), int(new), int(vocab))))
        return 0
    layers = args.layers or MODELS[args.model][2]
    ckpt = ensure_checkpoint(args.workdir, layers, 0, False, args.model)
    config = json.loads((ckpt / "config.json").read_text())
    vocab, hidden, tied = config["vocab_size"], config["hidden_size"], bool(config.get("tie_word_embeddings"))
    contexts = [int(c) for c in args.contexts.split(",")]
    root = args.workdir / f"recurrent-{ckpt.name}"
    bandwidth, _, err = run_worker(["bandwidth", "--tmp-dir", str(args.workdir)], root.parent / "bandwidth.json",
                                   root.parent / "bandwidth.log")
    gb_s = bandwidth["gb_s"] if bandwidth else None
    print(f"read bandwidth: {gb_s:.1f} GB/s" if gb_s else f"bandwidth: FAILED\n{err}", flush=True)
    results: dict = {"bandwidth_gb_s": gb_s, "model": args.model, "layers": layers, "runs": {}}
    failed = False
    for form in args.forms.split(","):
        out = root / form
        t = time.perf_counter()
        proc = subprocess.run([str(args.hfexport), "export", str(ckpt), "-o", str(out), "--overwrite", *FORMS[form]],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{form}: export FAILED: {proc.stderr.strip()}")
            failed = True
            continue
        print(f"{form}: exported in {time.perf_counter() - t:.1f} s", flush=True)
        ceiling = gb_s * 1e9 / step_bytes(out, hidden, vocab, tied) if gb_s else None
        for context in contexts:
            proc = subprocess.run([sys.executable, __file__, "--worker", str(out), str(context), str(args.new_tokens),
                                   str(vocab)], capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{form} context {context}: FAILED\n{proc.stderr[-2000:]}")
                failed = True
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            tok_s = 1e3 / r["decode_ms_per_step"]
            r.update(context=context, decode_tok_s=tok_s, fraction_of_ceiling=tok_s / ceiling if ceiling else None)
            results["runs"][f"{form}@{context}"] = r
            print(f"{form:14s} context {context:5d}: prefill {r['prefill_ms']:9.1f} ms ({r['prefill_ms'] / context:6.2f} "
                  f"ms/token)  decode {r['decode_ms_per_step']:7.1f} ms/step {tok_s:6.2f} tok/s"
                  + (f" ({r['fraction_of_ceiling']:.0%} of the bandwidth ceiling)" if ceiling else ""), flush=True)
        runs = [results["runs"].get(f"{form}@{c}") for c in (contexts[0], contexts[-1])]
        if all(runs) and len(contexts) > 1:
            a, b = runs
            print(f"{form:14s} {contexts[-1]} / {contexts[0]}: decode per step {b['decode_ms_per_step'] / a['decode_ms_per_step']:.2f}x, "
                  f"prefill per token {(b['prefill_ms'] / contexts[-1]) / (a['prefill_ms'] / contexts[0]):.2f}x")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
