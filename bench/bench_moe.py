"""MoE decode benchmark: hfexport vs transformers eager on a Qwen3-30B-A3B-shaped checkpoint cut to
a few layers, and the cost of a decode step at top-k = 2 vs 8 experts.

What it measures, in one run, each timing in its own process (bench/_generate_worker.py):

  checkpoint  Qwen3-30B-A3B's shapes (hidden 2048, 32 heads / 4 kv heads of 128, 128 experts of 768,
              vocab 151936, untied head) with --layers decoder layers, random bf16 weights stored
              per expert as the Hub has them (mlp.experts.{e}.gate_proj / up_proj / down_proj).
              Built once under --workdir. The same weights with num_experts_per_tok = 2 and 8.
  hfexport    `hfexport export CKPT -o OUT --for-generation` (float32, the default ort-gqa profile:
              onnxruntime's MoE kernel), timed through hfexport's runner.
  eager       the same checkpoint in transformers (float32), a DynamicCache loop.

Reported: decode tokens/s and ms per step of each, hfexport / eager; and, from the two top-k
points, the per-step cost of one more routed expert (in all layers) and the fixed rest, set against
what a dense pass over all the experts would cost: a step must grow with k, not with the number of
experts. Each step reads the non-expert weights plus k experts per layer: the printed bytes per
step and the measured streaming bandwidth give the physical bound.

  .venv/bin/python bench/bench_moe.py --hfexport build/dev/hfexport            # 2 layers
  .venv/bin/python bench/bench_moe.py --layers 4 --new-tokens 64

This is a benchmark, not a test: it fails only when a step fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_export import default_hfexport, write_random_safetensors  # noqa: E402

WORKER = Path(__file__).resolve().parent / "_generate_worker.py"


def qwen3_30b_a3b_config(layers: int, top_k: int) -> dict:
    return {
        "hidden_size": 2048, "num_hidden_layers": layers, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
        "num_experts_per_tok": top_k, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 40960,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": False,
        "bos_token_id": 151643, "eos_token_id": 151645, "architectures": ["Qwen3MoeForCausalLM"], "dtype": "bfloat16",
    }


def hub_tensor_specs(config) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of a per-expert Qwen3-MoE checkpoint, as the Hub stores it."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    specs = []
    for name, t in model.state_dict().items():
        if name.endswith("mlp.experts.gate_up_proj"):
            e, two_i, h = t.shape
            base = name.removesuffix("gate_up_proj")
            for i in range(e):
                specs += [(f"{base}{i}.gate_proj.weight", (two_i // 2, h)), (f"{base}{i}.up_proj.weight", (two_i // 2, h))]
        elif name.endswith("mlp.experts.down_proj"):
            e, h, inter = t.shape
            base = name.removesuffix("down_proj")
            specs += [(f"{base}{i}.down_proj.weight", (h, inter)) for i in range(e)]
        else:
            specs.append((name, tuple(t.shape)))
    return sorted(specs)


def ensure_checkpoints(workdir: Path, layers: int, seed: int, top_ks) -> dict[int, Path]:
    """One weight file; a checkpoint directory per top-k (config.json differs, the weights are linked)."""
    from transformers import AutoConfig

    base = workdir / f"qwen3-30b-a3b-{layers}L-seed{seed}"
    stamp = base / ".bench-complete"
    if not stamp.exists():
        print(f"checkpoint: building {base} ...", flush=True)
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        config = AutoConfig.for_model("qwen3_moe", **qwen3_30b_a3b_config(layers, 8))
        write_random_safetensors(base / "model.safetensors", hub_tensor_specs(config), seed)
        stamp.write_text("ok\n")
    out = {}
    for k in top_ks:
        d = workdir / f"{base.name}-top{k}"
        d.mkdir(exist_ok=True)
        AutoConfig.for_model("qwen3_moe", **qwen3_30b_a3b_config(layers, k)).save_pretrained(d)
        link = d / "model.safetensors"
        if not link.exists():
            link.symlink_to(base / "model.safetensors")
        out[k] = d
    return out


def worker(result: Path, *args) -> dict:
    proc = subprocess.run([sys.executable, str(WORKER), "--result", str(result), *map(str, args)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args[:2]} failed:\n{proc.stderr[-3000:]}")
    return json.loads(result.read_text())


def step_bytes(layers: int, k: int) -> dict:
    """float32 bytes one decode step reads: attention, norms, router, k experts per layer, embeddings row, head."""
    h, heads, kv, d, inter, experts, vocab = 2048, 32, 4, 128, 768, 128, 151936
    attention = h * heads * d * 2 + h * kv * d * 2
    expert = 3 * inter * h
    fixed = layers * (attention + experts * h) + vocab * h
    return {"fixed": 4 * fixed, "expert": 4 * layers * expert, "step": 4 * (fixed + k * layers * expert),
            "dense_all_experts": 4 * (fixed + experts * layers * expert)}


def main(argv=None) -> int:
    repo = Path(__file__).resolve().parent.parent
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/hfexport-bench"))
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hfexport", type=Path, default=default_hfexport(repo))
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    logs = args.workdir / "logs"
    logs.mkdir(exist_ok=True)
    top_ks = (2, 8)
    ckpts = ensure_checkpoints(args.workdir, args.layers, args.seed, top_ks)
    timing = ["--vocab-size", 151936, "--prompt-len", args.prompt_len, "--new-tokens", args.new_tokens,
              "--repeats", args.repeats]
    results: dict = {"layers": args.layers, "runs": {}}
    bw = worker(logs / "moe-bandwidth.json", "bandwidth", "--tmp-dir", args.workdir)
    results["bandwidth_gb_s"] = bw["gb_s"]
    for k in top_ks:
        out = args.workdir / f"out-moe-top{k}"
        start = time.perf_counter()
        subprocess.run([str(args.hfexport), "export", ckpts[k], "-o", out, "--overwrite", "--for-generation"],
                       check=True, capture_output=True)
        export_s = time.perf_counter() - start
        ours = worker(logs / f"moe-hfexport-top{k}.json", "time", "hfexport", out, *timing)
        shutil.rmtree(out, ignore_errors=True)  # ~7 GB per export at 2 layers
        eager = worker(logs / f"moe-eager-top{k}.json", "time", "eager", ckpts[k], *timing, "--torch-attn", "eager")
        results["runs"][k] = {"export_s": export_s, "hfexport": ours, "eager": eager, "bytes": step_bytes(args.layers, k)}

    print(f"\ncheckpoint: Qwen3-30B-A3B shapes, {args.layers} layers, float32; batch 1, "
          f"prompt {args.prompt_len}, {args.new_tokens} new tokens, median of {args.repeats}")
    print(f"{'top-k':>5}  {'hfexport tok/s':>14}  {'ms/step':>8}  {'eager tok/s':>11}  {'ms/step':>8}  "
          f"{'ratio':>6}  {'GB/step':>7}  {'% of bound':>10}  {'same tokens':>11}")
    step_ms = {}
    for k, r in results["runs"].items():
        ours, eager = r["hfexport"]["decode_tok_s_median"], r["eager"]["decode_tok_s_median"]
        step_ms[k] = 1000 / ours
        gb = r["bytes"]["step"] / 1e9
        bound = results["bandwidth_gb_s"] / gb if results["bandwidth_gb_s"] else float("nan")
        same = r["hfexport"]["tokens"] == r["eager"]["tokens"]
        print(f"{k:>5}  {ours:>14.2f}  {1000 / ours:>8.1f}  {eager:>11.2f}  {1000 / eager:>8.1f}  "
              f"{ours / eager:>5.2f}x  {gb:>7.2f}  {100 * ours / bound:>9.0f}%  {str(same):>11}")
    (k1, k2) = top_ks
    per_expert = (step_ms[k2] - step_ms[k1]) / (k2 - k1)
    fixed = step_ms[k1] - k1 * per_expert
    dense = fixed + 128 * per_expert
    results["scaling"] = {"ms_per_routed_expert": per_expert, "ms_fixed": fixed, "ms_if_all_128_experts": dense}
    print(f"\nstep time = {fixed:.1f} ms + k x {per_expert:.2f} ms (from top-{k1} and top-{k2}); "
          f"bytes say + k x {results['runs'][k1]['bytes']['expert'] / 1e6:.0f} MB of experts.")
    print(f"a dense pass over all 128 experts would take ~{dense:.0f} ms per step "
          f"({dense / step_ms[k2]:.1f}x the top-{k2} step): the step grows with k, not with the expert count.")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
