"""Benchmark hfexport against PyTorch's ONNX export on a Qwen3-0.6B- or Gemma-3-1B-sized checkpoint.

What it measures, in one run and each in its own subprocess (so peak RSS is per process):

  hfexport  `hfexport export CKPT -o OUT --overwrite` (float32 output, the CLI default)
  anchor    transformers' ONNX export of the same checkpoint, loaded in float32: the
            `transformers.exporters.OnnxExporter` path, or plain `torch.onnx.export(dynamo=True)`
            if that fails (see bench/_anchor_onnx_export.py). Its time includes importing torch and
            loading the model, both part of exporting with it; the split is printed too.

For each: wall time, CPU time, peak RSS (`/usr/bin/time -v`, else getrusage(RUSAGE_CHILDREN) in
a fresh wrapper process), and, sampled from /proc, the peak anonymous and file-backed parts of the
RSS. Targets: hfexport >= 20x faster (wall time) than the anchor, and its peak RSS <= 25% of the
checkpoint bytes. On a shared machine wall times are noisy; the CPU-time ratio is printed as a
steadier reference.

The checkpoint (real Qwen3-0.6B dimensions, or Gemma-3-1B's with --model gemma3-1b; random bf16
weights, tied embeddings) is built once and cached under --workdir: config.json from
AutoConfig.for_model, and model.safetensors streamed tensor by tensor, with the names and shapes
of a meta-device model of that config.

Run it (from the repository root):

  .venv/bin/python bench/bench_export.py --layers 2          # quick trial
  .venv/bin/python bench/bench_export.py --json bench.json   # full 28 layers
  .venv/bin/python bench/bench_export.py --validate          # also open both in onnxruntime
  .venv/bin/python bench/bench_export.py --model gemma3-1b   # a non-Llama layout (26 layers)

This is a benchmark, not a test: it fails only when an export fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

SPEEDUP_TARGET = 20.0  # anchor wall time / hfexport wall time, at least
RSS_FRACTION_TARGET = 0.25  # hfexport peak RSS / checkpoint bytes, at most


# --------------------------------------------------------------------------- checkpoint


def qwen3_0_6b_config(layers: int) -> dict:
    """The config of Qwen/Qwen3-0.6B, optionally with fewer layers."""
    return {
        "hidden_size": 1024,
        "num_hidden_layers": layers,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 3072,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "attention_bias": False,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "architectures": ["Qwen3ForCausalLM"],
        "dtype": "bfloat16",
    }


def gemma3_1b_config(layers: int) -> dict:
    """The config of google/gemma-3-1b-pt (text), optionally with fewer layers: a layout the Llama
    family lacks (sandwich norms, q/k norm, local and global RoPE, a 262k tied vocabulary)."""
    return {
        "hidden_size": 1152,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "intermediate_size": 6912,
        "vocab_size": 262144,
        "tie_word_embeddings": True,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
        "query_pre_attn_scalar": 256,
        "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh",
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
        "pad_token_id": 0,
        "bos_token_id": 2,
        "eos_token_id": 1,
        "architectures": ["Gemma3ForCausalLM"],
        "dtype": "bfloat16",
    }


# LFM2-1.2B's layer pattern: gated short convolutions, GQA at these layers.
LFM2_1_2B_ATTENTION = {2, 5, 8, 10, 12, 14}


def lfm2_1_2b_config(layers: int) -> dict:
    """The config of LiquidAI/LFM2-1.2B, optionally with its first `layers` layers: a hybrid of
    gated short convolutions (convolution state) and GQA layers, a 65k tied vocabulary."""
    return {
        "hidden_size": 2048,
        "num_hidden_layers": layers,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 12288,
        "block_auto_adjust_ff_dim": True,
        "block_ffn_dim_multiplier": 1.0,
        "block_multiple_of": 256,
        "vocab_size": 65536,
        "tie_word_embeddings": True,
        "max_position_embeddings": 128000,
        "rope_theta": 1000000.0,
        "norm_eps": 1e-5,
        "conv_L_cache": 3,
        "conv_bias": False,
        "layer_types": ["full_attention" if i in LFM2_1_2B_ATTENTION else "conv" for i in range(layers)],
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 7,
        "architectures": ["Lfm2ForCausalLM"],
        "dtype": "bfloat16",
    }


def qwen3_5_0_8b_config(layers: int) -> dict:
    """Qwen3.5-0.8B's text model shapes as we read them (not checked against the Hub's
    config.json), optionally with its first `layers` layers: gated DeltaNet layers (conv and
    recurrent state) with gated attention every fourth, a 248k tied vocabulary."""
    return {
        "hidden_size": 1024,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "intermediate_size": 3584,
        "vocab_size": 248320,
        "tie_word_embeddings": True,
        "max_position_embeddings": 262144,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 16,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        "bos_token_id": 248044,
        "eos_token_id": 248044,
        "architectures": ["Qwen3_5ForCausalLM"],
        "dtype": "bfloat16",
    }


def qwen3_5_0_8b_vl_config(layers: int) -> dict:
    """Qwen3.5-0.8B as the Hub ships it, Qwen3_5ForConditionalGeneration: the text model above
    under text_config, beside a vision tower (a small one here: neither exporter reads it, and
    onnxruntime-genai's builder takes Qwen3.5 only in this form)."""
    text = qwen3_5_0_8b_config(layers)
    del text["architectures"], text["dtype"]
    vision = {"depth": 2, "hidden_size": 256, "intermediate_size": 512, "num_heads": 4, "patch_size": 16,
              "out_hidden_size": text["hidden_size"]}
    return {"text_config": text, "vision_config": vision, "tie_word_embeddings": True,
            "architectures": ["Qwen3_5ForConditionalGeneration"], "dtype": "bfloat16"}


def text_config(config: dict) -> dict:
    """A config.json's text model part: text_config where the checkpoint is multimodal."""
    return config.get("text_config", config)


# --model: (model_type, config of `layers` layers, its real layer count)
MODELS = {
    "qwen3-0.6b": ("qwen3", qwen3_0_6b_config, 28),
    "gemma3-1b": ("gemma3_text", gemma3_1b_config, 26),
    "lfm2-1.2b": ("lfm2", lfm2_1_2b_config, 16),
    "qwen3.5-0.8b": ("qwen3_5_text", qwen3_5_0_8b_config, 24),
    "qwen3.5-0.8b-vl": ("qwen3_5", qwen3_5_0_8b_vl_config, 24),
}


def tensor_specs(config) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor the config's causal LM checkpoint stores, sorted by name.

    lm_head.weight is left out: the embeddings are tied, so checkpoints do not store it."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        if hasattr(config, "text_config"):  # a multimodal checkpoint: the class it names
            model = getattr(transformers, config.architectures[0])(config)
        else:
            model = AutoModelForCausalLM.from_config(config)
    if model.lm_head.weight is not model.get_input_embeddings().weight:
        raise RuntimeError("expected lm_head.weight tied to the input embeddings")
    return sorted((name, tuple(t.shape)) for name, t in model.state_dict().items() if name != "lm_head.weight")


def write_random_safetensors(path: Path, specs, seed: int, chunk_elems: int = 1 << 22) -> None:
    """Write `specs` as bf16 tensors of randn * 0.02 in the safetensors format.

    Streams chunk by chunk, so memory stays at one chunk whatever the model size (safetensors'
    save_file needs every tensor in memory at once). The result is checked with safetensors."""
    import torch
    from safetensors import safe_open

    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in specs:
        nbytes = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # safetensors pads the header to 8 bytes

    generator = torch.Generator().manual_seed(seed)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, shape in specs:
            numel = math.prod(shape)
            for start in range(0, numel, chunk_elems):
                chunk = torch.randn(min(chunk_elems, numel - start), generator=generator) * 0.02
                f.write(chunk.to(torch.bfloat16).view(torch.int16).numpy().tobytes())
    os.replace(partial, path)

    with safe_open(str(path), framework="pt") as f:
        if sorted(f.keys()) != [name for name, _ in specs]:
            raise RuntimeError(f"{path}: tensor names do not round-trip")
        name, shape = specs[-1]
        if tuple(f.get_slice(name).get_shape()) != shape:
            raise RuntimeError(f"{path}: shape of {name} does not round-trip")


def prepare_run(args, prefix: str) -> tuple[Path, int, Path, Path]:
    """The checkpoint a generation benchmark runs on (built if needed), its vocab size, and the run's
    directory --workdir/PREFIX-CHECKPOINT with its logs/ directory."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    ckpt = ensure_checkpoint(args.workdir, args.layers, args.seed, args.rebuild)
    vocab_size = json.loads((ckpt / "config.json").read_text())["vocab_size"]
    root = args.workdir / f"{prefix}-{ckpt.name}"
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return ckpt, vocab_size, root, logs


def ensure_checkpoint(workdir: Path, layers: int, seed: int, rebuild: bool, model: str = "qwen3-0.6b") -> Path:
    """The cached checkpoint for (model, layers, seed), built if missing or if `rebuild`."""
    model_type, make_config, _ = MODELS[model]
    ckpt = workdir / f"{model}-{layers}L-seed{seed}"
    stamp = ckpt / ".bench-complete"
    if stamp.exists() and not rebuild:
        print(f"checkpoint: reusing {ckpt}")
        return ckpt
    from transformers import AutoConfig

    print(f"checkpoint: building {ckpt} ...", flush=True)
    start = time.perf_counter()
    shutil.rmtree(ckpt, ignore_errors=True)
    ckpt.mkdir(parents=True)
    config = AutoConfig.for_model(model_type, **make_config(layers))
    config.save_pretrained(ckpt)
    write_random_safetensors(ckpt / "model.safetensors", tensor_specs(config), seed)
    stamp.write_text(json.dumps({"layers": layers, "seed": seed}) + "\n")
    print(f"checkpoint: built in {time.perf_counter() - start:.1f} s")
    return ckpt


def checkpoint_bytes(ckpt: Path) -> int:
    return sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))


def onnx_output_bytes(out_dir: Path) -> int:
    return sum(p.stat().st_size for p in out_dir.glob("*.onnx*") if p.is_file())


# --------------------------------------------------------------------------- measuring

# Runs argv[2:] as its only child and writes that child's peak RSS (KiB) and CPU time to argv[1]. Used when
# /usr/bin/time is missing: RUSAGE_CHILDREN of a fresh process covers exactly one measurement.
RUSAGE_WRAPPER = """\
import json, resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
report = {"rc": rc, "max_rss_kib": usage.ru_maxrss, "cpu_s": usage.ru_utime + usage.ru_stime}
open(sys.argv[1], "w").write(json.dumps(report))
sys.exit(rc)
"""


@dataclass
class Measurement:
    wall_s: float
    cpu_s: float  # user + system; less sensitive than wall time to other work on the machine
    peak_rss_kib: int  # the kernel's high-water mark (ru_maxrss) of the measured process
    rss_method: str
    returncode: int
    log: str
    # Peaks seen by sampling /proc/PID/status (0 when sampling saw nothing, e.g. a very short run).
    sampled_peak_kib: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def log_tail(self, lines: int = 25) -> str:
        return "\n".join(Path(self.log).read_text(errors="replace").splitlines()[-lines:])


class RssSampler(threading.Thread):
    """Polls /proc/*/status of a process tree and keeps the peak of each RSS component.

    ru_maxrss counts file-backed (mmap'd checkpoint) and anonymous pages together; sampling
    tells them apart. The wrapper (time or the rusage script) is skipped: only its descendants."""

    FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")

    def __init__(self, root_pid: int, interval_s: float):
        super().__init__(daemon=True)
        self.root_pid, self.interval_s = root_pid, interval_s
        self.peaks = dict.fromkeys(self.FIELDS, 0)
        self._done = threading.Event()

    @staticmethod
    def _children(pid: int) -> list[int]:
        try:
            text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        except OSError:
            return []
        return [int(c) for c in text.split()]

    @classmethod
    def _status(cls, pid: int) -> dict:
        values = {}
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                key, _, rest = line.partition(":")
                if key in cls.FIELDS:
                    values[key] = int(rest.split()[0])
        except (OSError, ValueError, IndexError):
            pass
        return values

    def run(self) -> None:
        while not self._done.is_set():
            pending = self._children(self.root_pid)
            while pending:
                pid = pending.pop()
                for key, value in self._status(pid).items():
                    self.peaks[key] = max(self.peaks[key], value)
                pending.extend(self._children(pid))
            self._done.wait(self.interval_s)

    def stop(self) -> dict:
        self._done.set()
        self.join()
        return dict(self.peaks)


def measure(cmd: list[str], log_path: Path, sample_interval_s: float, use_time: bool | None = None) -> Measurement:
    """Run `cmd` in a fresh process tree; its wall time and peak RSS.

    The peak comes from `/usr/bin/time -v` when present (or `use_time`), else from a fresh
    wrapper process's getrusage(RUSAGE_CHILDREN)."""
    if use_time is None:
        use_time = Path("/usr/bin/time").exists()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "rusage"
        if use_time:
            method, argv = "/usr/bin/time -v", ["/usr/bin/time", "-v", "-o", str(report), *cmd]
        else:
            method, argv = "getrusage(RUSAGE_CHILDREN)", [sys.executable, "-c", RUSAGE_WRAPPER, str(report), *cmd]
        with open(log_path, "w") as log:
            start = time.perf_counter()
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            sampler = RssSampler(proc.pid, sample_interval_s)
            sampler.start()
            returncode = proc.wait()
            wall_s = time.perf_counter() - start
            sampled = sampler.stop()
        text = report.read_text() if report.exists() else ""
    if use_time:
        fields = dict(line.strip().rsplit(": ", 1) for line in text.splitlines() if ": " in line)
        peak = int(fields.get("Maximum resident set size (kbytes)", 0))
        cpu_s = float(fields.get("User time (seconds)", 0)) + float(fields.get("System time (seconds)", 0))
    else:
        report = json.loads(text) if text else {}
        peak, cpu_s = report.get("max_rss_kib", 0), report.get("cpu_s", 0.0)
    return Measurement(wall_s, cpu_s, peak, method, returncode, str(log_path), sampled)


# --------------------------------------------------------------------------- the two exporters


def run_hfexport(binary: Path, ckpt: Path, out_dir: Path, logs: Path, sample_interval_s: float) -> Measurement:
    print("hfexport: exporting ...", flush=True)
    cmd = [str(binary), "export", str(ckpt), "-o", str(out_dir), "--overwrite"]
    m = measure(cmd, logs / "hfexport.log", sample_interval_s)
    print(f"hfexport: {'done' if m.ok else 'FAILED'} in {m.wall_s:.2f} s")
    return m


def run_anchor(
    method: str, ckpt: Path, out_dir: Path, logs: Path, sample_interval_s: float
) -> tuple[Measurement, dict]:
    """One anchor attempt; (measurement, timings the helper reported)."""
    print(f"anchor ({method}): exporting ...", flush=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    result = logs / f"anchor-{method}.json"
    result.unlink(missing_ok=True)
    helper = Path(__file__).with_name("_anchor_onnx_export.py")
    cmd = [sys.executable, str(helper), str(ckpt), str(out_dir), "--method", method, "--result", str(result)]
    m = measure(cmd, logs / f"anchor-{method}.log", sample_interval_s)
    timings = json.loads(result.read_text()) if m.ok and result.exists() else {}
    print(f"anchor ({method}): {'done' if m.ok else 'FAILED'} in {m.wall_s:.1f} s")
    return m, timings


def run_anchors(
    choice: str, ckpt: Path, out_dir: Path, logs: Path, sample_interval_s: float
) -> tuple[str | None, Measurement | None, dict, list[dict]]:
    """The first anchor that succeeds (exporters, then torch-onnx for 'auto'), and the failures."""
    methods = ["exporters", "torch-onnx"] if choice == "auto" else [choice]
    failures = []
    for method in methods:
        m, timings = run_anchor(method, ckpt, out_dir, logs, sample_interval_s)
        if m.ok:
            return method, m, timings, failures
        failures.append({"method": method, "returncode": m.returncode, "log": m.log, "tail": m.log_tail()})
        print(f"anchor ({method}) failed, log tail:\n{m.log_tail(10)}")
    return None, None, {}, failures


def validate_onnx(out_dir: Path, logs: Path, sample_interval_s: float, label: str) -> dict:
    """Create an onnxruntime InferenceSession on OUT_DIR/model.onnx (nothing is run)."""
    code = (
        "import sys, onnxruntime as ort; "
        "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider']); "
        "print('inputs', [i.name for i in s.get_inputs()], 'outputs', [o.name for o in s.get_outputs()])"
    )
    m = measure([sys.executable, "-c", code, str(out_dir / "model.onnx")], logs / f"ort-{label}.log", sample_interval_s)
    return {"ok": m.ok, "wall_s": m.wall_s, "peak_rss_kib": m.peak_rss_kib, "log_tail": m.log_tail(3)}


# --------------------------------------------------------------------------- report


def mib(kib: int) -> float:
    return kib / 1024


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def summarize(ckpt: Path, hf: Measurement, hf_out: Path, anchor, anchor_out: Path) -> dict:
    """Everything the report prints, JSON-serialisable."""
    ckpt_bytes = checkpoint_bytes(ckpt)
    method, am, timings, failures = anchor
    rows = {"hfexport": {**asdict(hf), "output_bytes": onnx_output_bytes(hf_out) if hf.ok else 0}}
    if am is not None:
        rows["anchor"] = {
            **asdict(am),
            "method": method,
            "timings": timings,
            "output_bytes": onnx_output_bytes(anchor_out),
        }
    speedup = am.wall_s / hf.wall_s if am is not None and hf.ok else None
    cpu_ratio = am.cpu_s / hf.cpu_s if am is not None and hf.ok and hf.cpu_s > 0 else None
    rss_fraction = hf.peak_rss_kib * 1024 / ckpt_bytes
    return {
        "checkpoint": {"path": str(ckpt), "bytes": ckpt_bytes},
        "results": rows,
        "anchor_method": method,
        "anchor_failures": failures,
        "speedup": speedup,
        "cpu_ratio": cpu_ratio,
        "hfexport_rss_fraction": rss_fraction,
        "targets": {
            "speedup_min": SPEEDUP_TARGET,
            "speedup_pass": speedup is not None and speedup >= SPEEDUP_TARGET,
            "rss_fraction_max": RSS_FRACTION_TARGET,
            "rss_fraction_pass": hf.ok and rss_fraction <= RSS_FRACTION_TARGET,
        },
    }


def print_report(summary: dict) -> None:
    ckpt_bytes = summary["checkpoint"]["bytes"]
    print(f"\ncheckpoint: {summary['checkpoint']['path']}  ({ckpt_bytes / 2**20:.0f} MiB of safetensors)")
    header = f"{'tool':<24} {'wall s':>8} {'CPU s':>7} {'peak RSS MiB':>13} {'RSS % ckpt':>11} {'anon MiB':>9} {'file MiB':>9} {'output MiB':>11}"
    print(header)
    print("-" * len(header))
    for key, row in summary["results"].items():
        name = key if key == "hfexport" else f"anchor ({row['method']})"
        sampled = row["sampled_peak_kib"]
        print(
            f"{name:<24} {row['wall_s']:>8.2f} {row['cpu_s']:>7.1f} {mib(row['peak_rss_kib']):>13.0f} "
            f"{100 * row['peak_rss_kib'] * 1024 / ckpt_bytes:>10.1f}% "
            f"{mib(sampled.get('RssAnon', 0)):>9.0f} {mib(sampled.get('RssFile', 0)):>9.0f} "
            f"{row['output_bytes'] / 2**20:>11.0f}"
        )
    anchor = summary["results"].get("anchor")
    if anchor and anchor["timings"]:
        t = anchor["timings"]
        print(
            f"  anchor split: import {t['import_s']:.1f} s, load {t['load_s']:.1f} s, "
            f"export {t['export_s']:.1f} s, save {t['save_s']:.1f} s"
        )
    for failure in summary["anchor_failures"]:
        print(f"  anchor '{failure['method']}' failed (rc {failure['returncode']}), see {failure['log']}")
    print("  (anon/file: peaks sampled from /proc/PID/status; peak RSS: the kernel's high-water mark)")

    targets = summary["targets"]
    speedup = summary["speedup"]
    speedup_text = f"{speedup:.1f}x" if speedup is not None else "n/a"
    print(
        f"\nspeed   anchor / hfexport wall time = {speedup_text:>8}   "
        f"target >= {targets['speedup_min']:.0f}x      {verdict(targets['speedup_pass'])}"
    )
    if summary["cpu_ratio"] is not None:
        print(f"        (anchor / hfexport CPU time = {summary['cpu_ratio']:.1f}x, for reference)")
    print(
        f"memory  hfexport RSS / checkpoint   = {100 * summary['hfexport_rss_fraction']:>7.1f}%   "
        f"target <= {100 * targets['rss_fraction_max']:.0f}%      {verdict(targets['rss_fraction_pass'])}"
    )
    for label, v in summary.get("validation", {}).items():
        print(f"onnxruntime session ({label}): {'ok' if v['ok'] else 'FAILED'} in {v['wall_s']:.1f} s")


# --------------------------------------------------------------------------- main


def default_hfexport(repo: Path) -> Path:
    installed = Path(sys.executable).parent / "hfexport"
    return installed if installed.exists() else repo / "build" / "hfexport"


def parse_args(argv=None) -> argparse.Namespace:
    repo = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/hfexport-bench"), help="checkpoints, outputs, logs")
    parser.add_argument("--model", choices=sorted(MODELS), default="qwen3-0.6b", help="checkpoint shape")
    parser.add_argument("--layers", type=int, help="decoder layers (default: the real model's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the checkpoint even if cached")
    parser.add_argument("--hfexport", type=Path, default=default_hfexport(repo),
                        help="the hfexport binary (default: the one installed next to this Python, else build/hfexport)")
    parser.add_argument(
        "--anchor",
        choices=["auto", "exporters", "torch-onnx", "none"],
        default="auto",
        help="auto: transformers.exporters' OnnxExporter, falling back to torch.onnx.export",
    )
    parser.add_argument("--validate", action="store_true", help="open both outputs in onnxruntime (needs RAM)")
    parser.add_argument("--keep-outputs", action="store_true", help="keep the exported models in --workdir")
    parser.add_argument("--sample-interval", type=float, default=0.05, help="seconds between /proc RSS samples")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    if args.layers is None:
        args.layers = MODELS[args.model][2]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.hfexport.exists():
        sys.exit(f"hfexport binary not found: {args.hfexport} (build it first)")
    args.workdir.mkdir(parents=True, exist_ok=True)
    ckpt = ensure_checkpoint(args.workdir, args.layers, args.seed, args.rebuild, args.model)
    logs = args.workdir / "logs"
    logs.mkdir(exist_ok=True)
    hf_out, anchor_out = args.workdir / f"out-hfexport-{ckpt.name}", args.workdir / f"out-anchor-{ckpt.name}"

    hf = run_hfexport(args.hfexport, ckpt, hf_out, logs, args.sample_interval)
    if not hf.ok:
        print(f"hfexport failed (rc {hf.returncode}):\n{hf.log_tail()}")
    anchor = (None, None, {}, [])
    if args.anchor != "none":
        anchor = run_anchors(args.anchor, ckpt, anchor_out, logs, args.sample_interval)

    summary = summarize(ckpt, hf, hf_out, anchor, anchor_out)
    if args.validate:
        outputs = {"hfexport": hf_out if hf.ok else None, "anchor": anchor_out if anchor[1] else None}
        summary["validation"] = {
            label: validate_onnx(out, logs, args.sample_interval, label) for label, out in outputs.items() if out
        }
    print_report(summary)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"\nresults written to {args.json}")
    if not args.keep_outputs:
        shutil.rmtree(hf_out, ignore_errors=True)
        shutil.rmtree(anchor_out, ignore_errors=True)
    return 0 if hf.ok and (args.anchor == "none" or anchor[1] is not None) else 1


if __name__ == "__main__":
    sys.exit(main())
