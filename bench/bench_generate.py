"""Benchmark generation speed of hfexport's ONNX exports against transformers, on onnxruntime CPU.

What it measures, on a Qwen3-0.6B-shaped checkpoint (random bf16 weights, built and cached by
bench_export.py's ensure_checkpoint), in float32, batch 1, greedy, a random --prompt-len prompt:

  prefill ms     the prompt in, the first token out (argmax included)
  decode tok/s   --new-tokens single-token steps after the prefill (the cache grows from P to P+N
                 tokens), argmax included: N / their total time

for each configuration, one warm-up run then --repeats timed runs, medians reported:

  hfexport  x 6     modes  dynamic      prefill + decode graphs, cache grows (`--for-generation`)
                           multi-token  one decode graph with a symbolic query length
                                        (`--multi-token-decode`; it also runs the prefill)
                           static       one decode graph, cache buffers updated in place
                                        (`--static-cache --max-cache-len P+N`)
                    profiles  standard (ai.onnx ops only), ort (onnxruntime contrib ops);
                              plus dynamic with ort-gqa (GroupQueryAttention owns the cache)
                    run through hfexport.open_runner (onnxruntime IO binding)
  hfexport x 2      dynamic, ort profile, weights quantized (`--quantize int4` / `int8`, default
                    group size 32 and int8 compute: MatMulNBits accuracy_level 4); activations and
                    cache stay float32. Not float32 graphs, so outside the targets below: printed in
                    their own section (ratios vs eager, the transformers-exported graph, float32)
  eager             transformers in PyTorch: the forward calls model.generate makes (prefill with
                    logits_to_keep=1, then one token per step over a DynamicCache), torch threads =
                    every core this process may use, default attention implementation (sdpa)
  tf-export         transformers' own exporter: OnnxExporter().export_for_generation(...,
                    OnnxConfig(dynamic=True)) -> prefill.onnx + decode.onnx, run through a minimal
                    IO-binding loop (--tf-loop iobinding, the same mechanics as hfexport's runner)
                    or transformers' own runner (--tf-loop runner)
  tf-export-ort     the same with OnnxConfig(ort_fusions="cpu") (onnxruntime contrib-op fusions)

Every export happens first (times printed), then every timing, each export and each timing in a
fresh subprocess (bench/_generate_worker.py; a 28-layer float32 graph holds ~2.4 GB of weights).
onnxruntime runs with its default thread pool (intra_op_num_threads=0: one thread per physical
core, so all cores) unless --ort-threads. A failed export or run is recorded and the rest go on.

Targets (decode tok/s, medians), for the best float32 hfexport configuration and for each profile's
best (float32 configurations only; the quantized ones never count):
  decode >= 1.5x transformers eager
  decode >= 2x the transformers-exported decode graph (the faster of tf-export / tf-export-ort)
  static >= dynamic (same profile; overall: best static vs best dynamic)

Next to the targets it prints the memory-bandwidth ceiling of float32 decode on this machine (skip
it with --no-ceiling): a batch-1 decode step streams every weight it reads once, so tok/s <= the
bandwidth / the float32 weight bytes a step reads (every checkpoint tensor, less an untied embedding
table, which is only gathered; a tied one is read whole as lm_head). The bandwidth is onnxruntime's
own float32 MatMul x[1, 1024] @ W over a W larger than the L3 cache (the worker's `bandwidth` task,
sampled before and after the timings; the higher sample counts, as the least disturbed by other load),
so no float32 graph run by onnxruntime here decodes faster; a target that needs more is flagged.

Run it (from the repository root; the exports need ~30 GB of disk for 28 layers, deleted after
the run unless --keep-exports):

  /work/main/.venv/bin/python bench/bench_generate.py --layers 2 --new-tokens 8 --repeats 1   # trial
  /work/main/.venv/bin/python bench/bench_generate.py --json generate.json                    # full

This is a benchmark, not a test: it exits non-zero only when an hfexport export or run fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from bench_export import default_hfexport, prepare_run

EAGER_TARGET = 1.5  # hfexport decode tok/s / transformers eager decode tok/s, at least
TF_EXPORT_TARGET = 2.0  # hfexport decode tok/s / transformers-exported graph decode tok/s, at least

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
WORKER = BENCH / "_generate_worker.py"

HFEXPORT_MODES = {
    "dynamic": [],
    "multi-token": ["--multi-token-decode"],
    "static": ["--static-cache"],  # + --max-cache-len P+N
}
PROFILES = ["standard", "ort"]
QUANTIZE = ["int4", "int8"]  # weight-quantized hfexport configurations (dynamic, ort profile)


# --------------------------------------------------------------------------- configurations


@dataclass(frozen=True)
class Config:
    name: str  # command-line and JSON key
    label: str  # table row
    kind: str  # hfexport | transformers-export | eager
    mode: str = ""  # hfexport: dynamic | multi-token | static
    profile: str = ""  # hfexport: standard | ort; transformers-export: none | cpu (ort_fusions)
    quantize: str = ""  # hfexport: "" (float32 weights) | int4 | int8 (--quantize; not float32, no targets)


def all_configs() -> list[Config]:
    configs = [
        Config(f"hf-{mode}-{profile}", f"hfexport {mode} ({profile})", "hfexport", mode, profile)
        for profile in PROFILES
        for mode in HFEXPORT_MODES
    ]
    # GroupQueryAttention only changes the dynamic cache (the static one keeps Attention in every profile).
    configs.append(Config("hf-dynamic-ort-gqa", "hfexport dynamic (ort-gqa)", "hfexport", "dynamic", "ort-gqa"))
    configs += [
        Config(f"hf-dynamic-ort-{bits}", f"hfexport dynamic (ort, {bits} weights)", "hfexport", "dynamic", "ort",
               quantize=bits)
        for bits in QUANTIZE
    ]
    configs += [
        Config("eager", "transformers eager", "eager"),
        Config("tf-export", "transformers export", "transformers-export", profile="none"),
        Config("tf-export-ort", "transformers export (ort fusions)", "transformers-export", profile="cpu"),
    ]
    return configs


@dataclass
class Result:
    config: Config
    export_s: float | None = None
    export_detail: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)
    error: str | None = None  # the export's or the run's failure, with its log tail

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.timing)

    @property
    def decode(self) -> float | None:
        return self.timing.get("decode_tok_s_median") if self.ok else None

    @property
    def prefill(self) -> float | None:
        return self.timing.get("prefill_ms_median") if self.ok else None


# --------------------------------------------------------------------------- subprocesses


def worker_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
    env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return env


def run_logged(cmd: list[str], log: Path) -> tuple[int, float, str]:
    """Run cmd with output to log; (returncode, wall seconds, last lines of the log)."""
    with open(log, "w") as f:
        start = time.perf_counter()
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=worker_env())
        wall = time.perf_counter() - start
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    return rc, wall, tail


def run_worker(args: list[str], result_path: Path, log: Path) -> tuple[dict | None, float, str]:
    """Run _generate_worker.py; (its JSON result or None, wall seconds, log tail)."""
    result_path.unlink(missing_ok=True)
    cmd = [sys.executable, str(WORKER), "--result", str(result_path), *args]
    rc, wall, tail = run_logged(cmd, log)
    if rc != 0 or not result_path.exists():
        return None, wall, f"exit code {rc}, log {log}:\n{tail}"
    return json.loads(result_path.read_text()), wall, ""


# --------------------------------------------------------------------------- exports


def export_stamp(config: Config, ckpt: Path, settings: dict) -> dict:
    """What an export depends on; --reuse-exports reuses an output whose stamp matches. asdict(config)
    carries `quantize`, so a float32 export is never reused for a quantized configuration or back."""
    stamp = {"config": asdict(config), "checkpoint": str(ckpt)}
    if config.kind == "hfexport":
        binary = Path(settings["hfexport"])
        stamp["binary_mtime"] = binary.stat().st_mtime
        if config.mode == "static":
            stamp["max_cache_len"] = settings["prompt_len"] + settings["new_tokens"]
    return stamp


def hfexport_command(binary: Path, ckpt: Path, out: Path, config: Config, max_cache_len: int) -> list[str]:
    cmd = [str(binary), "export", str(ckpt), "-o", str(out), "--for-generation", *HFEXPORT_MODES[config.mode]]
    if config.mode == "static":
        cmd += ["--max-cache-len", str(max_cache_len)]
    if config.quantize:
        cmd += ["--quantize", config.quantize]  # default group size (32) and compute (int8)
    return cmd + ["--onnx-ops", config.profile, "--dtype", "float32", "--overwrite"]


def supports_quantize(binary: Path) -> bool:
    """Whether this hfexport binary has `export --quantize` (an older install next to the venv's Python may not)."""
    try:
        help_text = subprocess.run([str(binary), "export", "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--quantize" in help_text.stdout + help_text.stderr


def export_one(result: Result, ckpt: Path, out: Path, logs: Path, args) -> None:
    """Export one configuration to `out` (nothing for eager); fills result.export_s / .error."""
    config = result.config
    if config.quantize and not args.hfexport_quantize:
        result.error = (f"export skipped: {args.hfexport} has no --quantize (an older build: reinstall it or pass"
                        " --hfexport build/hfexport)")
        print(f"  {config.name:<24} SKIPPED (no --quantize in {args.hfexport})")
        return
    stamp_file = out / ".bench-generate-export.json"
    stamp = export_stamp(config, ckpt, {"hfexport": args.hfexport, "prompt_len": args.prompt_len,
                                        "new_tokens": args.new_tokens})
    if args.reuse_exports and stamp_file.exists() and json.loads(stamp_file.read_text()) == stamp:
        print(f"  {config.name:<24} reusing {out}")
        result.export_detail = {"reused": True}
        return
    print(f"  {config.name:<24} exporting ...", end="", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    log = logs / f"export-{config.name}.log"
    if config.kind == "hfexport":
        cmd = hfexport_command(args.hfexport, ckpt, out, config, args.prompt_len + args.new_tokens)
        rc, wall, tail = run_logged(cmd, log)
        ok, detail, error = rc == 0, {"command": cmd}, f"exit code {rc}, log {log}:\n{tail}"
    else:
        detail, wall, error = run_worker(
            ["--seed", str(args.seed), "export-transformers", str(ckpt), str(out), "--fusions", config.profile],
            logs / f"export-{config.name}.json", log)
        ok, detail = detail is not None, detail or {}
    if ok and config.quantize:
        detail["quantization"] = json.loads((out / "export.json").read_text()).get("quantization")
    if ok:
        result.export_s, result.export_detail = wall, detail
        stamp_file.write_text(json.dumps(stamp) + "\n")
        print(f" {wall:.1f} s")
    else:
        result.error = f"export failed: {error}"
        print(f" FAILED ({error.splitlines()[0]})")


# --------------------------------------------------------------------------- timing


def time_one(result: Result, path: Path, logs: Path, args, vocab_size: int) -> None:
    config = result.config
    print(f"  {config.name:<24} timing ...", end="", flush=True)
    worker_args = [
        "--seed", str(args.seed),
        "time", config.kind, str(path),
        "--vocab-size", str(vocab_size),
        "--prompt-len", str(args.prompt_len),
        "--new-tokens", str(args.new_tokens),
        "--repeats", str(args.repeats),
        "--ort-threads", str(args.ort_threads),
        "--torch-threads", str(args.torch_threads),
        "--tf-loop", args.tf_loop,
    ]
    if args.torch_attn:
        worker_args += ["--torch-attn", args.torch_attn]
    timing, wall, error = run_worker(worker_args, logs / f"time-{config.name}.json", logs / f"time-{config.name}.log")
    if timing is None:
        result.error = f"run failed: {error}"
        print(f" FAILED ({error.splitlines()[0]})")
        return
    result.timing = timing
    print(f" prefill {timing['prefill_ms_median']:.1f} ms, decode {timing['decode_tok_s_median']:.2f} tok/s"
          f" ({wall:.0f} s)")


# --------------------------------------------------------------------------- bandwidth ceiling


def checkpoint_shapes(ckpt: Path) -> dict[str, list[int]]:
    """name -> shape of every tensor in the checkpoint's safetensors files, from their headers alone
    (an 8-byte little-endian length, then that many bytes of JSON): no weight is loaded."""
    shapes = {}
    for file in sorted(ckpt.glob("*.safetensors")):
        with open(file, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        shapes.update({name: info["shape"] for name, info in header.items() if name != "__metadata__"})
    return shapes


def decode_weight_bytes(ckpt: Path) -> dict:
    """Bytes of float32 weights one batch-1 decode step reads: every tensor once, whatever its stored
    dtype, except an untied embedding table, of which a step gathers one row. A tied table doubles as
    lm_head and is read whole. The KV cache reads are left out (a few % at these lengths), so the
    ceiling derived from this stays an upper bound."""
    config = json.loads((ckpt / "config.json").read_text())
    shapes = checkpoint_shapes(ckpt)
    numel = {name: math.prod(shape) for name, shape in shapes.items()}
    embed = next((n for n in numel if n.endswith("embed_tokens.weight")), None)
    lm_head = next((n for n in numel if n.endswith("lm_head.weight")), None)
    tied = config.get("tie_word_embeddings", lm_head is None)
    elements = sum(numel.values())
    if embed and not tied:
        elements -= numel[embed] - shapes[embed][-1]  # the table less the one row gathered
    elif embed and lm_head:
        elements -= numel[lm_head]  # a tied table also stored as lm_head is still read once
    return {"weight_bytes": 4 * elements, "tied_embeddings": tied, "tensors": len(numel)}


def measure_ceiling(ckpt: Path, tmp_dir: Path, logs: Path, args, tag: str) -> dict:
    """onnxruntime's float32 MatMul bandwidth (the worker's bandwidth task, in its own process so no
    other model shares the heap or the cache) over the weight bytes of a decode step: the highest
    decode tok/s any float32 graph can reach here."""
    ceiling = decode_weight_bytes(ckpt)
    print(f"  {'bandwidth (' + tag + ')':<24} timing ...", end="", flush=True)
    worker_args = ["--seed", str(args.seed), "bandwidth", "--ort-threads", str(args.ort_threads),
                   "--tmp-dir", str(tmp_dir)]
    measured, wall, error = run_worker(worker_args, logs / f"bandwidth-{tag}.json", logs / f"bandwidth-{tag}.log")
    if measured is None:
        print(f" FAILED ({error.splitlines()[0]})")
        return {**ceiling, "error": f"bandwidth run failed: {error}"}
    print(f" {measured['gb_s']:.1f} GB/s (float32 MatMul over {measured['weight_bytes'] / 2**30:.2f} GiB,"
          f" median of {len(measured['run_s'])}) ({wall:.0f} s)")
    tok_s = measured["gb_s"] * 1e9 / ceiling["weight_bytes"]
    return {**ceiling, "gb_s": measured["gb_s"], "tok_s": tok_s, "measurement": measured}


def highest_ceiling(samples: list[dict]) -> dict:
    """The sample with the most bandwidth: the least disturbed by other load on a shared machine,
    and the conservative choice when a target is called out of reach."""
    measured = [s for s in samples if "gb_s" in s]
    best_sample = max(measured, key=lambda s: s["gb_s"]) if measured else samples[-1]
    return {**best_sample, "samples_gb_s": [s.get("gb_s") for s in samples]}


def add_ceiling_ratios(ceiling: dict, results: list[Result], checks: dict) -> None:
    """The ceiling over each target's reference, and whether each target asks for more than it."""
    by_name = {r.config.name: r for r in results}
    targets = {"vs_eager": ("eager_reference", EAGER_TARGET), "vs_tf_export": ("tf_export_reference", TF_EXPORT_TARGET)}
    ceiling["ratios"], ceiling["targets_above_ceiling"] = {}, {}
    for key, (reference, target) in targets.items():
        name = checks[reference]
        value = ratio(ceiling.get("tok_s"), by_name[name].decode if name else None)
        ceiling["ratios"][key] = value
        ceiling["targets_above_ceiling"][key] = None if value is None else target > value


def print_ceiling(ceiling: dict | None, results: list[Result], checks: dict) -> None:
    if ceiling is None:
        return
    gb = ceiling["weight_bytes"] / 1e9
    if "tok_s" not in ceiling:
        print(f"\nbandwidth ceiling (float32): not measured ({ceiling['error'].splitlines()[0]}); a decode step reads"
              f" {gb:.2f} GB of float32 weights")
        return
    by_name = {r.config.name: r for r in results}
    references = [(checks["tf_export_reference"], "vs_tf_export", "the transformers-exported graph"),
                  (checks["eager_reference"], "vs_eager", "eager")]
    shares = [f"{ceiling['ratios'][key]:.2f}x {label} ({by_name[name].decode:.2f} tok/s)"
              for name, key, label in references if name]
    samples = " / ".join(f"{g:.1f}" for g in ceiling.get("samples_gb_s", []) if g is not None)
    text = (f"bandwidth ceiling (float32): onnxruntime MatMul streams {ceiling['gb_s']:.1f} GB/s here (the higher of"
            f" the samples before / after the timings: {samples}); a decode step"
            f" reads {gb:.2f} GB of float32 weights -> at most {ceiling['tok_s']:.1f} tok/s for any float32 graph")
    text += (" = " + ", ".join(shares) if shares else "") + "."
    top = checks.get("best", {})
    if top.get("decode_tok_s"):
        text += (f" Best float32 hfexport ({top['config']}, {top['decode_tok_s']:.2f} tok/s) reaches"
                 f" {top['decode_tok_s'] / ceiling['tok_s']:.0%} of it.")
    # Quantized weights read fewer bytes per step, so only the float32 configurations can expose a broken premise.
    fastest = max((r.decode for r in results if r.decode is not None and not r.config.quantize), default=0.0)
    if fastest > ceiling["tok_s"]:
        # Streaming cannot be beaten, so a faster decode means the premise failed: part of the weights
        # stayed in cache between steps (a small --layers checkpoint), or other load slowed the MatMul.
        l3 = ceiling["measurement"].get("l3_bytes")
        cache = f" ({l3 / 2**20:.0f} MiB)" if l3 else ""
        text += (f" A decode faster than the ceiling means the weights partly stay in the L3 cache{cache} or"
                 " the bandwidth run was slowed by other load.")
    print("\n" + textwrap.fill(text, width=118, subsequent_indent="  "))


# --------------------------------------------------------------------------- summary


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def best(results: list[Result]) -> Result | None:
    ok = [r for r in results if r.decode is not None]
    return max(ok, key=lambda r: r.decode) if ok else None


def passes(value: float | None, target: float) -> bool | None:
    """Whether a ratio meets its target; None when it could not be measured (a side missing or failed)."""
    return None if value is None else value >= target


def target_checks(results: list[Result]) -> dict:
    """PASS/MISS of each target for the best float32 hfexport configuration and for each profile's best.
    The targets are defined for float32: the weight-quantized configurations are left out (see quantized_summary)."""
    by_name = {r.config.name: r for r in results}
    eager = by_name.get("eager")
    eager_decode = eager.decode if eager else None
    tf_ref = best([r for r in results if r.config.kind == "transformers-export"])
    hf = [r for r in results if r.config.kind == "hfexport" and not r.config.quantize]

    def checks(candidates: list[Result]) -> dict:
        top = best(candidates)
        dynamic = best([r for r in candidates if r.config.mode == "dynamic"])
        static = best([r for r in candidates if r.config.mode == "static"])
        vs_eager = ratio(top.decode if top else None, eager_decode)
        vs_tf = ratio(top.decode if top else None, tf_ref.decode if tf_ref else None)
        static_vs_dynamic = ratio(static.decode if static else None, dynamic.decode if dynamic else None)
        return {
            "config": top.config.name if top else None,
            "decode_tok_s": top.decode if top else None,
            "vs_eager": {"ratio": vs_eager, "target": EAGER_TARGET, "pass": passes(vs_eager, EAGER_TARGET)},
            "vs_tf_export": {"ratio": vs_tf, "target": TF_EXPORT_TARGET, "pass": passes(vs_tf, TF_EXPORT_TARGET)},
            "static_vs_dynamic": {"ratio": static_vs_dynamic, "target": 1.0,
                                  "static": static.config.name if static else None,
                                  "dynamic": dynamic.config.name if dynamic else None,
                                  "pass": passes(static_vs_dynamic, 1.0)},
        }

    groups = {"best": hf, **{p: [r for r in hf if r.config.profile == p] for p in [*PROFILES, "ort-gqa"]}}
    return {
        "eager_reference": eager.config.name if eager and eager.ok else None,
        "tf_export_reference": tf_ref.config.name if tf_ref else None,
        **{name: checks(members) for name, members in groups.items() if members},
    }


def quantized_summary(results: list[Result], checks: dict) -> dict | None:
    """The weight-quantized hfexport configurations, outside the float32 targets: each one's decode tok/s
    over eager's, over the transformers-exported reference's (the one the targets use) and over its float32
    counterpart's (same mode and profile); None when none was run."""
    by_name = {r.config.name: r for r in results}
    quantized = [r for r in results if r.config.kind == "hfexport" and r.config.quantize]
    if not quantized:
        return None

    def decode_of(name: str | None) -> float | None:
        return by_name[name].decode if name else None

    configs = {}
    for r in quantized:
        float32 = next((f for f in results if f.config.kind == "hfexport" and not f.config.quantize
                        and (f.config.mode, f.config.profile) == (r.config.mode, r.config.profile)), None)
        configs[r.config.name] = {
            "quantize": r.config.quantize,
            "quantization": r.export_detail.get("quantization"),  # export.json's section
            "decode_tok_s": r.decode,
            "vs_eager": ratio(r.decode, decode_of(checks["eager_reference"])),
            "vs_tf_export": ratio(r.decode, decode_of(checks["tf_export_reference"])),
            "float32_reference": float32.config.name if float32 and float32.ok else None,
            "vs_float32": ratio(r.decode, float32.decode if float32 else None),
            "error": r.error.splitlines()[0] if r.error else None,
        }
    top = best(quantized)
    return {"best": top.config.name if top else None, "configs": configs}


def print_quantized(quantized: dict | None) -> None:
    if not quantized:
        return
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}x"  # noqa: E731
    print("\nquantized weights (not float32; outside the targets above):")
    for name, q in quantized["configs"].items():
        tag = "best " if name == quantized["best"] else ""
        if q["decode_tok_s"] is None:
            print(f"  {tag}{name}: {q['error'] or 'not timed'}")
            continue
        shares = [f"{fmt(q['vs_tf_export'])} the transformers-exported graph", f"{fmt(q['vs_eager'])} eager",
                  f"{fmt(q['vs_float32'])} float32 {q['float32_reference'] or '(not run)'}"]
        print(f"  {tag}{name} {q['decode_tok_s']:.2f} tok/s = " + ", ".join(shares))


def leading_matches(tokens: list[int], reference: list[int]) -> int:
    n = 0
    for a, b in zip(tokens, reference):
        if a != b:
            break
        n += 1
    return n


def print_table(results: list[Result], checks: dict) -> None:
    by_name = {r.config.name: r for r in results}
    eager = by_name.get("eager")
    eager_decode = eager.decode if eager else None
    eager_tokens = eager.timing.get("tokens") if eager and eager.ok else None
    tf_ref = by_name.get(checks["tf_export_reference"]) if checks["tf_export_reference"] else None

    def fmt(value: float | None, width: int, spec: str, suffix: str = "") -> str:
        return f"{'-' if value is None else f'{value:{spec}}{suffix}':>{width}}"

    header = (f"{'config':<37} {'export s':>9} {'load s':>7} {'prefill ms':>11} {'decode tok/s':>13} "
              f"{'vs eager':>9} {'vs tf-export':>13} {'tokens = eager':>15}")
    print("\n" + header)
    print("-" * len(header))
    for r in results:
        if r.error:
            print(f"{r.config.label:<37} {r.error.splitlines()[0]}")
            continue
        tokens = r.timing.get("tokens", [])
        match = f"{leading_matches(tokens, eager_tokens)}/{len(tokens)}" if eager_tokens else "-"
        print(
            f"{r.config.label:<37} {fmt(r.export_s, 9, '.1f')} {fmt(r.timing.get('load_s'), 7, '.1f')} "
            f"{fmt(r.prefill, 11, '.1f')} {fmt(r.decode, 13, '.2f')} "
            f"{fmt(ratio(r.decode, eager_decode), 9, '.2f', 'x')} "
            f"{fmt(ratio(r.decode, tf_ref.decode if tf_ref else None), 13, '.2f', 'x')} {match:>15}"
        )
    print("  vs eager / vs tf-export: decode tok/s over transformers eager's / over the faster transformers-exported"
          f" graph's ({checks['tf_export_reference'] or 'none succeeded'}).")
    print("  tokens = eager: leading greedy tokens identical to eager's (random weights make near-ties likely;"
          " an early divergence alone is not a bug).")
    if any(r.config.quantize for r in results):
        print("  int4 / int8 weights: quantized rows are expected to diverge from eager's tokens early; they are"
              " not float32 and stay outside the targets.")
    for r in results:
        if r.error:
            print(f"\n{r.config.label}: {r.error}")


def print_targets(checks: dict, ceiling: dict | None) -> None:
    verdict = lambda c: {True: "PASS", False: "MISS", None: "n/a"}[c["pass"]]  # noqa: E731
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}x"  # noqa: E731

    def above(key: str) -> str:
        """A note when the target asks for more than the bandwidth allows: no graph can meet it here."""
        if not ceiling or not ceiling.get("targets_above_ceiling", {}).get(key):
            return ""
        return f"   (above the f32 ceiling: {ceiling['ratios'][key]:.2f}x)"

    print("\ntargets (float32 configurations only; decode tok/s; n/a: a side was not run or failed):")
    for group in ["best", *PROFILES, "ort-gqa"]:
        c = checks.get(group)
        if not c:
            continue
        title = "best hfexport" if group == "best" else f"profile {group}"
        print(f"  {title} ({c['config'] or 'none succeeded'}):")
        s = c["static_vs_dynamic"]
        rows = [
            (f">= {EAGER_TARGET}x transformers eager", c["vs_eager"], above("vs_eager")),
            (f">= {TF_EXPORT_TARGET}x transformers-exported graph", c["vs_tf_export"], above("vs_tf_export")),
            ("static >= dynamic", s, f"   ({s['static'] or '-'} vs {s['dynamic'] or '-'})"),
        ]
        for text, check, note in rows:
            print(f"    {text:<38} {fmt(check['ratio']):>8}  {verdict(check)}{note}")


# --------------------------------------------------------------------------- environment


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def hfexport_revision() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine_environment(*packages: str) -> dict:
    """The machine, its load, and the versions of `packages`: what a benchmark's figures depend on."""
    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "loadavg_start": os.getloadavg(),
        "python": platform.python_version(),
        **{name: package_version(name) for name in packages},
        "hfexport_revision": hfexport_revision(),
    }


def environment(args) -> dict:
    return {
        **machine_environment("onnxruntime", "torch", "transformers"),
        "ort_threads": args.ort_threads or "default (0: one per physical core, i.e. all cores)",
        "torch_threads": args.torch_threads,
    }


def print_environment(env: dict, args, ckpt: Path) -> None:
    print(f"checkpoint: {ckpt}  ({args.layers} layers, float32, batch 1)")
    print(f"prompt {args.prompt_len} tokens, {args.new_tokens} new tokens (decode steps), "
          f"1 warm-up + {args.repeats} timed run(s), medians")
    print(f"cpu: {env['cpu']}, {env['cpu_count']} logical cores ({env['usable_cpus']} usable here), "
          f"load average {env['loadavg_start'][0]:.2f}")
    print(f"onnxruntime {env['onnxruntime']} (CPUExecutionProvider), intra-op threads: {env['ort_threads']}")
    print(f"torch {env['torch']} (threads: {env['torch_threads']}), transformers {env['transformers']}, "
          f"hfexport {env['hfexport_revision']}, transformers-export loop: {args.tf_loop}")
    if env["loadavg_start"][0] > 0.5 * env["usable_cpus"]:
        print("warning: the machine is busy (load average above half the cores): timings will be noisy")


# --------------------------------------------------------------------------- main


def parse_args(argv=None) -> argparse.Namespace:
    names = [c.name for c in all_configs()]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="configurations: " + ", ".join(names))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/hfexport-bench"),
                        help="checkpoints, exports, logs (shared with bench_export.py)")
    parser.add_argument("--layers", type=int, default=28, help="decoder layers (28 = the real Qwen3-0.6B)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights and of the prompt")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the checkpoint even if cached")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128, help="decode steps timed after the prefill")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after the warm-up (median reported)")
    parser.add_argument("--configs", default=",".join(names),
                        help="comma-separated configurations to run (default: all)")
    parser.add_argument("--hfexport", type=Path, default=default_hfexport(REPO),
                        help="the hfexport binary (default: the one installed next to this Python, else build/hfexport)")
    parser.add_argument("--ort-threads", type=int, default=0,
                        help="onnxruntime intra_op_num_threads (default 0: ORT's own, every physical core)")
    parser.add_argument("--torch-threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="torch threads for eager (default: every core this process may use)")
    parser.add_argument("--torch-attn", default=None, help="eager attn_implementation (default: transformers', sdpa)")
    parser.add_argument("--tf-loop", choices=["iobinding", "runner"], default="iobinding",
                        help="run the transformers export through a minimal IO-binding loop or transformers' runner")
    parser.add_argument("--reuse-exports", action="store_true",
                        help="reuse exports left by an earlier --keep-exports run when their settings match")
    parser.add_argument("--keep-exports", action="store_true", help="keep the exports in --workdir")
    parser.add_argument("--no-ceiling", action="store_true",
                        help="skip the memory-bandwidth measurement behind the float32 decode ceiling")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = sorted(set(args.configs) - set(names))
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; choose from {names}")
    if min(args.prompt_len, args.new_tokens, args.repeats, args.layers) < 1:
        parser.error("--prompt-len, --new-tokens, --repeats and --layers must be at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    configs = [c for c in all_configs() if c.name in args.configs]
    if any(c.kind == "hfexport" for c in configs) and not args.hfexport.exists():
        sys.exit(f"hfexport binary not found: {args.hfexport} (build it first)")
    args.hfexport_quantize = any(c.quantize for c in configs) and supports_quantize(args.hfexport)
    if any(c.quantize for c in configs) and not args.hfexport_quantize:
        print(f"warning: {args.hfexport} has no `export --quantize`: it predates weight quantization, so the"
              " quantized configurations are skipped and the float32 ones use that older binary"
              " (reinstall it, or pass --hfexport build/hfexport)")
    ckpt, vocab_size, exports, logs = prepare_run(args, "generate")
    env = environment(args)
    print_environment(env, args, ckpt)

    results = [Result(c) for c in configs]
    out_dir = {r.config.name: exports / r.config.name for r in results}
    print("\nexports:")
    for r in results:
        if r.config.kind != "eager":
            export_one(r, ckpt, out_dir[r.config.name], logs, args)
    print("\ntiming:")
    # Bandwidth before and after the timings: the VM's bandwidth drifts with its neighbours' load.
    ceilings = [] if args.no_ceiling else [measure_ceiling(ckpt, exports, logs, args, "before")]
    for r in results:
        if r.error is None:
            time_one(r, ckpt if r.config.kind == "eager" else out_dir[r.config.name], logs, args, vocab_size)
    if ceilings:
        ceilings.append(measure_ceiling(ckpt, exports, logs, args, "after"))
    ceiling = highest_ceiling(ceilings) if ceilings else None
    env["loadavg_end"] = os.getloadavg()

    checks = target_checks(results)
    if ceiling:
        add_ceiling_ratios(ceiling, results, checks)
    print_table(results, checks)
    print_ceiling(ceiling, results, checks)
    print_targets(checks, ceiling)
    quantized = quantized_summary(results, checks)
    print_quantized(quantized)
    print(f"\nload average: {env['loadavg_start'][0]:.2f} at the start, {env['loadavg_end'][0]:.2f} at the end; "
          f"logs in {logs}")
    if args.json:
        summary = {
            "environment": env,
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "checkpoint": str(ckpt),
            "results": [{**asdict(r.config), "export_s": r.export_s, "export_detail": r.export_detail,
                         "error": r.error, **r.timing} for r in results],
            "targets": checks,
            "ceiling": ceiling,
            "quantized": quantized,
        }
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"results written to {args.json}")
    if not args.keep_exports:
        for r in results:
            shutil.rmtree(out_dir[r.config.name], ignore_errors=True)
    return 1 if any(r.config.kind == "hfexport" and not r.ok for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
