"""Benchmark hfexport's CLIP export (issue 32) against optimum-onnx, optimum-intel and
transformers.exporters, in one run.

Checkpoint: CLIPModel in clip-vit-base-patch32's shapes (random float32 weights, built once under
--workdir by bench/_vision_worker.py in the peers' venv).

Export (each in a fresh process: wall time, peak RSS from `/usr/bin/time -v`):
  hfexport               `hfexport export CKPT -o OUT` (zero-shot-image-classification, ONNX)
  hfexport-openvino      the same with `--format openvino`
  optimum-onnx           `optimum-cli export onnx --model CKPT --task zero-shot-image-classification`
  optimum-intel          `optimum-cli export openvino --model CKPT --task zero-shot-image-classification
                         --weight-format fp32`
  transformers.exporters OnnxExporter().export(CLIPModel, inputs, OnnxConfig(dynamic=True)) + save_pretrained
Targets: each peer's wall time / hfexport's (same format) >= 20; hfexport's peak RSS <= 25% of the
checkpoint.

Inference (a fresh process per side; a warm-up call, median of --repeats): one short text and a
batch of 1 or 32 random 224x224 images per call, images/s: hfexport's ExportedModel (the default
path) vs a plain onnxruntime session over optimum's model.onnx; both compute the text tower too.
Target: at least as fast.

Run from the repository root after scripts/setup.sh:
  .venv/bin/python bench/bench_vision.py --json /tmp/hfexport-bench/vision.json
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
WORKER = HERE / "_vision_worker.py"
SPEEDUP_TARGET = 20.0
TASK = "zero-shot-image-classification"


def run_json(cmd: list, log: Path) -> dict:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/hfexport-bench/vision"))
    p.add_argument("--peers", type=Path, default=REPO / ".venv-optimum-onnx" / "bin" / "python")
    p.add_argument("--hfexport", type=Path, default=default_hfexport(REPO))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    logs, outs = args.workdir / "logs", args.workdir / "out"
    logs.mkdir(parents=True, exist_ok=True)
    outs.mkdir(exist_ok=True)
    ckpt = args.workdir / f"clip-vit-base-patch32-seed{args.seed}"
    if not (ckpt / ".bench-complete").exists():
        shutil.rmtree(ckpt, ignore_errors=True)
        run_json([args.peers, WORKER, "build", ckpt, args.seed], logs / "build.log")
        (ckpt / ".bench-complete").write_text("ok\n")
    ckpt_bytes = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
    cli = args.peers.parent / "optimum-cli"
    commands = {
        "hfexport": [args.hfexport, "export", ckpt, "-o", outs / "hfexport", "--overwrite"],
        "hfexport-openvino": [args.hfexport, "export", ckpt, "-o", outs / "hfexport-openvino", "--format", "openvino",
                              "--overwrite"],
        "optimum-onnx": [cli, "export", "onnx", "--model", ckpt, "--task", TASK, outs / "optimum"],
        "optimum-intel": [cli, "export", "openvino", "--model", ckpt, "--task", TASK, "--weight-format", "fp32",
                          outs / "optimum-intel"],
        "transformers": [sys.executable, WORKER, "export-transformers", ckpt, outs / "transformers"],
    }
    report = {"environment": machine_environment("onnxruntime", "transformers"), "checkpoint_bytes": ckpt_bytes,
              "exports": {}, "inference": {}}
    print(f"== clip-vit-base-patch32 ({ckpt_bytes / 2**20:.0f} MiB)", flush=True)
    for label, cmd in commands.items():
        if not label.startswith("hfexport"):
            shutil.rmtree(cmd[-1], ignore_errors=True)
        m = measure([str(c) for c in cmd], logs / f"export-{label}.log", 0.01)
        if not m.ok:
            raise SystemExit(f"{label}: export failed (log {m.log}):\n{m.log_tail()}")
        report["exports"][label] = {"wall_s": m.wall_s, "peak_rss_mib": mib(m.peak_rss_kib)}
        print(f"  export {label:18s} {m.wall_s:7.2f} s wall  {mib(m.peak_rss_kib):8.1f} MiB peak "
              f"({100 * m.peak_rss_kib * 1024 / ckpt_bytes:.1f}% of the checkpoint)", flush=True)
    ex = report["exports"]
    for peer, ours in (("optimum-onnx", "hfexport"), ("transformers", "hfexport"), ("optimum-intel", "hfexport-openvino")):
        ratio = ex[peer]["wall_s"] / ex[ours]["wall_s"]
        report["exports"][peer]["speedup"] = ratio
        print(f"  export {peer} / {ours}: {ratio:.1f}x (target >= {SPEEDUP_TARGET:.0f})")
    for batch in (1, 32):
        ours = run_json([sys.executable, WORKER, "time", "hfexport", outs / "hfexport", batch, args.repeats],
                        logs / f"time-hfexport-{batch}.log")
        peer = run_json([sys.executable, WORKER, "time", "onnx", outs / "optimum", batch, args.repeats],
                        logs / f"time-optimum-{batch}.log")
        ratio = ours["images_per_s"] / peer["images_per_s"]
        report["inference"][str(batch)] = {"hfexport": ours, "optimum-onnx": peer, "speedup": ratio}
        print(f"  batch {batch:2d}: hfexport {ours['images_per_s']:7.1f} images/s, optimum-onnx "
              f"{peer['images_per_s']:7.1f} images/s: {ratio:.2f}x (target >= 1)", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
