"""Benchmark hfexport's vision-language export (issue 32) against optimum-intel + OpenVINO GenAI's
VLMPipeline, transformers.exporters and transformers eager, in one run.

Checkpoint: Qwen2VLForConditionalGeneration in Qwen2-VL-2B-Instruct's shapes (its Hub config, random
bf16 weights, built once under --workdir by bench/_vlm_worker.py). The issue names Qwen2.5-VL-3B:
15 GB in float32, which the peers' exports (2-3x the weights) cannot hold on a 24 GiB machine;
Qwen2-VL-2B (8.8 GB in float32) is the largest Qwen VLM that fits them here.

Export (each in a fresh process: wall time, peak RSS from `/usr/bin/time -v`):
  hfexport                `hfexport export CKPT -o OUT --format openvino --for-generation --dtype float32`
  optimum-intel           `optimum-cli export openvino --model CKPT --task image-text-to-text
                          --weight-format fp32 OUT` (the peers' venv); it writes no OpenVINO tokenizer
                          for this checkpoint, so the benchmark converts one with openvino_tokenizers
                          and copies the processor files afterwards (not timed)
  transformers.exporters  OpenVINOExporter().export_for_generation(model, processor inputs,
                          OpenVINOConfig(dynamic=True, stateful=True)) + save_pretrained (float32);
                          on Qwen2-VL it exports language_model, lm_head and decode, no image encoder
Targets: each peer's wall time / hfexport's >= 20; hfexport's peak RSS <= 25% of the checkpoint.

Generation (a fresh process per side; one 448x448 image + a short prompt, greedy, a warm-up call,
medians of --repeats; each call a new image: OpenVINO GenAI's VLMPipeline keeps the last call's KV
cache and reuses it for an identical prompt, which would skip its prefill): time to first token (a call with max_new_tokens=1, preprocessing included)
and decode tokens/s (a call with --new-tokens minus that), through each side's default path:
  hfexport     ExportedModel(OUT).generate(prompt, images=[file], chat=True)   (OpenVINO, f32)
  vlmpipeline  openvino_genai.VLMPipeline(optimum-intel's export, "CPU", f32 inference and KV cache)
  vlmpipeline-hfexport  the same pipeline over hfexport's export (its tower in GenAI's split)
  eager        transformers' generate (float32)
Targets: hfexport at least as fast as each. Decode is also printed as a fraction of the float32
read-bandwidth ceiling (onnxruntime MatMul bandwidth over the language model's weight bytes).

Run from the repository root after scripts/setup.sh (the peers' venv: bench/bench_vision.py's):
  .venv/bin/python bench/bench_vlm.py --layers 1 --depth 1 --new-tokens 4 --repeats 1     # trial
  .venv/bin/python bench/bench_vlm.py --json /tmp/hfexport-bench/vlm.json                 # full
A benchmark, not a test: it exits non-zero only when an export or a run fails.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

from bench_export import checkpoint_bytes, default_hfexport, measure, mib
from bench_generate import machine_environment, run_worker
from bench_vision import run_json

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
WORKER = HERE / "_vlm_worker.py"
SPEEDUP_TARGET = 20.0
RSS_TARGET = 0.25
PROCESSOR_FILES = ("preprocessor_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.json",
                   "chat_template.jinja")


def ensure_checkpoint(args) -> Path:
    ckpt = args.workdir / f"qwen2-vl-2b-{args.layers}L-{args.depth}V-seed{args.seed}"
    if not (ckpt / ".bench-complete").exists():
        print(f"checkpoint: building {ckpt} ...", flush=True)
        shutil.rmtree(ckpt, ignore_errors=True)
        run_json([sys.executable, WORKER, "build", ckpt, args.layers, args.depth, args.seed],
                 args.workdir / "build.log")
        (ckpt / ".bench-complete").write_text("ok\n")
    return ckpt


def write_image(path: Path) -> Path:
    import numpy as np
    from PIL import Image

    Image.fromarray(np.random.default_rng(0).integers(0, 256, (448, 448, 3), dtype=np.uint8)).save(path)
    return path


def language_model_bytes(ckpt: Path) -> int:
    """float32 bytes a decode step reads: every language-model weight (the tied embedding table is
    the head too, so it is read whole once)."""
    from safetensors import safe_open

    total = 0
    with safe_open(str(ckpt / "model.safetensors"), framework="np") as f:
        for name in f.keys():
            if "visual" not in name:
                shape = f.get_slice(name).get_shape()
                total += 4 * math.prod(shape)
    return total


def export_commands(args, ckpt: Path, outs: dict, image: Path) -> dict:
    peers_bin = args.peers.parent
    return {
        "hfexport": [args.hfexport, "export", ckpt, "-o", outs["hfexport"], "--format", "openvino",
                     "--for-generation", "--dtype", "float32", "--overwrite"],
        "optimum-intel": [peers_bin / "optimum-cli", "export", "openvino", "--model", ckpt, "--task",
                          "image-text-to-text", "--weight-format", "fp32", outs["optimum-intel"]],
        "transformers.exporters": [sys.executable, WORKER, "export-transformers", ckpt,
                                   outs["transformers.exporters"], image],
    }


def prepare_pipeline(ckpt: Path, out: Path) -> None:
    """What VLMPipeline needs beside optimum-intel's models: the processor files and, when the
    export wrote none, the OpenVINO tokenizer and detokenizer."""
    for name in PROCESSOR_FILES:
        if (ckpt / name).exists() and not (out / name).exists():
            shutil.copy(ckpt / name, out / name)
    if not (out / "openvino_tokenizer.xml").exists():
        import openvino as ov
        from openvino_tokenizers import convert_tokenizer
        from transformers import AutoTokenizer

        tokenizer, detokenizer = convert_tokenizer(AutoTokenizer.from_pretrained(ckpt), with_detokenizer=True)
        ov.save_model(tokenizer, str(out / "openvino_tokenizer.xml"))
        ov.save_model(detokenizer, str(out / "openvino_detokenizer.xml"))


def run_exports(args, ckpt: Path, image: Path, logs: Path) -> tuple[dict, dict]:
    outs = {name: args.workdir / f"out-{name}" for name in ("hfexport", "optimum-intel", "transformers.exporters")}
    commands = export_commands(args, ckpt, outs, image)
    if args.skip_transformers:
        commands.pop("transformers.exporters")
    exports = {}
    for name, cmd in commands.items():
        shutil.rmtree(outs[name], ignore_errors=True)
        print(f"export {name:<24}", end="", flush=True)
        m = measure([str(c) for c in cmd], logs / f"export-{name}.log", 0.2)
        exports[name] = {"ok": m.ok, "wall_s": m.wall_s, "cpu_s": m.cpu_s, "peak_rss_mib": mib(m.peak_rss_kib),
                         "log": m.log}
        print(f" {m.wall_s:8.1f} s  peak RSS {mib(m.peak_rss_kib):8.0f} MiB" if m.ok else " FAILED")
        if not m.ok:
            print(m.log_tail(15))
            if name == "hfexport":
                raise SystemExit("hfexport's export failed")
    return exports, outs


def time_sides(args, ckpt: Path, outs: dict, image: Path, logs: Path, exports: dict) -> dict:
    # side -> (the worker's kind, the folder it loads)
    sides = {"hfexport": ("hfexport", outs["hfexport"]), "eager": ("eager", ckpt)}
    if exports.get("optimum-intel", {}).get("ok"):
        prepare_pipeline(ckpt, outs["optimum-intel"])
        sides["vlmpipeline"] = ("vlmpipeline", outs["optimum-intel"])
    prepare_pipeline(ckpt, outs["hfexport"])
    sides["vlmpipeline-hfexport"] = ("vlmpipeline", outs["hfexport"])
    timings = {}
    for side, (kind, folder) in sides.items():
        print(f"generate {side:<22}", end="", flush=True)
        t = run_json([sys.executable, WORKER, "time", kind, folder, image, args.new_tokens, args.repeats],
                     logs / f"time-{side}.log")
        timings[side] = t
        print(f" TTFT {t['ttft_s']:7.2f} s  decode {t['decode_tok_s']:6.2f} tok/s")
    return timings


def bandwidth_ceiling(args, ckpt: Path, logs: Path) -> dict:
    weight_bytes = language_model_bytes(ckpt)
    measured, _, error = run_worker(["--seed", str(args.seed), "bandwidth", "--ort-threads", "0",
                                     "--tmp-dir", str(args.workdir)], logs / "bandwidth.json", logs / "bandwidth.log")
    if measured is None:
        return {"weight_bytes": weight_bytes, "error": error}
    return {"weight_bytes": weight_bytes, "gb_s": measured["gb_s"], "tok_s": measured["gb_s"] * 1e9 / weight_bytes}


def summarize(ckpt: Path, exports: dict, timings: dict, ceiling: dict) -> dict:
    ours = exports["hfexport"]
    size = checkpoint_bytes(ckpt)
    summary = {"checkpoint_mib": size / 2**20, "exports": exports, "timings": timings, "ceiling": ceiling,
               "rss_fraction": ours["peak_rss_mib"] * 2**20 / size, "export_speedup": {}, "ttft_ratio": {},
               "decode_ratio": {}}
    for name, peer in exports.items():
        if name != "hfexport" and peer["ok"]:
            summary["export_speedup"][name] = peer["wall_s"] / ours["wall_s"]
    mine = timings["hfexport"]
    for side, t in timings.items():
        if side != "hfexport":
            summary["ttft_ratio"][side] = t["ttft_s"] / mine["ttft_s"]  # > 1: ours is faster
            summary["decode_ratio"][side] = mine["decode_tok_s"] / t["decode_tok_s"]
    if "tok_s" in ceiling:
        summary["ceiling_fraction"] = {side: t["decode_tok_s"] / ceiling["tok_s"] for side, t in timings.items()}
    return summary


def print_report(s: dict) -> None:
    print(f"\ncheckpoint {s['checkpoint_mib']:.0f} MiB (bf16); hfexport's peak RSS {s['rss_fraction']:.1%} of it"
          f" (target <= {RSS_TARGET:.0%}: {'met' if s['rss_fraction'] <= RSS_TARGET else 'NOT met'})")
    for name, ratio in s["export_speedup"].items():
        print(f"export: {name} / hfexport = {ratio:.1f}x (target >= {SPEEDUP_TARGET:.0f}x:"
              f" {'met' if ratio >= SPEEDUP_TARGET else 'NOT met'})")
    for side in s["ttft_ratio"]:
        print(f"generate vs {side}: TTFT {s['ttft_ratio'][side]:.2f}x, decode {s['decode_ratio'][side]:.2f}x"
              f" (> 1: hfexport faster; target >= 1)")
    for side, fraction in s.get("ceiling_fraction", {}).items():
        print(f"decode {side}: {fraction:.0%} of the read-bandwidth ceiling ({s['ceiling']['tok_s']:.2f} tok/s)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/hfexport-bench/vlm"))
    p.add_argument("--peers", type=Path, default=REPO / ".venv-optimum-onnx" / "bin" / "python")
    p.add_argument("--hfexport", type=Path, default=default_hfexport(REPO))
    p.add_argument("--layers", type=int, default=28, help="decoder layers (Qwen2-VL-2B: 28)")
    p.add_argument("--depth", type=int, default=32, help="vision blocks (Qwen2-VL-2B: 32)")
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-transformers", action="store_true", help="leave out transformers.exporters' export")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    logs = args.workdir / "logs"
    logs.mkdir(exist_ok=True)
    env = machine_environment("openvino", "openvino-genai", "transformers", "torch")
    print(json.dumps(env))
    ckpt = ensure_checkpoint(args)
    image = write_image(args.workdir / "image.png")
    exports, outs = run_exports(args, ckpt, image, logs)
    timings = time_sides(args, ckpt, outs, image, logs, exports)
    summary = summarize(ckpt, exports, timings, bandwidth_ceiling(args, ckpt, logs))
    summary["environment"] = env
    print_report(summary)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
