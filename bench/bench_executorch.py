"""Benchmark .pte exports against transformers.exporters' ExecutorchExporter (XNNPACK), in one run.

1. Export (the Qwen3-0.6B-shaped bfloat16 checkpoint of the other benchmarks, 28 layers, to a
   float32 static-cache generation program, max_cache_len 128): wall time and peak RSS of
   `hfexport export --format executorch --for-generation --static-cache` (the whole process,
   median of three) and of transformers' `ExecutorchExporter().export_for_generation(...)` +
   `save_pretrained` (timed after the model is loaded; peak RSS of its whole process), each in a
   fresh child process.
2. Decode (batch 1, float32, a 32-token prompt, then greedy steps): tokens per second of each
   program in ExecuTorch's runtime (the median of `--repeats` runs, the programs alternating),
   through the same Python loop: ours keeps the cache in the
   method (mutable buffers), theirs takes the cache as inputs and returns it (fed back each step,
   as their docs' Python loop does), plus each as a fraction of the read-bandwidth ceiling (a
   batch-1 step reads every weight once). Greedy tokens are compared with transformers eager.

`--weights int4` (`int8`: the same with per-channel 8-bit weights, torchao `weight_dtype=torch.int8,
weight_granularity=PerAxis(0)`): both programs with 4-bit linears as ExecuTorch's 8da4w (XNNPACK's blockwise
4-bit weights, group 32, int8 activations per token): ours `--quantize int4`; theirs torchao's
`quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4,
weight_granularity=PerGroup(32)))` (+ `unwrap_tensor_subclass`, without which their exporter's
`model.to("cpu")` fails) before the same `export_for_generation`. Their scales and ours differ
(theirs signed, ours positive for XNNPACK), so the tokens are compared between the two, not with
eager; the ceiling counts the linears' 4-bit codes and bfloat16 scales.

optimum-executorch (`--optimum-python`, default `bench/.venv-optimum/bin/python` when
`bench/setup_optimum.sh` made it: optimum-executorch 1.1.0 pins transformers 5.0.0rc1, so it lives
in a venv of its own with the same torch and executorch): `optimum-cli export executorch --recipe
xnnpack --use_custom_sdpa --use_custom_kv_cache --max_seq_len 128` (its recommended flags; `--qlinear
8da4w --qlinear_group_size 32` or `--qlinear 8da8w` for the quantized rows), timed as a whole process
(loading included), and its `model.pte` (`forward(input_ids, cache_position)`, the cache inside,
ExecuTorch's custom sdpa / update_cache kernels, which its loop loads from the wheel's
`custom_ops` library) in the same kind of loop: one prefill call, then greedy steps.

A second program of ours, `--executorch-kernels hfexport` (attention in hfexport's kernel library,
which reads the cache in place; optimum's counterpart is its custom_sdpa), decodes in the same
alternation as `hfexport+kernels` when that library is built (beside `--hfexport`'s build, or in
the venv's hfexport package).

  .venv/bin/python bench/bench_executorch.py [--layers 28] [--weights fp32|int4|int8] [--optimum-python PY]

A benchmark, not a test: it fails only when something cannot run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(os.environ.get("HFEXPORT_BENCH_DIR", "/tmp/hfexport-bench"))
PROMPT, STEPS, MAX_CACHE_LEN = 32, 64, 128

sys.path.insert(0, str(Path(__file__).parent))
from bench_export import ensure_checkpoint  # noqa: E402
from bench_pt2 import child, peak_rss_of, read_bandwidth, warm  # noqa: E402

TRANSFORMERS_EXPORT = """
import json, sys, time, torch
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.exporters import ExecutorchConfig, ExecutorchExporter
start = time.perf_counter()
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32, attn_implementation="sdpa").eval()
if sys.argv[3] in ("int4", "int8"):
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.utils import unwrap_tensor_subclass
    weights = (dict(weight_dtype=torch.int4, weight_granularity=PerGroup(32)) if sys.argv[3] == "int4"
               else dict(weight_dtype=torch.int8, weight_granularity=PerAxis(0)))
    quantize_(model, Int8DynamicActivationIntxWeightConfig(**weights))
    unwrap_tensor_subclass(model)
ids = torch.randint(0, 1000, (1, 8))
t = time.perf_counter()
exported = ExecutorchExporter().export_for_generation(
    model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, config=ExecutorchConfig(backend="xnnpack"),
    generation_config=GenerationConfig(cache_implementation="static", max_cache_len=%d, max_new_tokens=2,
                                       do_sample=False, pad_token_id=0))
exported.save_pretrained(sys.argv[2])
print(json.dumps({"wall": time.perf_counter() - t, "load": t - start}))
""" % MAX_CACHE_LEN

DECODE = """
import json, sys, time, numpy as np, torch
sys.path.insert(0, sys.argv[4])
kind, ckpt, work = sys.argv[1], sys.argv[2], sys.argv[3]
PROMPT, STEPS, N = %d, %d, %d
torch.manual_seed(0)
prompt = torch.randint(0, 1000, (1, PROMPT))
if kind == "eager":
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="sdpa").eval()
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=STEPS + 1, do_sample=False,
                             eos_token_id=None, pad_token_id=0, cache_implementation="static")
    print(json.dumps({"tokens": out[0, PROMPT:].tolist(), "tok_s": None}))
    sys.exit(0)
if kind == "hfexport":
    import hfexport
    runner = hfexport.open_runner(work)
    ids = prompt.numpy()
    logits = runner.prefill(ids, np.ones_like(ids), STEPS + 1)
    tokens, times = [int(logits[0].argmax())], []
    for _ in range(STEPS):
        t = time.perf_counter(); logits = runner.step(np.array([tokens[-1]])); times.append(time.perf_counter() - t)
        tokens.append(int(logits[0].argmax()))
else:  # transformers' decode.pte: the cache goes in as inputs and comes back as the first outputs
    from executorch.runtime import Runtime
    method = Runtime.get().load_program(work + "/decode.pte").load_method("forward")
    meta = method.metadata
    caches = []
    for i in range(3, meta.num_inputs()):
        m = meta.input_tensor_meta(i)
        dtype = {6: torch.float32, 4: torch.int64}[int(m.dtype())]
        caches.append(torch.zeros(tuple(m.sizes()), dtype=dtype))
    def step(token, pos):
        global caches
        mask = (torch.arange(N) <= pos)[None, None, None, :]
        out = method.execute([torch.tensor([[token]]), mask, torch.tensor([[pos]]), *caches])
        caches = list(out[: len(caches)])
        return out[len(caches)]
    for pos in range(PROMPT - 1):
        step(int(prompt[0, pos]), pos)
    logits = step(int(prompt[0, -1]), PROMPT - 1)
    tokens, times = [int(logits[0, -1].argmax())], []
    for i in range(STEPS):
        t = time.perf_counter(); logits = step(tokens[-1], PROMPT + i); times.append(time.perf_counter() - t)
        tokens.append(int(logits[0, -1].argmax()))
print(json.dumps({"tokens": tokens, "tok_s": STEPS / sum(times)}))
""" % (PROMPT, STEPS, MAX_CACHE_LEN)


OPTIMUM_DECODE = """
import json, sys, time, torch
from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401 - llama::custom_sdpa, update_cache
from executorch.kernels import quantized  # noqa: F401
from executorch.runtime import Runtime
PROMPT, STEPS = %d, %d
torch.manual_seed(0)
prompt = torch.randint(0, 1000, (1, PROMPT))
method = Runtime.get().load_program(sys.argv[1] + "/model.pte").load_method("forward")
# As our runner does (executorch_runner.execute_without_clones): outputs not cloned, argmax in
# numpy, so that no torch op wakes OpenMP threads that would spin on XNNPACK's cores.
run = (lambda feeds: method._method(feeds, clone_outputs=False)) if hasattr(method, "_method") else method.execute
logits = run([prompt, torch.arange(PROMPT)])[0]
tokens, times = [int(logits[0, -1].numpy().argmax())], []
for i in range(STEPS):
    t = time.perf_counter()
    logits = run([torch.tensor([[tokens[-1]]]), torch.tensor([PROMPT + i])])[0]
    tokens.append(int(logits[0, -1].numpy().argmax()))
    times.append(time.perf_counter() - t)
print(json.dumps({"tokens": tokens, "tok_s": STEPS / sum(times)}))
""" % (PROMPT, STEPS)


def optimum_export_cmd(python: Path, ckpt: Path, out: Path, weights: str) -> list[str]:
    quantize = {"int4": ["--qlinear", "8da4w", "--qlinear_group_size", "32"], "int8": ["--qlinear", "8da8w"]}
    return [str(python), "-m", "optimum.commands.optimum_cli", "export", "executorch", "--model", str(ckpt),
            "--task", "text-generation", "--recipe", "xnnpack", "--use_custom_sdpa", "--use_custom_kv_cache",
            "--max_seq_len", str(MAX_CACHE_LEN), "--output_dir", str(out), *quantize.get(weights, [])]


def optimum_decode(python: Path, work: Path) -> dict:
    proc = subprocess.run([str(python), "-c", OPTIMUM_DECODE, str(work)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def quantized_step_bytes(ckpt: Path, weights: str) -> int:
    """What an 8da4w (8da8w) step reads: every linear (the tied embedding as the head) as 4-bit
    codes plus one bfloat16 scale per 32 weights (8-bit codes, per-channel scales); the norms are
    negligible, the embedding is one row."""
    with open(ckpt / "model.safetensors", "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    count = 0
    tied = "lm_head.weight" not in header
    for name, t in header.items():
        if name != "__metadata__" and len(t["shape"]) == 2 and (tied or "embed_tokens" not in name):
            count += t["shape"][0] * t["shape"][1]
    return count * 9 // 16 if weights == "int4" else count  # 4 + 16/32 bits; 8 bits


def kernels_library(hfexport: Path) -> Path | None:
    """hfexport's ExecuTorch kernel library: beside the binary's build (a dev build), or in the
    hfexport package of the venv the binary is installed in."""
    name = "libhfexport_executorch_kernels.so"
    found = [hfexport.parent / "python" / "hfexport" / name,
             *hfexport.parent.parent.glob(f"lib/python3*/site-packages/hfexport/{name}")]
    return next((f for f in found if f.is_file()), None)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hfexport", type=Path, default=REPO / ".venv" / "bin" / "hfexport")
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--weights", choices=("fp32", "int4", "int8"), default="fp32")
    p.add_argument("--optimum-python", type=Path, default=REPO / "bench" / ".venv-optimum" / "bin" / "python",
                   help="a Python with optimum-executorch (bench/setup_optimum.sh); skipped when absent")
    p.add_argument("--peers", default="transformers,optimum",
                   help="which peers to run, of transformers,optimum (optimum only when its Python exists)")
    p.add_argument("--repeats", type=int, default=3, help="decode runs of each program, alternating (median)")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    asked = set(args.peers.split(","))
    optimum = args.optimum_python if "optimum" in asked and args.optimum_python.exists() else None
    peers = tuple(k for k, on in (("transformers", "transformers" in asked), ("optimum", optimum)) if on)
    env_python = str(REPO / "python")
    ckpt = ensure_checkpoint(BENCH, args.layers, 0, False)
    size = (ckpt / "model.safetensors").stat().st_size
    quantized = args.weights in ("int4", "int8")  # 8da4w or 8da8w
    kind_of = {"int4": "8da4w", "int8": "8da8w"}.get(args.weights, "float32")
    with tempfile.TemporaryDirectory(prefix="bench-executorch-") as tmp:
        work = Path(tmp)
        dirs = {"hfexport": work / "ours", "transformers": work / "theirs", "optimum": work / "optimum"}
        warm(ckpt / "model.safetensors")
        cmd = [str(args.hfexport), "export", str(ckpt), "-o", str(dirs["hfexport"]), "--format", "executorch",
               "--for-generation", "--static-cache", "--max-cache-len", str(MAX_CACHE_LEN), "--overwrite",
               *(["--quantize", args.weights] if quantized else [])]
        wall, rss, _ = sorted(peak_rss_of(cmd) for _ in range(3))[1]  # the median of three
        export = {"hfexport": {"wall_s": wall, "peak_rss": rss}}
        ours = ("hfexport",)
        if library := kernels_library(args.hfexport):
            os.environ["HFEXPORT_EXECUTORCH_KERNELS"] = str(library)
            dirs["hfexport+kernels"] = work / "ours-kernels"
            subprocess.run([*cmd[:cmd.index("-o") + 1], str(dirs["hfexport+kernels"]), *cmd[cmd.index("-o") + 2:],
                            "--executorch-kernels", "hfexport"], check=True, capture_output=True)
            ours += ("hfexport+kernels",)
        if "transformers" in peers:
            wall, rss, out = peak_rss_of([sys.executable, "-c", TRANSFORMERS_EXPORT, str(ckpt), str(dirs["transformers"]),
                                          args.weights])
            theirs = json.loads(out.strip().splitlines()[-1])
            export["transformers"] = {"wall_s": theirs["wall"], "load_s": theirs["load"], "peak_rss": rss}
        if optimum:
            wall, rss, _ = peak_rss_of(optimum_export_cmd(optimum, ckpt, dirs["optimum"], args.weights))
            export["optimum"] = {"wall_s": wall, "peak_rss": rss}
        files = {k: sum(f.stat().st_size for f in dirs[k].glob("*.pte")) for k in export}
        how = {"hfexport": "(median of 3, whole process)", "transformers": "export + save (model loaded first)",
               "optimum": "optimum-cli, whole process (load included)"}
        print(f"export ({args.layers} layers, bf16 checkpoint {size / 2**30:.2f} GiB in the page cache, to {kind_of} "
              f"static-cache programs, max_cache_len {MAX_CACHE_LEN}, XNNPACK):")
        for kind, e in export.items():
            print(f"  {kind:13s} {e['wall_s']:7.2f} s {how[kind]:42s} peak RSS {e['peak_rss'] / 2**20:7.0f} MiB "
                  f"({100 * e['peak_rss'] / size:.1f} % of the checkpoint)  .pte {files[kind] / 2**30:.2f} GiB")
        mine = export["hfexport"]
        for kind in peers:
            print(f"  ratio: {export[kind]['wall_s'] / mine['wall_s']:.1f}x faster than {kind}; "
                  f"{export[kind]['peak_rss'] / mine['peak_rss']:.1f}x less peak RSS")
        rows = {} if quantized else {"eager": child(DECODE, "eager", str(ckpt), str(work), env_python)[0]}
        # Each program's decode `repeats` times, the programs alternating (a shared machine's speed
        # drifts): the median run counts, the others are printed.
        runs: dict[str, list[dict]] = {}
        for _ in range(args.repeats):
            for kind in ours + peers:
                if kind == "optimum":
                    runs.setdefault(kind, []).append(optimum_decode(optimum, dirs["optimum"]))
                else:
                    loop = "hfexport" if kind in ours else kind
                    runs.setdefault(kind, []).append(child(DECODE, loop, str(ckpt), str(dirs[kind]), env_python)[0])
        for kind, each in runs.items():
            rows[kind] = dict(sorted(each, key=lambda r: r["tok_s"])[len(each) // 2], runs=[r["tok_s"] for r in each])
        step_bytes = quantized_step_bytes(ckpt, args.weights) if quantized else size * 2  # the weights a step reads
        ceiling = read_bandwidth() / step_bytes
        print(f"decode ({kind_of}, batch 1, prompt {PROMPT}, {STEPS} steps, ExecuTorch's runtime; ceiling "
              f"{ceiling:.1f} tok/s = one core's read bandwidth / {step_bytes / 2**30:.2f} GiB):")
        for kind in ours + peers:
            print(f"  {kind:16s} {rows[kind]['tok_s']:7.2f} tok/s  ({100 * rows[kind]['tok_s'] / ceiling:.0f} % of "
                  f"the ceiling; median of {', '.join(f'{t:.2f}' for t in rows[kind]['runs'])})")
        for mine in ours:
            for kind in peers:
                print(f"  ratio: {mine} {rows[mine]['tok_s'] / rows[kind]['tok_s']:.2f}x {kind}'s program")
        if quantized:
            for kind in peers:
                same = sum(a == b for a, b in zip(rows["hfexport"]["tokens"], rows[kind]["tokens"]))
                print(f"  greedy tokens the same as {kind}'s: {same} of {len(rows['hfexport']['tokens'])} "
                      "(different quantization scales)")
        else:
            want = rows["eager"]["tokens"]
            print(f"  greedy tokens identical to transformers eager: "
                  f"{ {k: rows[k]['tokens'] == want for k in ours + peers} }")
        result = {"checkpoint_bytes": size, "export": export, "files": files, "ceiling_tok_s": ceiling,
                  "decode": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
