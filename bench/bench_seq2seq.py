"""Benchmark hfexport's encoder-decoder exports (issue 31) against optimum-onnx, in one run.

Checkpoints (random float32 weights in real shapes, built once under --workdir by
bench/_seq2seq_peer.py in the peers' venv): whisper-small (d_model 768, 12 + 12 layers, vocabulary
51865, 80 mel channels) and flan-t5-base (d_model 768, 12 + 12 layers, gated-GELU, vocabulary 32128,
an own lm_head).

Export (each in a fresh process: wall time, peak RSS from `/usr/bin/time -v`):
  hfexport             `hfexport export CKPT -o OUT --for-generation` (ONNX: encoder + decoder)
  optimum-onnx         `optimum-cli export onnx --model CKPT --task automatic-speech-recognition-with-past`
                       (text2text-generation-with-past for T5) (optimum-onnx 0.1.0)
  transformers.exporters `OnnxExporter().export_for_generation(model, inputs, OnnxConfig(dynamic=True))`
                       + save_pretrained, the checkpoint loaded in float32 (bench/_seq2seq_worker.py
                       export-transformers; its components: prefill and decode)
  hfexport-openvino    `hfexport export CKPT -o OUT --format openvino --for-generation`
  optimum-intel        `optimum-cli export openvino --model CKPT --task automatic-speech-recognition-with-past
                       --weight-format fp32` (text2text-generation-with-past for T5; optimum-intel 1.27;
                       float32 like ours)
Targets: each peer's wall time / hfexport's (same format) >= 20; hfexport's peak RSS <= 25% of the
checkpoint.

Inference (a fresh process per side, the default paths users call; a warm-up call, median of
--repeats): encode (Whisper: 30 s of features; T5: 32 tokens) and generate 1 and exactly
--new-tokens tokens, the decode rate from the difference (hfexport's runner through
hfexport.seq2seq.whisper_generate / text2text_generate vs optimum's ORTModelForSpeechSeq2Seq /
ORTModelForSeq2SeqLM.generate). Targets: hfexport at least as fast, whole and per step. Each
decode rate also as a fraction of this machine's read-bandwidth ceiling: onnxruntime's float32
MatMul streaming rate (bench/_generate_worker.py bandwidth) over the bytes a decode step reads
(the decoder's weights and the LM head; the cross-attention keys and values it reads are left out,
so the ceiling is generous).

Whisper in OpenVINO GenAI's WhisperPipeline (bench/_whisper_genai_worker.py, the main venv): both
OpenVINO exports get the same tokenizer (word-level over the vocabulary, converted by
openvino-tokenizers), preprocessor_config.json and whisper-small's language / task ids; the pipeline
with its default properties transcribes 30 s of audio into 1 and exactly --new-tokens tokens
(English, eos ignored): optimum-intel's export / hfexport's, target >= 1.

Run from the repository root after scripts/setup.sh:
  .venv/bin/python bench/bench_seq2seq.py --json /tmp/hfexport-bench/seq2seq.json
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
MODELS = {"whisper-small": ("whisper", "automatic-speech-recognition-with-past"),
          "flan-t5-base": ("t5", "text2text-generation-with-past")}


def run_json(cmd: list, log: Path) -> dict:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def checkpoint(args, name: str, logs: Path) -> Path:
    ckpt = args.workdir / f"{name}-seed{args.seed}"
    if not (ckpt / ".bench-complete").exists():
        print(f"checkpoint: building {ckpt} ...", flush=True)
        shutil.rmtree(ckpt, ignore_errors=True)
        run_json([args.peers, HERE / "_seq2seq_peer.py", "build", MODELS[name][0], ckpt, args.seed], logs / f"build-{name}.log")
        (ckpt / ".bench-complete").write_text("ok\n")
    return ckpt


def weight_bytes(ckpt: Path, prefix_filter) -> int:
    from safetensors import safe_open

    total = 0
    for path in ckpt.glob("*.safetensors"):
        with safe_open(str(path), "np") as f:
            for name in f.keys():
                if prefix_filter(name):
                    shape = f.get_slice(name).get_shape()
                    n = 1
                    for d in shape:
                        n *= d
                    total += 4 * n
    return total


def decode_step_bytes(kind: str, ckpt: Path) -> int:
    """The float32 weights a decode step reads: the decoder's layers and the LM head (its token
    embeddings are only gathered: one row)."""
    if kind == "whisper":  # proj_out is the token embeddings, read whole as the LM head
        return weight_bytes(ckpt, lambda n: n.startswith("model.decoder.") and "embed_positions" not in n
                            and ".encoder_attn.k_proj" not in n and ".encoder_attn.v_proj" not in n)
    return weight_bytes(ckpt, lambda n: (n.startswith("decoder.") and "embed_tokens" not in n
                                         and ".EncDecAttention.k." not in n and ".EncDecAttention.v." not in n)
                        or n == "lm_head.weight")


def export_all(args, name: str, ckpt: Path, outs: Path, logs: Path) -> dict:
    cli = args.peers.parent / "optimum-cli"
    commands = {
        "hfexport": [str(args.hfexport), "export", str(ckpt), "-o", str(outs / f"{name}-hfexport"), "--for-generation",
                     "--overwrite"],
        "optimum-onnx": [str(cli), "export", "onnx", "--model", str(ckpt), "--task", MODELS[name][1],
                         str(outs / f"{name}-optimum")],
        "transformers": [sys.executable, str(HERE / "_seq2seq_worker.py"), "export-transformers", str(ckpt),
                         str(outs / f"{name}-transformers")],
    }
    commands["hfexport-openvino"] = commands["hfexport"][:4] + [str(outs / f"{name}-hfexport-openvino"), "--format",
                                                                 "openvino", "--for-generation", "--overwrite"]
    commands["optimum-intel"] = [str(cli), "export", "openvino", "--model", str(ckpt), "--task", MODELS[name][1],
                                 "--weight-format", "fp32", str(outs / f"{name}-optimum-intel")]
    results = {}
    for label, cmd in commands.items():
        if label.startswith("optimum") or label == "transformers":
            shutil.rmtree(cmd[-1], ignore_errors=True)
        m = measure(cmd, logs / f"export-{name}-{label}.log", 0.01)
        if not m.ok and label == "optimum-intel":  # a peer that cannot export this model: reported, not fatal
            last = m.log_tail().strip().splitlines()[-1:]
            print(f"  export {label:14s} FAILED: {last[0] if last else '?'} (log {m.log})", flush=True)
            results[label] = {"failed": last[0] if last else "?"}
            continue
        if not m.ok:
            raise SystemExit(f"{name} {label}: export failed (log {m.log}):\n{m.log_tail()}")
        results[label] = {"wall_s": m.wall_s, "cpu_s": m.cpu_s, "peak_rss_mib": mib(m.peak_rss_kib)}
        print(f"  export {label:14s} {m.wall_s:7.2f} s wall  {mib(m.peak_rss_kib):8.1f} MiB peak", flush=True)
    return results


def whisper_pipeline(args, name: str, outs: Path, logs: Path, ceiling_tok_s: float) -> dict:
    """OpenVINO GenAI's WhisperPipeline over hfexport's and optimum-intel's OpenVINO exports."""
    worker = HERE / "_whisper_genai_worker.py"
    out = {}
    for label in ("hfexport-openvino", "optimum-intel"):
        folder = outs / f"{name}-{label}"
        run_json([sys.executable, worker, "prepare", folder], logs / f"genai-prepare-{name}-{label}.log")
        r = run_json([sys.executable, worker, "time", folder, args.new_tokens, args.repeats],
                     logs / f"genai-time-{name}-{label}.log")
        r["decode_tok_s"] = (args.new_tokens - 1) / max(r["all_tokens_s"] - r["one_token_s"], 1e-9)
        r["ceiling_fraction"] = r["decode_tok_s"] / ceiling_tok_s
        print(f"  WhisperPipeline {label:17s} 30 s + {args.new_tokens} tokens {r['all_tokens_s']:.3f} s; decode "
              f"{r['decode_tok_s']:7.1f} tok/s ({100 * r['ceiling_fraction']:.0f}% of the ceiling)", flush=True)
        out[label] = r
    out["speedup"] = out["optimum-intel"]["all_tokens_s"] / out["hfexport-openvino"]["all_tokens_s"]
    out["decode_speedup"] = out["hfexport-openvino"]["decode_tok_s"] / out["optimum-intel"]["decode_tok_s"]
    print(f"  WhisperPipeline optimum-intel / hfexport: {out['speedup']:.2f}x whole, decode rate {out['decode_speedup']:.2f}x "
          "(targets >= 1)")
    return out


def bandwidth(args, logs: Path) -> float:
    result = logs / "bandwidth.json"
    cmd = [sys.executable, HERE / "_generate_worker.py", "--result", result, "bandwidth", "--tmp-dir", args.workdir]
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    (logs / "bandwidth.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"bandwidth run failed:\n{proc.stderr[-2000:]}")
    return json.loads(result.read_text())["gb_s"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/hfexport-bench/seq2seq"))
    p.add_argument("--peers", type=Path, default=REPO / ".venv-optimum-onnx" / "bin" / "python")
    p.add_argument("--hfexport", type=Path, default=default_hfexport(REPO))
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    logs, outs = args.workdir / "logs", args.workdir / "out"
    logs.mkdir(exist_ok=True)
    outs.mkdir(exist_ok=True)
    report = {"environment": machine_environment("onnxruntime", "transformers"), "models": {}}
    gb_s = bandwidth(args, logs)
    print(f"read bandwidth (onnxruntime float32 MatMul): {gb_s:.1f} GB/s", flush=True)
    report["bandwidth_gb_s"] = gb_s
    for name in args.models:
        kind = MODELS[name][0]
        print(f"== {name}", flush=True)
        ckpt = checkpoint(args, name, logs)
        ckpt_bytes = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
        exports = export_all(args, name, ckpt, outs, logs)
        task = f"time-{kind}"
        ours = run_json([sys.executable, HERE / "_seq2seq_worker.py", task, outs / f"{name}-hfexport", args.new_tokens,
                         args.repeats], logs / f"time-{name}-hfexport.log")
        peer = run_json([args.peers, HERE / "_seq2seq_peer.py", task, outs / f"{name}-optimum", args.new_tokens,
                         args.repeats], logs / f"time-{name}-optimum.log")
        step_bytes = decode_step_bytes(kind, ckpt)
        ceiling_tok_s = gb_s * 1e9 / step_bytes
        entry = {"checkpoint_bytes": ckpt_bytes, "decode_step_bytes": step_bytes, "ceiling_tok_s": ceiling_tok_s,
                 "exports": exports, "hfexport": ours, "optimum-onnx": peer}
        entry["export_speedup"] = exports["optimum-onnx"]["wall_s"] / exports["hfexport"]["wall_s"]
        entry["transformers_export_speedup"] = exports["transformers"]["wall_s"] / exports["hfexport"]["wall_s"]
        entry["export_rss_fraction"] = exports["hfexport"]["peak_rss_mib"] * 2**20 / ckpt_bytes
        print(f"  export: optimum / hfexport wall {entry['export_speedup']:.1f}x, transformers.exporters / hfexport "
              f"{entry['transformers_export_speedup']:.1f}x (target >= {SPEEDUP_TARGET:.0f}); "
              f"hfexport peak RSS {100 * entry['export_rss_fraction']:.1f}% of the checkpoint (target <= "
              f"{100 * RSS_TARGET:.0f}%)")
        entry["openvino_export_rss_fraction"] = exports["hfexport-openvino"]["peak_rss_mib"] * 2**20 / ckpt_bytes
        if "wall_s" in exports["optimum-intel"]:
            entry["openvino_export_speedup"] = exports["optimum-intel"]["wall_s"] / exports["hfexport-openvino"]["wall_s"]
            print(f"  export OpenVINO: optimum-intel / hfexport wall {entry['openvino_export_speedup']:.1f}x (target >= "
                  f"{SPEEDUP_TARGET:.0f}); hfexport peak RSS {100 * entry['openvino_export_rss_fraction']:.1f}% of the checkpoint")
        for label, r in (("hfexport", ours), ("optimum-onnx", peer)):
            r["decode_tok_s"] = (args.new_tokens - 1) / max(r["all_tokens_s"] - r["one_token_s"], 1e-9)
            r["ceiling_fraction"] = r["decode_tok_s"] / ceiling_tok_s
            print(f"  {label:14s} encoder + {args.new_tokens} tokens {r['all_tokens_s']:.3f} s; decode "
                  f"{r['decode_tok_s']:7.1f} tok/s ({100 * r['ceiling_fraction']:.0f}% of the {ceiling_tok_s:.0f} tok/s "
                  "bandwidth ceiling)")
        entry["speedup"] = peer["all_tokens_s"] / ours["all_tokens_s"]
        entry["decode_speedup"] = ours["decode_tok_s"] / peer["decode_tok_s"]
        print(f"  optimum / hfexport, encoder + {args.new_tokens} tokens: {entry['speedup']:.2f}x; decode rate "
              f"hfexport / optimum: {entry['decode_speedup']:.2f}x (targets >= 1)")
        if kind == "whisper":
            entry["whisper_pipeline"] = whisper_pipeline(args, name, outs, logs, ceiling_tok_s)
        report["models"][name] = entry
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
