"""Benchmark hfexport's text-encoder exports against what users pick today, in one run.

Checkpoints (random float32 weights, built once under --workdir by bench/_encoder_peer.py in the
peers' venv, as sentence-transformers checkpoints: Transformer + mean Pooling + Normalize):
  minilm-l6   all-MiniLM-L6-v2's shape: BERT, hidden 384, 6 layers, 12 heads, intermediate 1536
  bert-base   bert-base's shape: hidden 768, 12 layers, 12 heads, intermediate 3072
(vocabulary 30522, 512 positions).

Export (each in a fresh process: wall time, CPU time, peak RSS from `/usr/bin/time -v`), the
feature-extraction graph (last_hidden_state: what sentence-transformers' backends pool) on both
sides:
  hfexport-onnx        `hfexport export CKPT -o OUT --format onnx --task feature-extraction`
  optimum-onnx         `optimum-cli export onnx --model CKPT --task feature-extraction
                       --library-name transformers OUT` (optimum-onnx 0.1.0)
  optimum-onnx-O2      the same with `--optimize O2`: onnxruntime's transformer optimizer (fused
                       Attention, SkipLayerNormalization, EmbedLayerNormalization, BiasGelu)
  hfexport-openvino    `hfexport export CKPT -o OUT --format openvino --task feature-extraction`
  optimum-intel        `optimum-cli export openvino --model CKPT --task feature-extraction
                       --library transformers --weight-format fp32 OUT` (optimum-intel 1.27; its
                       default also converts the tokenizer, part of what users wait for)
Targets: each peer's wall time / hfexport's of the same format >= 20; hfexport's peak RSS <=
25% of the checkpoint's bytes.

Inference (bench/_encoder_worker.py, a fresh process per graph, runtime and batch; random token
ids, every token attended; sequence --sequence, batch 1 and 32; 2 warm-up calls, median of the
timed calls; the candidates interleaved over --rounds rounds, best round kept): sentences/s of
each graph in onnxruntime (default session options) and OpenVINO (CPU, INFERENCE_PRECISION_HINT
f32 on every side). Target: hfexport's graph >= the fastest peer graph in the same runtime.
Then sentence-transformers' own backends end to end (`SentenceTransformer(FOLDER,
backend=...).encode`, tokenization included, bench/_encoder_peer.py): on our export folder vs on
the export sentence-transformers makes itself and saves (save_pretrained).

Run from the repository root after scripts/setup.sh (the peers live in .venv-optimum-onnx):
  .venv/bin/python bench/bench_encoders.py --models minilm-l6 --rounds 1     # trial, ~3 min
  .venv/bin/python bench/bench_encoders.py --json /tmp/hfexport-bench/encoders.json

A benchmark, not a test: it exits non-zero only when an export or a run fails.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from bench_export import default_hfexport, measure, mib
from bench_generate import machine_environment

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
SPEEDUP_TARGET = 20.0
RSS_TARGET = 0.25
MODELS = {"minilm-l6": (384, 6, 12, 1536), "bert-base": (768, 12, 12, 3072)}
BATCHES = (1, 32)


def peer_json(python: Path, *args, log: Path | None = None) -> dict:
    proc = subprocess.run([str(python), *map(str, args)], capture_output=True, text=True)
    if log:
        log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, args))}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ensure_checkpoint(args, name: str) -> Path:
    ckpt = args.workdir / f"{name}-seed{args.seed}"
    stamp = ckpt / ".bench-complete"
    if not stamp.exists():
        print(f"checkpoint: building {ckpt} ...", flush=True)
        shutil.rmtree(ckpt, ignore_errors=True)
        peer_json(args.peers, HERE / "_encoder_peer.py", "build", ckpt, *MODELS[name], args.seed)
        stamp.write_text("ok\n")
    return ckpt


def exporters(args, ckpt: Path, outs: Path) -> dict:
    """label -> (runtime, command, the graph file it writes)."""
    cli = args.peers.parent / "optimum-cli"
    ours = [str(args.hfexport), "export", str(ckpt), "--task", "feature-extraction", "--overwrite", "-o"]
    onnx = [str(cli), "export", "onnx", "--model", str(ckpt), "--task", "feature-extraction",
            "--library-name", "transformers"]
    return {
        "hfexport-onnx": ("onnxruntime", ours + [str(outs / "hfexport-onnx"), "--format", "onnx"], "model.onnx"),
        "optimum-onnx": ("onnxruntime", onnx + [str(outs / "optimum-onnx")], "model.onnx"),
        "optimum-onnx-O2": ("onnxruntime", onnx + ["--optimize", "O2", str(outs / "optimum-onnx-O2")], "model.onnx"),
        "hfexport-openvino": ("openvino", ours + [str(outs / "hfexport-openvino"), "--format", "openvino"],
                              "openvino_model.xml"),
        "optimum-intel": ("openvino", [str(cli), "export", "openvino", "--model", str(ckpt), "--task",
                                       "feature-extraction", "--library", "transformers", "--weight-format", "fp32",
                                       str(outs / "optimum-intel")], "openvino_model.xml"),
    }


def run_exports(args, ckpt: Path, outs: Path, logs: Path) -> dict:
    results = {}
    for label, (runtime, cmd, graph) in exporters(args, ckpt, outs).items():
        shutil.rmtree(outs / label, ignore_errors=True)
        m = measure(cmd, logs / f"export-{label}.log", 0.01)
        if not m.ok:
            raise SystemExit(f"{label}: export failed (log {m.log}):\n{m.log_tail()}")
        results[label] = {"runtime": runtime, "graph": str(outs / label / graph), "wall_s": m.wall_s,
                          "cpu_s": m.cpu_s, "peak_rss_mib": mib(m.peak_rss_kib)}
        print(f"  export {label:18s} {m.wall_s:7.2f} s wall  {m.cpu_s:7.2f} s cpu  {mib(m.peak_rss_kib):8.1f} MiB peak",
              flush=True)
    return results


def run_inference(args, exports: dict, logs: Path) -> dict:
    """label -> runtime -> batch -> seconds per call (best round)."""
    best: dict = {}
    for r in range(args.rounds):
        for batch in BATCHES:
            repeats = args.repeats if batch == 1 else max(3, args.repeats // 4)
            for label, e in exports.items():
                cmd = [sys.executable, HERE / "_encoder_worker.py", e["runtime"], e["graph"], batch, args.sequence,
                       repeats]
                got = peer_json(Path(cmd[0]), *cmd[1:], log=logs / f"run-{label}-b{batch}-r{r}.log")
                key = (label, batch)
                best[key] = min(best.get(key, float("inf")), got["seconds"])
    return {f"{label}/b{batch}": s for (label, batch), s in best.items()}


def run_sentence_transformers(args, ckpt: Path, exports: dict, outs: Path, logs: Path) -> dict:
    """sentence-transformers' encode on our export folders and on its own saved exports."""
    folders = {}
    for backend, ours in (("onnx", "hfexport-onnx"), ("openvino", "hfexport-openvino")):
        theirs = outs / f"sentence-transformers-{backend}"
        shutil.rmtree(theirs, ignore_errors=True)
        peer_json(args.peers, HERE / "_encoder_peer.py", "st-save", ckpt, backend, theirs)
        folders[(backend, "hfexport")] = Path(exports[ours]["graph"]).parent
        folders[(backend, "sentence-transformers")] = theirs
    best: dict = {}
    for r in range(args.rounds):
        for batch in BATCHES:
            repeats = args.repeats if batch == 1 else max(3, args.repeats // 4)
            for (backend, who), folder in folders.items():
                got = peer_json(args.peers, HERE / "_encoder_peer.py", "st-encode", folder, backend, batch,
                                args.sequence, repeats, log=logs / f"st-{backend}-{who}-b{batch}-r{r}.log")
                key = f"{backend}/{who}/b{batch}"
                best[key] = min(best.get(key, float("inf")), got["seconds"])
    return best


def report(name: str, ckpt_bytes: int, exports: dict, times: dict, st_times: dict) -> dict:
    summary = {"checkpoint_mib": ckpt_bytes / 2**20, "exports": exports, "seconds": times, "st_seconds": st_times,
               "ratios": {}}
    ratios = summary["ratios"]
    print(f"\n== {name}: checkpoint {ckpt_bytes / 2**20:.1f} MiB")
    for ours, peers in (("hfexport-onnx", ("optimum-onnx", "optimum-onnx-O2")), ("hfexport-openvino", ("optimum-intel",))):
        rss = exports[ours]["peak_rss_mib"] * 2**20 / ckpt_bytes
        ratios[f"{ours}/peak_rss_fraction"] = rss
        print(f"export {ours}: peak RSS {rss:.1%} of the checkpoint (target <= {RSS_TARGET:.0%}) "
              f"{'PASS' if rss <= RSS_TARGET else 'MISS'}")
        for peer in peers:
            speedup = exports[peer]["wall_s"] / exports[ours]["wall_s"]
            ratios[f"{ours}/export_speedup_vs_{peer}"] = speedup
            print(f"  vs {peer:16s} export {speedup:7.1f}x faster (target >= {SPEEDUP_TARGET:.0f}x) "
                  f"{'PASS' if speedup >= SPEEDUP_TARGET else 'MISS'}")
    print("inference, sentences/s (sequence fixed, best round):")
    for runtime, ours, peers in (("onnxruntime", "hfexport-onnx", ("optimum-onnx", "optimum-onnx-O2")),
                                 ("openvino", "hfexport-openvino", ("optimum-intel",))):
        for batch in BATCHES:
            rate = {label: batch / times[f"{label}/b{batch}"] for label in (ours, *peers)}
            fastest = max(peers, key=lambda p: rate[p])
            ratio = rate[ours] / rate[fastest]
            ratios[f"{runtime}/b{batch}/vs_fastest_peer"] = ratio
            cells = "  ".join(f"{label} {rate[label]:8.1f}" for label in (ours, *peers))
            print(f"  {runtime:11s} batch {batch:2d}: {cells}  -> ours / {fastest} {ratio:.2f} "
                  f"{'PASS' if ratio >= 1.0 else 'MISS'}")
    print("sentence-transformers encode (tokenization included), sentences/s:")
    for backend in ("onnx", "openvino"):
        for batch in BATCHES:
            ours = batch / st_times[f"{backend}/hfexport/b{batch}"]
            theirs = batch / st_times[f"{backend}/sentence-transformers/b{batch}"]
            ratios[f"st-{backend}/b{batch}/ours_over_theirs"] = ours / theirs
            print(f"  backend={backend:8s} batch {batch:2d}: on our export {ours:8.1f}  on its own export "
                  f"{theirs:8.1f}  -> {ours / theirs:.2f}")
    return summary


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="minilm-l6,bert-base")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/hfexport-bench/encoders"))
    p.add_argument("--hfexport", type=Path, default=default_hfexport(REPO))
    p.add_argument("--peers", type=Path, default=REPO / ".venv-optimum-onnx" / "bin" / "python",
                   help="the Python of the venv holding optimum-onnx, optimum-intel and sentence-transformers 5")
    p.add_argument("--sequence", type=int, default=128)
    p.add_argument("--repeats", type=int, default=20, help="timed calls at batch 1 (a quarter, at least 3, at 32)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-sentence-transformers", action="store_true")
    p.add_argument("--json", type=Path)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if not args.peers.exists():
        raise SystemExit(f"no peers' venv at {args.peers} (scripts/setup.sh makes .venv-optimum-onnx)")
    env = machine_environment("onnxruntime", "openvino")
    print(f"cpu: {env['cpu']}, {env['usable_cpus']} usable cores; onnxruntime {env['onnxruntime']}, "
          f"openvino {env['openvino']}; hfexport {args.hfexport}")
    results = {"environment": env, "models": {}}
    for name in args.models.split(","):
        ckpt = ensure_checkpoint(args, name)
        outs, logs = args.workdir / f"out-{name}", args.workdir / f"logs-{name}"
        logs.mkdir(parents=True, exist_ok=True)
        print(f"== {name}: exports", flush=True)
        exports = run_exports(args, ckpt, outs, logs)
        print(f"== {name}: inference", flush=True)
        times = run_inference(args, exports, logs)
        st_times = {} if args.no_sentence_transformers else run_sentence_transformers(args, ckpt, exports, outs, logs)
        if args.no_sentence_transformers:
            st_times = {f"{b}/{w}/b{n}": float("nan") for b in ("onnx", "openvino")
                        for w in ("hfexport", "sentence-transformers") for n in BATCHES}
        results["models"][name] = report(name, (ckpt / "model.safetensors").stat().st_size, exports, times, st_times)
    results["environment"]["loadavg_end"] = __import__("os").getloadavg()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
