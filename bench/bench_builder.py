"""Benchmark hfexport's ONNX generation export against onnxruntime-genai's model builder, side by side.

The closest peer for ONNX users: `python -m onnxruntime_genai.models.builder -i CKPT -o OUT
-p fp32|int4 -e cpu`. On one checkpoint (the Qwen3-0.6B-shaped one of bench_export.py, random bf16
weights; a word-level tokenizer with an eos id is added, which the builder needs), in one run:

  export       wall time, peak RSS (/usr/bin/time -v or getrusage), bytes written (*.onnx*)
               builder  fp32 / int4 (4 bit, block 32, accuracy level 4: --extra_options
                        int4_block_size=32 int4_accuracy_level=4)
               hfexport --for-generation (the default: ort-gqa, one decode graph, cache shared in
                        place) / + --quantize int4 (group 32, int8 compute = accuracy level 4)
  generation   batch 1, greedy, a random --prompt-len prompt, --new-tokens tokens; prefill ms (prompt
               in, first token out), decode tok/s, the process's peak RSS; per configuration:
               hfexport          hfexport's runner (python/hfexport, IO binding; its Python cost per
                                 step is printed: step wall less onnxruntime's run call)
               builder           the builder's output through onnxruntime-genai's C++ loop (og.Generator)
               builder-graph     the builder's model.onnx through a minimal IO-binding loop with the
                                 same mechanics as hfexport's runner (shared cache buffers), so the two
                                 graphs are compared apart from the loops
               hfexport-genai    hfexport's export through onnxruntime-genai's loop (its genai_config.json)
               eager             transformers eager on the checkpoint in float32 (AutoModelForCausalLM,
                                 the forward calls generate makes, its DynamicCache; fp32 rows only)
  tokens       the greedy tokens of the fp32 runs, compared between every configuration
  alternating  hfexport's runner and the builder's graph (our loop) in one process, in alternating
               blocks of 16 decode steps over --alternate-generations generations (0: skip), twice:
               each tool's session loaded first once (a process's first large session decodes a
               few per cent slower); the paired per-block ratios, the sharpest decode comparison on
               a noisy machine

Each timing is a fresh process (bench/_generate_worker.py): one warm-up generation, then one timed;
the configurations are interleaved over --rounds rounds (medians reported) so that drift on a
shared machine hits all alike. Ratios are hfexport / builder (builder = the better of its two loops
for decode and prefill). Batch-1 decode is bandwidth bound: each tok/s is also printed as a
fraction of the ceiling = measured float32 MatMul streaming bandwidth (the worker's `bandwidth`
task) / the bytes of weights a step reads (the export's data file, less an untied embedding table).

Targets: decode >= 1.0x; prefill, export time, bytes written, runtime RSS <= 1.0x.

  /work/main/.venv/bin/python bench/bench_builder.py --layers 2 --new-tokens 8 --rounds 1   # trial
  /work/main/.venv/bin/python bench/bench_builder.py --json builder.json                    # full

A benchmark, not a test: it exits non-zero only when an export or a run fails.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

from bench_export import MODELS, default_hfexport, ensure_checkpoint, measure, onnx_output_bytes, text_config
from bench_generate import run_worker

REPO = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "int4")
LOOPS = ("hfexport", "builder", "builder-graph", "hfexport-genai", "eager")


def add_tokenizer(ckpt: Path, workdir: Path) -> Path:
    """A copy of the checkpoint (weights linked) with a word-level tokenizer whose eos is the config's."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out = workdir / f"{ckpt.name}-tokenizer"
    if (out / "tokenizer.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    for f in ckpt.glob("*.safetensors"):
        (out / f.name).unlink(missing_ok=True)
        (out / f.name).symlink_to(f)
    shutil.copy(ckpt / "config.json", out / "config.json")
    config = text_config(json.loads((ckpt / "config.json").read_text()))
    vocab = {f"t{i}": i for i in range(config["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    eos = config["eos_token_id"]
    eos = f"t{eos[0] if isinstance(eos, list) else eos}"
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token=eos, unk_token="t0").save_pretrained(out)
    return out


def export_commands(args, ckpt: Path, root: Path) -> dict:
    builder = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-e", "cpu",
               "-c", str(root / "builder-cache")]
    hfx = [str(args.hfexport), "export", str(ckpt), "--for-generation", "--overwrite"]
    return {
        ("builder", "fp32"): [*builder, "-o", str(root / "builder-fp32"), "-p", "fp32"],
        ("builder", "int4"): [*builder, "-o", str(root / "builder-int4"), "-p", "int4", "--extra_options",
                              "int4_block_size=32", "int4_accuracy_level=4"],
        ("hfexport", "fp32"): [*hfx, "-o", str(root / "hfexport-fp32")],
        ("hfexport", "int4"): [*hfx, "-o", str(root / "hfexport-int4"), "--quantize", "int4"],
    }


def weights_read_per_step(out: Path) -> int:
    """Bytes of weights one batch-1 step streams: the data file, less an untied embedding table
    (gathered, not read whole). The builder's cos/sin caches are counted too (a few MB)."""
    data = sum(p.stat().st_size for p in out.glob("*.data"))
    hf = json.loads((out / "config.json").read_text()) if (out / "config.json").exists() else {}
    if hf and not hf.get("tie_word_embeddings", False):
        data -= text_config(hf)["vocab_size"] * text_config(hf)["hidden_size"] * 4
    return data


def timing_args(loop: str, out: Path, args, vocab: int) -> list[str]:
    kind = {"hfexport": "hfexport", "builder": "genai", "builder-graph": "builder-iobinding",
            "hfexport-genai": "genai", "eager": "eager"}[loop]
    return ["time", kind, str(out), "--vocab-size", str(vocab), "--prompt-len", str(args.prompt_len),
            "--new-tokens", str(args.new_tokens), "--repeats", "1", "--ort-threads", str(args.ort_threads)]


def ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/hfexport-bench"))
    p.add_argument("--model", choices=sorted(MODELS), default="qwen3-0.6b", help="checkpoint shape")
    p.add_argument("--layers", type=int, help="decoder layers (default: the real model's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hfexport", type=Path, default=default_hfexport(REPO))
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds of every timing (medians)")
    p.add_argument("--ort-threads", type=int, default=0, help="0: onnxruntime's default (every core)")
    p.add_argument("--alternate-generations", type=int, default=3,
                   help="generations of the in-process alternating decode comparison (0: skip it)")
    p.add_argument("--loops", default=",".join(LOOPS), help=f"which timings to run (of {', '.join(LOOPS)})")
    p.add_argument("--precisions", default=",".join(PRECISIONS), help="fp32, int4 or both")
    p.add_argument("--keep-exports", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.layers is None:
        args.layers = MODELS[args.model][2]
    loops, precisions = args.loops.split(","), args.precisions.split(",")
    if not set(loops) <= set(LOOPS) or not set(precisions) <= set(PRECISIONS):
        p.error(f"--loops takes {', '.join(LOOPS)}; --precisions takes {', '.join(PRECISIONS)}")
    # hfexport's exports are always made: eager's rows count the same weights as its float32 one.
    with_builder = any(loop.startswith("builder") for loop in loops)

    ckpt = add_tokenizer(ensure_checkpoint(args.workdir, args.layers, args.seed, False, args.model), args.workdir)
    vocab = text_config(json.loads((ckpt / "config.json").read_text()))["vocab_size"]
    root = args.workdir / f"builder-{ckpt.name}"
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results: dict = {"exports": {}, "runs": {}, "settings": vars(args) | {"hfexport": str(args.hfexport)}}
    failed = False

    for (tool, precision), cmd in export_commands(args, ckpt, root).items():
        if (tool == "builder" and not with_builder) or precision not in precisions:
            continue
        out = root / f"{tool}-{precision}"
        shutil.rmtree(out, ignore_errors=True)
        m = measure(cmd, logs / f"export-{tool}-{precision}.log", 0.05)
        entry = {"wall_s": m.wall_s, "peak_rss_kib": max(m.peak_rss_kib, *m.sampled_peak_kib.values(), 0),
                 "bytes": onnx_output_bytes(out) if m.ok else None, "ok": m.ok}
        results["exports"][f"{tool}-{precision}"] = entry
        print(f"export {tool:8s} {precision}: {'ok' if m.ok else 'FAILED'} {m.wall_s:6.1f} s", flush=True)
        if not m.ok:
            failed = True
            print(m.log_tail())

    bandwidth, _, err = run_worker(["bandwidth", "--ort-threads", str(args.ort_threads), "--tmp-dir", str(root)],
                                   root / "bandwidth.json", logs / "bandwidth.log")
    results["bandwidth_gb_s"] = bandwidth["gb_s"] if bandwidth else None
    samples: dict = {}
    for r in range(args.rounds):
        for precision in precisions:
            for loop in loops:
                tool = "hfexport" if loop.startswith("hfexport") else "builder"
                if loop == "eager":  # the checkpoint itself, in float32
                    if precision != "fp32":
                        continue
                    tool = "hfexport"
                if not results["exports"].get(f"{tool}-{precision}", {}).get("ok"):
                    continue
                out = ckpt if loop == "eager" else root / f"{tool}-{precision}"
                name = f"{loop}-{precision}"
                res, _, err = run_worker(timing_args(loop, out, args, vocab), root / "run.json", logs / f"{name}-{r}.log")
                if res is None:
                    failed = True
                    print(f"run {name}: FAILED\n{err}")
                    continue
                samples.setdefault(name, []).append(res)
                print(f"round {r + 1}: {name:22s} prefill {res['prefill_ms_median']:8.1f} ms  decode "
                      f"{res['decode_tok_s_median']:6.2f} tok/s  rss {res['peak_rss_kib'] / 1024:6.0f} MiB", flush=True)
    results["alternating"] = {}
    for precision in precisions if args.alternate_generations > 0 else ():
        ours, peer = root / f"hfexport-{precision}", root / f"builder-{precision}"
        if not all(results["exports"].get(f"{t}-{precision}", {}).get("ok") for t in ("hfexport", "builder")):
            continue
        for first in ("hfexport", "builder"):
            res, _, err = run_worker(["alternate", str(ours), str(peer), "--vocab-size", str(vocab),
                                      "--prompt-len", str(args.prompt_len), "--new-tokens", str(args.new_tokens),
                                      "--generations", str(args.alternate_generations),
                                      "--ort-threads", str(args.ort_threads),
                                      *(["--builder-first"] if first == "builder" else [])],
                                     root / "run.json", logs / f"alternate-{precision}-{first}-first.log")
            if res is None:
                failed = True
                print(f"alternate {precision}, {first} first: FAILED\n{err}")
                continue
            results["alternating"].setdefault(precision, []).append(res)
    for name, runs in samples.items():
        tool, precision = name.rsplit("-", 1)
        # eager reads the same weights as hfexport's float32 export
        out = root / (("hfexport" if tool.startswith(("hfexport", "eager")) else "builder") + f"-{precision}")
        entry = {k: statistics.median(x[k] for x in runs)
                 for k in ("prefill_ms_median", "decode_tok_s_median", "peak_rss_kib")}
        entry["tokens"] = runs[0]["tokens"]
        if "step_overhead_ms_median" in runs[0]:
            entry["step_overhead_ms"] = statistics.median(x["step_overhead_ms_median"] for x in runs)
        if results["bandwidth_gb_s"]:
            ceiling = results["bandwidth_gb_s"] * 1e9 / weights_read_per_step(out)
            entry["ceiling_tok_s"], entry["of_ceiling"] = ceiling, entry["decode_tok_s_median"] / ceiling
        results["runs"][name] = entry
    print_report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    if not args.keep_exports:
        for d in root.iterdir():
            if d.is_dir() and d.name != "logs":
                shutil.rmtree(d, ignore_errors=True)
    return 1 if failed else 0


def print_report(results: dict) -> None:
    runs, exports = results["runs"], results["exports"]
    print(f"\nbandwidth ceiling: {results['bandwidth_gb_s'] or 0:.1f} GB/s (float32 MatMul streaming)")
    print(f"{'':24s}{'prefill ms':>12s}{'decode tok/s':>14s}{'of ceiling':>12s}{'RSS MiB':>10s}")
    for name, r in runs.items():
        print(f"{name:24s}{r['prefill_ms_median']:12.1f}{r['decode_tok_s_median']:14.2f}"
              f"{r.get('of_ceiling', 0):12.0%}{r['peak_rss_kib'] / 1024:10.0f}")
    for name, r in runs.items():
        if "step_overhead_ms" in r:
            print(f"{name}: hfexport runner's Python per decode step {r['step_overhead_ms']:.3f} ms")
    print("\nhfexport / builder (builder = its better loop; targets: decode >= 1, the rest <= 1)")
    for precision in PRECISIONS:
        ours = runs.get(f"hfexport-{precision}")
        peers = [runs[n] for n in (f"builder-{precision}", f"builder-graph-{precision}") if n in runs]
        e_ours, e_peer = exports.get(f"hfexport-{precision}", {}), exports.get(f"builder-{precision}", {})
        line = [f"export wall {ratio(e_ours.get('wall_s'), e_peer.get('wall_s'))}",
                f"export peak RSS {ratio(e_ours.get('peak_rss_kib'), e_peer.get('peak_rss_kib'))}",
                f"bytes written {ratio(e_ours.get('bytes'), e_peer.get('bytes'))}"]
        if ours and peers:
            line += [f"decode {ratio(ours['decode_tok_s_median'], max(p['decode_tok_s_median'] for p in peers))}",
                     f"prefill {ratio(ours['prefill_ms_median'], min(p['prefill_ms_median'] for p in peers))}",
                     f"runtime RSS {ratio(ours['peak_rss_kib'], min(p['peak_rss_kib'] for p in peers))}"]
        print(f"  {precision}: " + ", ".join(line))
        eager = runs.get(f"eager-{precision}")
        if ours and eager:
            print(f"  {precision}, hfexport / transformers eager: decode "
                  f"{ratio(ours['decode_tok_s_median'], eager['decode_tok_s_median'])}, prefill "
                  f"{ratio(ours['prefill_ms_median'], eager['prefill_ms_median'])}")
    for precision, pair in results.get("alternating", {}).items():
        for a in pair:
            tok_s = a["decode_tok_s_median"]
            q1, _, q3 = a["ratio_quartiles"]
            print(f"  {precision}, in one process, {a['loaded_first']} loaded first ({a['blocks']} alternating "
                  f"blocks of {a['block_steps']} steps): hfexport {tok_s['hfexport']:.2f} vs builder graph "
                  f"{tok_s['builder-graph']:.2f} tok/s, decode {a['ratio_median']:.3f}x (per-block quartiles "
                  f"{q1:.3f}-{q3:.3f})")
        if len(pair) == 2:
            both = statistics.geometric_mean([a["ratio_median"] for a in pair])
            print(f"  {precision}, in one process, both load orders: decode {both:.3f}x")
    fp32 = {n: r["tokens"] for n, r in runs.items() if n.endswith("-fp32")}
    if fp32:
        same = len({tuple(t) for t in fp32.values()}) == 1
        print(f"\nfp32 greedy tokens {'identical' if same else 'DIFFER'} across {', '.join(fp32)}")


if __name__ == "__main__":
    sys.exit(main())
