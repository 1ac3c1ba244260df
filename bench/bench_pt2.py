"""Benchmark .pt2 exports against transformers.exporters' DynamoExporter, in one run.

1. Export (the Qwen3-0.6B-shaped bfloat16 checkpoint of the other benchmarks, 28 layers): wall
   time and peak RSS of `hfexport export --format pt2 --dtype bfloat16` (the whole process) and of
   transformers' `DynamoExporter().export(...)` + `save_pretrained` (timed after the model is
   loaded; peak RSS of its whole process), each in a fresh child process.
2. Decode (batch 1, static cache, a 32-token prompt, then greedy steps; float32): tokens per second
   of hfexport's program compiled by AOTInductor (`--aot`), of transformers eager (the same loop
   over a StaticCache), and of transformers' own DynamoExporter decode program compiled by
   AOTInductor, plus each as a fraction of the read-bandwidth ceiling (a batch-1 step reads every
   weight once). The greedy tokens of all three are compared.

  .venv/bin/python bench/bench_pt2.py                       # export 28 layers, decode 2 layers
  .venv/bin/python bench/bench_pt2.py --decode-layers 28    # decode on the full depth (long AOTI compiles)

A benchmark, not a test: it fails only when something cannot run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(os.environ.get("HFEXPORT_BENCH_DIR", "/tmp/hfexport-bench"))
PROMPT, STEPS, MAX_CACHE_LEN = 32, 64, 128


def child(code: str, *args: str) -> tuple[dict, int]:
    """Runs `code` in a fresh Python; returns (the JSON it prints last, its peak RSS bytes)."""
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return json.loads(proc.stdout.strip().splitlines()[-1]), usage.ru_maxrss * 1024


def peak_rss_of(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of a command, measured by a fresh Python parent of its own."""
    code = ("import json, resource, subprocess, sys, time; t = time.perf_counter(); "
            "p = subprocess.run(sys.argv[1:], check=True, stdout=subprocess.PIPE, text=True); "
            "print(json.dumps({'wall': time.perf_counter() - t, 'out': p.stdout, "
            "'rss': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))")
    out, _ = child(code, *cmd)
    return out["wall"], out["rss"], out["out"]


def warm(path: Path) -> None:
    """Reads a checkpoint into the page cache, so that neither side pays for the disk."""
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


TRANSFORMERS_EXPORT = """
import json, resource, sys, time, torch
from transformers import AutoModelForCausalLM
from transformers.exporters import DynamoConfig, DynamoExporter
start = time.perf_counter()
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16, attn_implementation="sdpa").eval()
ids = torch.randint(0, 1000, (1, 16))
t = time.perf_counter()
exported = DynamoExporter().export(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids), "use_cache": False},
                                   config=DynamoConfig(dynamic=True))
exported.save_pretrained(sys.argv[2])
print(json.dumps({"wall": time.perf_counter() - t, "load": t - start}))
"""

DECODE = """
import copy, json, sys, time, torch
sys.path.insert(0, sys.argv[4])
from transformers import AutoModelForCausalLM, GenerationConfig, StaticCache
kind, ckpt, work = sys.argv[1], sys.argv[2], sys.argv[3]
PROMPT, STEPS, N = %d, %d, %d
torch.manual_seed(0)
prompt = torch.randint(0, 1000, (1, PROMPT))
mask_of = lambda pos: (torch.arange(N)[None, :] <= pos[:, None])[None, None]

def loop(step):
    ids, pos, tokens, times = prompt, torch.arange(PROMPT), [], []
    for i in range(STEPS + 1):
        t = time.perf_counter()
        logits = step(ids, mask_of(pos), pos[None])
        tok = int(logits[0, -1].argmax())
        if i:
            times.append(time.perf_counter() - t)
        tokens.append(tok)
        ids, pos = torch.tensor([[tok]]), pos[-1:] + 1
    return tokens, STEPS / sum(times)

with torch.no_grad():
    if kind == "hfexport":
        import hfexport, numpy as np
        runner = hfexport.open_runner(work)
        ids = prompt.numpy()
        t = time.perf_counter(); logits = runner.prefill(ids, np.ones_like(ids), STEPS + 1)
        tokens, times = [int(logits[0].argmax())], []
        for _ in range(STEPS):
            t = time.perf_counter(); logits = runner.step(np.array([tokens[-1]])); times.append(time.perf_counter() - t)
            tokens.append(int(logits[0].argmax()))
        rate = STEPS / sum(times)
    else:
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="sdpa").eval()
        if kind == "eager":
            cache = StaticCache(config=model.config, max_cache_len=N)
            step = lambda ids, mask, pos: model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                                past_key_values=cache).logits
            tokens, rate = loop(step)
        else:  # transformers' own DynamoExporter program, compiled by AOTInductor
            from transformers.exporters import DynamoConfig, DynamoExporter
            from transformers.exporters.exporter_dynamo import register_pytree_node
            register_pytree_node(StaticCache)
            exported = DynamoExporter().export_for_generation(
                model, {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}, config=DynamoConfig(dynamic=True),
                generation_config=GenerationConfig(cache_implementation="static", max_cache_len=N, do_sample=False,
                                                   max_new_tokens=2, pad_token_id=0), multi_token_decode=True)
            exported.save_pretrained(work)
            program = torch.export.load(work + "/decode.pt2")
            package = torch._inductor.aoti_compile_and_package(program, package_path=work + "/decode.aoti.pt2")
            compiled = torch._inductor.aoti_load_package(package)
            _, example = program.example_inputs
            cache = copy.deepcopy(example["cache"]); cache.reset()
            step = lambda ids, mask, pos: compiled(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache).logits
            tokens, rate = loop(step)
print(json.dumps({"tokens": tokens, "tok_s": rate}))
""" % (PROMPT, STEPS, MAX_CACHE_LEN)


def read_bandwidth() -> float:
    """Bytes per second one core streams from memory (a large numpy sum), the batch-1 ceiling."""
    import numpy as np

    a = np.ones(256 * 2**20 // 8)
    a.sum()
    t = time.perf_counter()
    for _ in range(8):
        a.sum()
    return 8 * a.nbytes / (time.perf_counter() - t)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hfexport", type=Path, default=REPO / ".venv" / "bin" / "hfexport")
    p.add_argument("--export-layers", type=int, default=28)
    p.add_argument("--decode-layers", type=int, default=2)
    p.add_argument("--skip-export", action="store_true")
    p.add_argument("--skip-decode", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    result: dict = {}
    env_python = str(REPO / "python")
    with tempfile.TemporaryDirectory(prefix="bench-pt2-") as tmp:
        work = Path(tmp)
        if not args.skip_export:
            ckpt = BENCH / f"qwen3-0.6b-{args.export_layers}L-seed0"
            size = (ckpt / "model.safetensors").stat().st_size
            warm(ckpt / "model.safetensors")
            runs = [peak_rss_of([str(args.hfexport), "export", str(ckpt), "-o", str(work / "ours"), "--format", "pt2",
                                 "--dtype", "bfloat16", "--overwrite"]) for _ in range(3)]
            ours = sorted(runs)[1]  # the median of three
            wall, rss, out = peak_rss_of([sys.executable, "-c", TRANSFORMERS_EXPORT, str(ckpt), str(work / "theirs")])
            theirs = json.loads(out.strip().splitlines()[-1])
            result["export"] = {"checkpoint_bytes": size, "hfexport": {"wall_s": ours[0], "peak_rss": ours[1]},
                                "transformers": {"export_save_s": theirs["wall"], "load_s": theirs["load"],
                                                 "peak_rss": rss}}
            print(f"export ({args.export_layers} layers, bf16 checkpoint {size / 2**30:.2f} GiB, in the page cache):")
            print(f"  hfexport      {ours[0]:7.2f} s (median of 3, whole process)  peak RSS {ours[1] / 2**20:7.0f} MiB "
                  f"({100 * ours[1] / size:.1f} % of the checkpoint)")
            print(f"  transformers  {theirs['wall']:7.2f} s export + save, {theirs['load']:.2f} s to load the model first"
                  f"  peak RSS {rss / 2**20:7.0f} MiB ({100 * rss / size:.0f} %)")
            print(f"  ratio: {theirs['wall'] / ours[0]:.1f}x faster than its export + save, "
                  f"{(theirs['wall'] + theirs['load']) / ours[0]:.1f}x than load + export + save; "
                  f"{rss / ours[1]:.1f}x less peak RSS")

        if args.skip_decode:
            return 0
        ckpt = BENCH / f"qwen3-0.6b-{args.decode_layers}L-seed0"
        out = work / "decode"
        subprocess.run([str(args.hfexport), "export", str(ckpt), "-o", str(out), "--format", "pt2", "--for-generation",
                        "--static-cache", "--max-cache-len", str(MAX_CACHE_LEN), "--aot"], check=True)
        rows = {}
        for kind in ("hfexport", "eager", "transformers-aoti"):
            rows[kind], _ = child(DECODE, kind, str(ckpt), str(out if kind == "hfexport" else work / kind), env_python)
        weights = (ckpt / "model.safetensors").stat().st_size * 2  # read as float32
        ceiling = read_bandwidth() / weights
        print(f"decode ({args.decode_layers} layers, float32, static cache {MAX_CACHE_LEN}, prompt {PROMPT}, {STEPS} "
              f"steps; ceiling {ceiling:.1f} tok/s = one core's read bandwidth / {weights / 2**30:.2f} GiB):")
        for kind, row in rows.items():
            print(f"  {kind:18s} {row['tok_s']:7.1f} tok/s  ({100 * row['tok_s'] / ceiling:.0f} % of the ceiling)")
        base = rows["hfexport"]["tok_s"]
        print(f"  ratio: {base / rows['eager']['tok_s']:.2f}x transformers eager, "
              f"{base / rows['transformers-aoti']['tok_s']:.2f}x transformers' AOTInductor program")
        same = {k: r["tokens"] == rows["eager"]["tokens"] for k, r in rows.items()}
        print(f"  greedy tokens identical to eager: {same}")
        result["decode"] = {"layers": args.decode_layers, "ceiling_tok_s": ceiling, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
