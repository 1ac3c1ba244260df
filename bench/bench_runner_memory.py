"""Resident memory and speed of the ONNX runner on a default --for-generation export (prefill +
decode reading one data file), with and without sharing the weights between the two sessions.

Each variant runs in a fresh process: open the runner (both sessions), then a 128-token prefill and
N decode steps; /proc/self/status gives VmRSS (and its anonymous / file-backed parts) after loading
and after the run. Ratios are over the bytes of the export's weight file. Speed is measured paired
in one more process holding both variants, alternating rounds, so machine drift cancels.

    .venv/bin/python bench/bench_runner_memory.py [--layers 28] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_export import default_hfexport, ensure_checkpoint  # noqa: E402

PROBE = r"""
import json, sys, time
import numpy as np, onnxruntime as ort
import hfexport
out, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])

def status():
    d = {}
    for line in open("/proc/self/status"):
        k, v = line.split(":", 1)
        if k in ("VmRSS", "RssAnon", "RssFile"):
            d[k] = int(v.split()[0]) * 1024
    return d

def runner(share):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    return hfexport.open_runner(out, session_options=so, share_weights=share)

ids = np.random.default_rng(0).integers(3, 1000, (1, 128))

def run(r):
    t = time.perf_counter()
    logits = r.prefill(ids, np.ones_like(ids), steps + 1)
    prefill = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(steps):
        logits = r.step(logits.argmax(-1))
    return prefill, steps / (time.perf_counter() - t)

if mode == "paired":
    rs = {"shared": runner(True), "per-session": runner(False)}
    res = {k: {"prefill_s": [], "decode_tok_s": []} for k in rs}
    for _ in range(int(sys.argv[4])):
        for k, r in rs.items():
            p, d = run(r)
            res[k]["prefill_s"].append(p)
            res[k]["decode_tok_s"].append(d)
    print(json.dumps(res))
else:
    r = runner(mode == "shared")
    loaded = status()
    run(r)
    print(json.dumps({"after_load": loaded, "after_run": status()}))
"""


def probe(out: Path, mode: str, steps: int, rounds: int = 1) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out), mode, str(steps), str(rounds)], capture_output=True,
                          text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def main() -> int:
    repo = Path(__file__).resolve().parent.parent
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/hfexport-bench"))
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hfexport", type=Path, default=default_hfexport(repo))
    p.add_argument("--steps", type=int, default=32, help="decode steps per round")
    p.add_argument("--rounds", type=int, default=4, help="alternating rounds of the paired speed run")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    ckpt = ensure_checkpoint(args.workdir, args.layers, args.seed, False)
    plain, gen = args.workdir / f"mem-plain-{ckpt.name}", args.workdir / f"mem-gen-{ckpt.name}"
    for out, extra in ((plain, []), (gen, ["--for-generation"])):
        subprocess.run([str(args.hfexport), "export", str(ckpt), "-o", str(out), "--overwrite", *extra], check=True)
    size = lambda d: sum(f.stat().st_size for f in d.iterdir() if f.is_file())  # noqa: E731
    weights = (gen / "model.onnx.data").stat().st_size
    result = {"weight_bytes": weights, "export_bytes": {"plain": size(plain), "for_generation": size(gen)}}
    print(f"export bytes: --for-generation {size(gen) / 2**20:.0f} MiB = {size(gen) / size(plain):.4f}x the plain "
          f"export ({size(plain) / 2**20:.0f} MiB); weight file {weights / 2**20:.0f} MiB")
    for mode in ("shared", "per-session"):
        m = probe(gen, mode, args.steps)
        result[mode] = m
        print(f"runner RSS, {mode:11s}: after load {m['after_load']['VmRSS'] / weights:.2f}x the weight bytes, after "
              f"prefill + {args.steps} steps {m['after_run']['VmRSS'] / weights:.2f}x (anonymous "
              f"{m['after_run']['RssAnon'] / 2**20:.0f} MiB, file-backed {m['after_run']['RssFile'] / 2**20:.0f} MiB)")
    speed = probe(gen, "paired", args.steps, args.rounds)
    result["speed"] = speed
    for k, v in speed.items():
        print(f"speed, {k:11s}: decode {median(v['decode_tok_s']):.2f} tok/s, prefill {median(v['prefill_s']) * 1e3:.0f} ms "
              f"(medians of {args.rounds} alternating rounds)")
    s, d = speed["shared"], speed["per-session"]
    print(f"shared / per-session: decode {median(s['decode_tok_s']) / median(d['decode_tok_s']):.3f}x, prefill time "
          f"{median(s['prefill_s']) / median(d['prefill_s']):.3f}x")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
