"""Decode speed of every ONNX generation export form through the paths users call, against the same
files under onnxruntime's own session defaults.

For each form (`--for-generation` with the default ort-gqa profile, `--onnx-ops ort`, `--onnx-ops
standard`, each in float32 and with `--quantize int4`), on a Qwen3-0.6B-shaped checkpoint cut to
`--layers`, one run each, in turn, of:

  cli        `hfexport generate OUT --input-ids ... --ignore-eos --stats` (the decode rate it prints)
  api        `ExportedModel.from_pretrained(OUT).generate(ids, max_new_tokens=N, ignore_eos=True)`
             (wall time of the decode part: total less the prefill, timed by one extra call)
  ort        `open_runner(OUT, share_weights=False)`: onnxruntime's defaults (a session per
             component, each with its own prepacked weights), the reference for the ratios

repeated `--rounds` times (medians), each tool in a fresh process. Prints tok/s and cli/ort, api/ort.
A ratio well under 1 is a default path that loses speed to a memory saving (issue 28 part 4: the
shared weights once turned prepacking off for MatMulNBits, 0.01x). The CPU model is printed: the
figures hold for that machine.

    .venv/bin/python bench/bench_default_paths.py [--layers 4] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_export import default_hfexport, ensure_checkpoint  # noqa: E402

FORMS = {
    "ort-gqa": [],
    "ort": ["--onnx-ops", "ort"],
    "standard": ["--onnx-ops", "standard"],
    "ort-gqa-int4": ["--quantize", "int4"],
    "ort-int4": ["--onnx-ops", "ort", "--quantize", "int4"],
}

# One timing in a fresh process: prints {"tok_s": ...}.
PROBE = r"""
import json, sys, time
import numpy as np
import hfexport
out, tool, prompt, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ids = np.random.default_rng(0).integers(3, 1000, (1, prompt))
if tool == "api":
    model = hfexport.ExportedModel.from_pretrained(out)
    model.generate(ids, max_new_tokens=2, ignore_eos=True)  # loads the sessions
    t = time.perf_counter(); model.generate(ids, max_new_tokens=1, ignore_eos=True); first = time.perf_counter() - t
    t = time.perf_counter(); model.generate(ids, max_new_tokens=steps + 1, ignore_eos=True); total = time.perf_counter() - t
    print(json.dumps({"tok_s": steps / max(total - first, 1e-9)}))
else:
    runner = hfexport.open_runner(out, share_weights=False)
    logits = runner.prefill(ids, np.ones_like(ids), steps + 1)
    t = time.perf_counter()
    for _ in range(steps):
        logits = runner.step(logits.argmax(-1))
    print(json.dumps({"tok_s": steps / (time.perf_counter() - t)}))
"""


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def time_cli(hfexport: Path, out: Path, prompt: int, steps: int) -> float:
    ids = ",".join(str(3 + i % 997) for i in range(prompt))
    proc = subprocess.run([str(hfexport), "generate", str(out), "--input-ids", ids, "--max-new-tokens", str(steps + 1),
                           "--ignore-eos", "--stats"], capture_output=True, text=True, check=True)
    match = re.search(r"([0-9.]+) tok/s", proc.stderr)
    if not match:
        raise RuntimeError(f"no --stats line in: {proc.stderr[-300:]}")
    return float(match.group(1))


def time_probe(out: Path, tool: str, prompt: int, steps: int) -> float:
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out), tool, str(prompt), str(steps)], capture_output=True,
                          text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])["tok_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/hfexport-bench"))
    ap.add_argument("--hfexport", type=Path, default=default_hfexport(Path(__file__).resolve().parent.parent))
    ap.add_argument("--forms", nargs="*", default=list(FORMS))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    ckpt = ensure_checkpoint(args.workdir, args.layers, 0, False)
    print(f"cpu: {cpu_model()}; {args.layers} layers, batch 1, prompt {args.prompt_len}, {args.new_tokens} steps")
    results = {}
    for form in args.forms:
        out = args.workdir / f"default-paths-{form}-{args.layers}L"
        subprocess.run([str(args.hfexport), "export", str(ckpt), "-o", str(out), "--for-generation", "--overwrite",
                        "--quiet", *FORMS[form]], check=True)
        runs = {"cli": [], "api": [], "ort": []}
        for _ in range(args.rounds):
            runs["cli"].append(time_cli(args.hfexport, out, args.prompt_len, args.new_tokens))
            runs["api"].append(time_probe(out, "api", args.prompt_len, args.new_tokens))
            runs["ort"].append(time_probe(out, "ort", args.prompt_len, args.new_tokens))
        med = {k: statistics.median(v) for k, v in runs.items()}
        results[form] = {"tok_s": med, "cli_over_ort": med["cli"] / med["ort"], "api_over_ort": med["api"] / med["ort"]}
        print(f"{form:14s} cli {med['cli']:7.1f}  api {med['api']:7.1f}  ort defaults {med['ort']:7.1f} tok/s"
              f"   cli/ort {med['cli'] / med['ort']:.2f}x  api/ort {med['api'] / med['ort']:.2f}x", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_model(), "layers": args.layers, "results": results}, indent=2))


if __name__ == "__main__":
    main()
