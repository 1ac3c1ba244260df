"""Benchmark hfexport's OpenVINO export against a PyTorch-based OpenVINO export, export and decode.

What it measures, in one run, on a Qwen3-0.6B-shaped checkpoint (random bf16 weights, built and
cached by bench_export.py's ensure_checkpoint), each measurement in its own fresh subprocess:

  export      wall time, CPU time and peak RSS (bench_export.py's measure: `/usr/bin/time -v`, else
              getrusage in a fresh wrapper; anonymous / file-backed peaks sampled from /proc) of
                hfexport  `hfexport export CKPT -o OUT --format openvino --for-generation
                          --dtype float32 --overwrite`: one stateful model (input_ids,
                          attention_mask, position_ids, beam_idx -> logits; KV cache in
                          ReadValue/Assign variables)
                anchor    the first of these that is available and succeeds (--anchor auto):
                  optimum-cli    `optimum-cli export openvino --model CKPT --task
                                 text-generation-with-past --weight-format fp32 OUT`, only when
                                 optimum-intel is installed in this Python (the benchmark never
                                 installs it: from PyPI it currently pulls another torch)
                  exporters      transformers.exporters' OpenVINOExporter on the model loaded in
                                 float32: decompose_for_generation(multi_token_decode=True)'s
                                 "decode" component exported with OpenVINOConfig(dynamic=True,
                                 stateful=True), one stateful model that takes the prompt too
                                 (export_for_generation would also export a separate "prefill"
                                 graph a stateful loop does not need; it is left out so both sides
                                 export one graph)
                  convert-model  openvino.convert_model on torch.export of the float32 model with
                                 flat past/present KV, then OpenVINO's MakeStateful (batch 1)
                The anchor's time includes importing torch and loading the model, both part of
                exporting with it; the split is printed too.
                hfexport int4 / int8  the hfexport command above plus `--quantize int4` / `int8`
                          (u4 / u8 weight constants with per-group scales, kept compressed by the
                          CPU plugin; default group size), skipped with --no-quantized or when the
                          binary's `export --help` has no --quantize (an older install)
  decode      float32, batch 1, greedy, a random --prompt-len prompt: prefill ms (the prompt in,
              the first token out, argmax included) and decode tok/s (--new-tokens single-token
              steps, argmax included), one warm-up run then --repeats timed runs, medians, of
                hfexport  through hfexport.open_runner(OUT, config=...); the int4 / int8 exports too
                          (float32 compute and KV cache, weights decompressed on the fly)
                anchor    through a minimal stateful loop (reset_state, then input_ids /
                          attention_mask / position_ids / beam_idx as the model takes them)
              Both are compiled for CPU with the SAME properties: {"INFERENCE_PRECISION_HINT": "f32",
              "KV_CACHE_PRECISION": "f32"} (hfexport's runner default), plus INFERENCE_NUM_THREADS
              when --ov-threads is given.

Targets: hfexport export >= 20x faster (wall time) than the anchor; hfexport decode tok/s >= the
anchor's, both for the float32 hfexport export only. The int4 / int8 rows are not float32 (nor is
the anchor quantized): they are printed in a separate section, with their export time, peak RSS,
prefill, decode and decode ratios over the anchor and over float32 hfexport, and never count for
the targets ("quantized" in the JSON). On a shared machine wall times are noisy: the export
CPU-time ratio is printed as a steadier reference, and the load average is printed at the start
and at the end.

Run it (from the repository root; the two float32 exports take ~5 GB of disk for 28 layers, the
int4 / int8 ones ~2 GB more, all deleted after the run unless --keep-exports; --hfexport picks the
binary, by default the one installed next to this Python, else build/hfexport):

  .venv/bin/python bench/bench_openvino.py --layers 2 --prompt-len 16 --new-tokens 8 --repeats 1 \
      --hfexport build/hfexport                                                          # trial
  .venv/bin/python bench/bench_openvino.py --hfexport build/hfexport \
      --json /tmp/hfexport-bench/openvino.json                                           # full

This is a benchmark, not a test: it exits non-zero only when an export or a run fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from bench_export import checkpoint_bytes, default_hfexport, measure, mib, prepare_run
from bench_generate import (QUANTIZE, leading_matches, machine_environment, passes, ratio, supports_quantize,
                            worker_env)

SPEEDUP_TARGET = 20.0  # anchor export wall time / hfexport export wall time, at least
DECODE_TARGET = 1.0  # hfexport decode tok/s / anchor decode tok/s, at least

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
WORKER = BENCH / "_openvino_worker.py"

ANCHORS = ["optimum-cli", "exporters", "convert-model"]  # --anchor auto tries them in this order
OV_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


# --------------------------------------------------------------------------- exports


def export_bytes(out_dir: Path) -> int:
    return sum(p.stat().st_size for p in out_dir.glob("*") if p.is_file() and p.suffix in (".xml", ".bin"))


def optimum_cli() -> Path | None:
    """optimum-cli next to this Python, when optimum-intel is installed here."""
    cli = Path(sys.executable).parent / "optimum-cli"
    return cli if cli.exists() and importlib.util.find_spec("optimum.intel") is not None else None


def export_row(m, out_dir: Path, **extra) -> dict:
    return {**asdict(m), "output_bytes": export_bytes(out_dir) if m.ok else 0, **extra}


def hfexport_key(quantize: str = "") -> str:
    """The row key (and table label) of an hfexport export: hfexport, hfexport int4, hfexport int8."""
    return f"hfexport {quantize}" if quantize else "hfexport"


def run_hfexport(args, ckpt: Path, out_dir: Path, logs: Path, quantize: str = "") -> dict:
    """The float32 stateful export, or (quantize int4 / int8) the same command with --quantize."""
    key = hfexport_key(quantize)
    print(f"  {key:<24} exporting ...", end="", flush=True)
    cmd = [str(args.hfexport), "export", str(ckpt), "-o", str(out_dir), "--format", "openvino", "--for-generation",
           "--dtype", "float32", "--overwrite"]
    if quantize:
        cmd[-1:-1] = ["--quantize", quantize]  # default group size
    m = measure(cmd, logs / f"export-{key.replace(' ', '-')}.log", args.sample_interval)
    print(f" {m.wall_s:.2f} s" if m.ok else f" FAILED (rc {m.returncode}, see {m.log})")
    extra = {}
    if quantize and m.ok:
        extra["quantization"] = json.loads((out_dir / "export.json").read_text()).get("quantization")
    return export_row(m, out_dir, command=cmd, **extra)


def run_anchor(method: str, args, ckpt: Path, out_dir: Path, logs: Path) -> dict:
    """One anchor attempt: its export row (with 'ok' and, from the worker, the time split)."""
    print(f"  {f'anchor ({method})':<24} exporting ...", end="", flush=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    result = logs / f"export-anchor-{method}.json"
    result.unlink(missing_ok=True)
    if method == "optimum-cli":
        cmd = [str(optimum_cli()), "export", "openvino", "--model", str(ckpt), "--task", "text-generation-with-past",
               "--weight-format", "fp32", str(out_dir)]
    else:
        cmd = [sys.executable, str(WORKER), "--result", str(result), "--seed", str(args.seed), "export-anchor",
               method, str(ckpt), str(out_dir)]
    m = measure(cmd, logs / f"export-anchor-{method}.log", args.sample_interval)
    timings = json.loads(result.read_text()) if m.ok and result.exists() else {}
    print(f" {m.wall_s:.1f} s" if m.ok else f" FAILED (rc {m.returncode}, see {m.log})")
    return export_row(m, out_dir, method=method, command=cmd, timings=timings)


def run_anchors(args, ckpt: Path, out_dir: Path, logs: Path) -> tuple[dict | None, list[dict]]:
    """The first anchor that succeeds, and the ones skipped or failed before it."""
    methods = ANCHORS if args.anchor == "auto" else [args.anchor]
    failures = []
    for method in methods:
        if method == "optimum-cli" and optimum_cli() is None:
            failures.append({"method": method, "skipped": "optimum-intel is not installed in this Python"})
            print(f"  {f'anchor ({method})':<24} skipped: optimum-intel is not installed")
            continue
        row = run_anchor(method, args, ckpt, out_dir, logs)
        if row["returncode"] == 0:
            return row, failures
        tail = "\n".join(Path(row["log"]).read_text(errors="replace").splitlines()[-10:])
        failures.append({"method": method, "returncode": row["returncode"], "log": row["log"], "tail": tail})
        print(tail)
    return None, failures


# --------------------------------------------------------------------------- decode timing


def ov_config(args) -> dict:
    config = dict(OV_CONFIG)
    if args.ov_threads > 0:
        config["INFERENCE_NUM_THREADS"] = args.ov_threads
    return config


def time_one(label: str, kind: str, path: Path, args, logs: Path, vocab_size: int) -> dict:
    """One timing worker in a fresh process: its JSON result, or {'error': ...}. kind: hfexport (any of
    hfexport's exports, `label` telling them apart) or anchor."""
    print(f"  {label:<24} timing ...", end="", flush=True)
    name = label.replace(" ", "-") if kind == "hfexport" else kind
    result = logs / f"time-{name}.json"
    result.unlink(missing_ok=True)
    log = logs / f"time-{name}.log"
    cmd = [sys.executable, str(WORKER), "--result", str(result), "--seed", str(args.seed), "time", kind, str(path),
           "--vocab-size", str(vocab_size), "--prompt-len", str(args.prompt_len), "--new-tokens", str(args.new_tokens),
           "--repeats", str(args.repeats), "--ov-config", json.dumps(ov_config(args))]
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=worker_env())
    if rc != 0 or not result.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        print(f" FAILED (exit code {rc}, see {log})")
        return {"error": f"exit code {rc}, log {log}:\n{tail}"}
    timing = json.loads(result.read_text())
    print(f" prefill {timing['prefill_ms_median']:.1f} ms, decode {timing['decode_tok_s_median']:.2f} tok/s")
    return timing


# --------------------------------------------------------------------------- summary


def quantized_summary(exports: dict, timings: dict, quantized_exports: dict, quantized_timings: dict,
                      skipped: str | None) -> dict:
    """The int4 / int8 hfexport rows, outside the float32 targets: each one's export and timing, and its
    decode tok/s over the anchor's and over float32 hfexport's."""
    anchor_decode = timings.get("anchor", {}).get("decode_tok_s_median")
    float32_decode = timings.get("hfexport", {}).get("decode_tok_s_median")
    float32_tokens = timings.get("hfexport", {}).get("tokens")
    anchor_wall = exports["anchor"]["wall_s"] if "anchor" in exports else None
    rows = {}
    for key, row in quantized_exports.items():
        timing = quantized_timings.get(key, {})
        decode = timing.get("decode_tok_s_median")
        ok = row["returncode"] == 0
        rows[key] = {
            "quantize": key.split()[-1],
            "quantization": row.get("quantization"),  # export.json's section
            "export": row,
            "timing": timing,
            "export_speedup_vs_anchor": ratio(anchor_wall, row["wall_s"]) if ok else None,
            "decode_vs_anchor": ratio(decode, anchor_decode),
            "decode_vs_float32": ratio(decode, float32_decode),
            "tokens_match_float32": (leading_matches(timing["tokens"], float32_tokens)
                                     if "tokens" in timing and float32_tokens else None),
        }
    return {"skipped": skipped, "rows": rows}


def summarize(ckpt: Path, exports: dict, anchor_failures: list, timings: dict, quantized: dict) -> dict:
    hf, anchor = exports.get("hfexport"), exports.get("anchor")
    hf_ok, anchor_ok = hf is not None and hf["returncode"] == 0, anchor is not None
    speedup = ratio(anchor["wall_s"], hf["wall_s"]) if hf_ok and anchor_ok else None
    cpu_ratio = ratio(anchor["cpu_s"], hf["cpu_s"]) if hf_ok and anchor_ok else None
    decode = {k: t.get("decode_tok_s_median") for k, t in timings.items()}
    decode_ratio = ratio(decode.get("hfexport"), decode.get("anchor"))
    return {
        "checkpoint": {"path": str(ckpt), "bytes": checkpoint_bytes(ckpt)},
        "anchor_method": anchor["method"] if anchor_ok else None,
        "anchor_failures": anchor_failures,
        "exports": exports,
        "timings": timings,
        "speedup": speedup,
        "cpu_ratio": cpu_ratio,
        "decode_ratio": decode_ratio,
        "targets": {
            "speedup_min": SPEEDUP_TARGET,
            "speedup_pass": passes(speedup, SPEEDUP_TARGET),
            "decode_ratio_min": DECODE_TARGET,
            "decode_pass": passes(decode_ratio, DECODE_TARGET),
        },
        "quantized": quantized,  # not float32: outside the targets
    }


def print_report(summary: dict, args) -> None:
    ckpt_bytes = summary["checkpoint"]["bytes"]
    exports, timings = summary["exports"], summary["timings"]
    labels = {"hfexport": "hfexport", "anchor": f"anchor ({summary['anchor_method']})"}

    header = (f"{'export':<26} {'wall s':>8} {'CPU s':>7} {'peak RSS MiB':>13} {'RSS % ckpt':>11} {'anon MiB':>9} "
              f"{'file MiB':>9} {'output MiB':>11}")
    print("\n" + header)
    print("-" * len(header))
    for key, row in exports.items():
        if row["returncode"] != 0:
            print(f"{labels[key]:<26} FAILED (rc {row['returncode']}), see {row['log']}")
            continue
        sampled = row["sampled_peak_kib"]
        print(f"{labels[key]:<26} {row['wall_s']:>8.2f} {row['cpu_s']:>7.1f} {mib(row['peak_rss_kib']):>13.0f} "
              f"{100 * row['peak_rss_kib'] * 1024 / ckpt_bytes:>10.1f}% {mib(sampled.get('RssAnon', 0)):>9.0f} "
              f"{mib(sampled.get('RssFile', 0)):>9.0f} {row['output_bytes'] / 2**20:>11.0f}")
    anchor = exports.get("anchor")
    if anchor and anchor.get("timings"):
        t = anchor["timings"]
        parts = [f"{k.removesuffix('_s')} {t[k]:.1f} s" for k in ["import_s", "load_s", "capture_s", "trace_s",
                                                                  "convert_s", "export_s", "save_s"] if k in t]
        print(f"  anchor split: {', '.join(parts)}")
    for failure in summary["anchor_failures"]:
        why = failure.get("skipped") or f"failed (rc {failure['returncode']}), see {failure['log']}"
        print(f"  anchor '{failure['method']}': {why}")
    print("  (anon/file: peaks sampled from /proc/PID/status; peak RSS: the kernel's high-water mark)")

    print(f"\ndecode: float32, batch 1, prompt {args.prompt_len} tokens, {args.new_tokens} new tokens, "
          f"1 warm-up + {args.repeats} timed run(s), medians")
    print(f"  both compiled for CPU with {json.dumps(ov_config(args))}")
    hf_tokens = timings.get("hfexport", {}).get("tokens")
    header = f"{'run':<26} {'load s':>7} {'prefill ms':>11} {'decode tok/s':>13} {'tokens = hfexport':>18}"
    print(header)
    print("-" * len(header))
    for key, t in timings.items():
        if "error" in t:
            print(f"{labels[key]:<26} FAILED: {t['error'].splitlines()[0]}")
            continue
        match = f"{leading_matches(t['tokens'], hf_tokens)}/{len(t['tokens'])}" if hf_tokens else "-"
        print(f"{labels[key]:<26} {t['load_s']:>7.1f} {t['prefill_ms_median']:>11.1f} "
              f"{t['decode_tok_s_median']:>13.2f} {match:>18}")
    for key, t in timings.items():
        if "compiled_properties" in t:
            props = ", ".join(f"{k}={v}" for k, v in t["compiled_properties"].items())
            print(f"  {labels[key]}: inputs {t['inputs']}; compiled: {props}")
    print("  tokens = hfexport: leading greedy tokens identical to hfexport's (random weights make near-ties likely;"
          " an early divergence alone is not a bug).")
    for key, t in timings.items():
        if "error" in t:
            print(f"\n{labels[key]}: {t['error']}")

    targets = summary["targets"]
    verdict = lambda ok: {True: "PASS", False: "MISS", None: "n/a"}[ok]  # noqa: E731
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}x"  # noqa: E731
    print("\ntargets (n/a: a side was not run or failed):")
    print(f"  export  anchor / hfexport wall time     {fmt(summary['speedup']):>9}   "
          f">= {targets['speedup_min']:.0f}x   {verdict(targets['speedup_pass'])}")
    if summary["cpu_ratio"] is not None:
        print(f"          (anchor / hfexport CPU time     {fmt(summary['cpu_ratio']):>9}, for reference)")
    print(f"  decode  hfexport / anchor tok/s          {fmt(summary['decode_ratio']):>9}   "
          f">= {targets['decode_ratio_min']:.0f}x   {verdict(targets['decode_pass'])}")


def print_quantized(summary: dict) -> None:
    quantized = summary["quantized"]
    if quantized["skipped"]:
        print(f"\nquantized weights: skipped ({quantized['skipped']})")
    if not quantized["rows"]:
        return
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}x"  # noqa: E731
    anchor = f"anchor ({summary['anchor_method']})" if summary["anchor_method"] else "anchor"
    print("\nquantized weights (NOT float32 weights: u4 / u8 constants, float32 compute and KV cache; outside the"
          " targets above):")
    header = (f"{'run':<18} {'export s':>9} {'peak RSS MiB':>13} {'output MiB':>11} {'prefill ms':>11} "
              f"{'decode tok/s':>13} {'x anchor':>9} {'x float32':>10} {'tokens = float32':>17}")
    print(header)
    print("-" * len(header))
    for key, q in quantized["rows"].items():
        row, t = q["export"], q["timing"]
        if row["returncode"] != 0:
            print(f"{key:<18} export FAILED (rc {row['returncode']}), see {row['log']}")
            continue
        export = (f"{key:<18} {row['wall_s']:>9.2f} {mib(row['peak_rss_kib']):>13.0f} "
                  f"{row['output_bytes'] / 2**20:>11.0f}")
        if "error" in t or not t:
            print(f"{export} timing FAILED: {t.get('error', 'not timed').splitlines()[0]}")
            continue
        match = "-" if q["tokens_match_float32"] is None else f"{q['tokens_match_float32']}/{len(t['tokens'])}"
        print(f"{export} {t['prefill_ms_median']:>11.1f} {t['decode_tok_s_median']:>13.2f} "
              f"{fmt(q['decode_vs_anchor']):>9} {fmt(q['decode_vs_float32']):>10} {match:>17}")
    print(f"  x anchor / x float32: decode tok/s over {anchor}'s (float32 weights) / over float32 hfexport's;"
          " same compile properties as above.")
    print("  tokens = float32: leading greedy tokens identical to float32 hfexport's (quantized weights are expected"
          " to diverge early).")
    for key, q in quantized["rows"].items():
        if q["quantization"]:
            print(f"  {key}: export.json quantization {json.dumps(q['quantization'])}")
        if "error" in q["timing"]:
            print(f"\n{key}: {q['timing']['error']}")


# --------------------------------------------------------------------------- environment


def environment(args) -> dict:
    return {**machine_environment("openvino", "torch", "transformers", "optimum-intel"), "ov_config": ov_config(args)}


def print_environment(env: dict, args, ckpt: Path) -> None:
    print(f"checkpoint: {ckpt}  ({args.layers} layers, {checkpoint_bytes(ckpt) / 2**20:.0f} MiB of bf16 safetensors)")
    print(f"cpu: {env['cpu']}, {env['cpu_count']} logical cores ({env['usable_cpus']} usable here), "
          f"load average {env['loadavg_start'][0]:.2f}")
    print(f"openvino {env['openvino']}, torch {env['torch']}, transformers {env['transformers']}, "
          f"optimum-intel {env['optimum-intel']}, hfexport {env['hfexport_revision']} ({args.hfexport})")
    if env["loadavg_start"][0] > 0.5 * env["usable_cpus"]:
        print("warning: the machine is busy (load average above half the cores): timings will be noisy")


# --------------------------------------------------------------------------- main


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/hfexport-bench"),
                        help="checkpoints, exports, logs (shared with bench_export.py)")
    parser.add_argument("--layers", type=int, default=28, help="decoder layers (28 = the real Qwen3-0.6B)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights and of the prompt")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the checkpoint even if cached")
    parser.add_argument("--hfexport", type=Path, default=default_hfexport(REPO),
                        help="the hfexport binary (default: the one installed next to this Python, else build/hfexport)")
    parser.add_argument("--anchor", choices=["auto", *ANCHORS, "none"], default="auto",
                        help="auto: optimum-cli if optimum-intel is installed, else transformers.exporters, "
                             "else openvino.convert_model")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128, help="decode steps timed after the prefill")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after the warm-up (median reported)")
    parser.add_argument("--ov-threads", type=int, default=0,
                        help="INFERENCE_NUM_THREADS for both models (default 0: not set, OpenVINO's own choice)")
    parser.add_argument("--sample-interval", type=float, default=0.05, help="seconds between /proc RSS samples")
    parser.add_argument("--no-quantized", action="store_true",
                        help="skip the int4 / int8 hfexport exports (--quantize; not float32, outside the targets)")
    parser.add_argument("--keep-exports", action="store_true", help="keep the exported models in --workdir")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    if min(args.prompt_len, args.new_tokens, args.repeats, args.layers) < 1:
        parser.error("--prompt-len, --new-tokens, --repeats and --layers must be at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.hfexport.exists():
        sys.exit(f"hfexport binary not found: {args.hfexport} (build it first)")
    os.environ.update(worker_env())  # measure() runs its commands with this process's environment
    ckpt, vocab_size, root, logs = prepare_run(args, "openvino")
    out = {"hfexport": root / "hfexport", "anchor": root / "anchor"}
    env = environment(args)
    print_environment(env, args, ckpt)
    skipped = None
    if args.no_quantized:
        skipped = "--no-quantized"
    elif not supports_quantize(args.hfexport):
        skipped = (f"{args.hfexport} has no export --quantize (an older build: reinstall it or pass"
                   " --hfexport build/hfexport)")
        print(f"warning: {skipped}; the int4 / int8 rows are skipped")
    quantize = [] if skipped else QUANTIZE
    for bits in quantize:
        out[hfexport_key(bits)] = root / f"hfexport-{bits}"

    print("\nexports:")
    exports = {"hfexport": run_hfexport(args, ckpt, out["hfexport"], logs)}
    quantized_exports = {hfexport_key(bits): run_hfexport(args, ckpt, out[hfexport_key(bits)], logs, bits)
                         for bits in quantize}
    anchor, anchor_failures = (None, []) if args.anchor == "none" else run_anchors(args, ckpt, out["anchor"], logs)
    if anchor is not None:
        exports["anchor"] = anchor
    labels = {"hfexport": "hfexport", "anchor": f"anchor ({anchor['method']})" if anchor else "anchor"}

    print("\ndecode timing:")
    timings = {key: time_one(labels[key], key, out[key], args, logs, vocab_size)
               for key, row in exports.items() if row["returncode"] == 0}
    quantized_timings = {key: time_one(key, "hfexport", out[key], args, logs, vocab_size)
                         for key, row in quantized_exports.items() if row["returncode"] == 0}
    env["loadavg_end"] = os.getloadavg()

    quantized = quantized_summary(exports, timings, quantized_exports, quantized_timings, skipped)
    summary = summarize(ckpt, exports, anchor_failures, timings, quantized)
    print_report(summary, args)
    print_quantized(summary)
    print(f"\nload average: {env['loadavg_start'][0]:.2f} at the start, {env['loadavg_end'][0]:.2f} at the end; "
          f"logs in {logs}")
    if args.json:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        args.json.write_text(json.dumps({"environment": env, "settings": settings, **summary}, indent=2) + "\n")
        print(f"results written to {args.json}")
    if not args.keep_exports:
        for path in out.values():
            shutil.rmtree(path, ignore_errors=True)
    failed = (any(row["returncode"] != 0 for row in [exports["hfexport"], *quantized_exports.values()])
              or (args.anchor != "none" and anchor is None)
              or any("error" in t for t in [*timings.values(), *quantized_timings.values()]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
