"""Benchmark the Python API: export a live Qwen3-0.6B-shaped model (random float32 weights) to ONNX
from one Python process with hfexport's `OnnxExporter` and with transformers.exporters'
`OnnxExporter`, on the same model object, each followed by `save_pretrained`.

For each: wall time, and the peak RSS the export added on top of the process as it stood before it
(the model included): /proc/self/clear_refs resets the peak, /proc/self/status VmHWM reads it. The
model's weights are already resident, so anything a copy of them costs shows up as added RSS.

  .venv/bin/python bench/bench_python_api.py --layers 2   # quick trial
  .venv/bin/python bench/bench_python_api.py               # full 28 layers
  .venv/bin/python bench/bench_python_api.py --validate    # also run both exports in onnxruntime

hfexport runs first: transformers.exporters leaves the process larger, which would hide what
hfexport adds. This is a benchmark, not a test: it fails only when an export fails.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path


def status_bytes(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def measured(fn):
    """(result, wall seconds, peak RSS added over the RSS before the call)."""
    before = status_bytes("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak RSS restarts from the current RSS
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start, status_bytes("VmHWM:") - before


def qwen3_0_6b(layers: int):
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(0)
    config = Qwen3Config(hidden_size=1024, num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=8,
                         head_dim=128, intermediate_size=3072, vocab_size=151936, tie_word_embeddings=True,
                         max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                         bos_token_id=151643, eos_token_id=151645)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32).eval()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--workdir", type=Path, default=None, help="where the exports go (default: a temp dir)")
    p.add_argument("--validate", action="store_true", help="run both exports in onnxruntime against eager")
    p.add_argument("--skip-transformers", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args()

    import numpy as np
    import torch

    import hfexport

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-python-api-"))
    model = qwen3_0_6b(args.layers)
    unique = {t.data_ptr(): t for t in model.state_dict().values()}  # tied embeddings counted once
    weights = sum(t.numel() * t.element_size() for t in unique.values())
    inputs = {"input_ids": torch.randint(0, 151936, (1, 16)), "attention_mask": torch.ones(1, 16, dtype=torch.long)}
    print(f"Qwen3-0.6B shape, {args.layers} layers, float32: {weights / 2**30:.2f} GiB of weights")

    rows = {}

    def ours():
        exported = hfexport.OnnxExporter().export(model, inputs, hfexport.OnnxConfig(dynamic=True), verify=False)
        exported.save_pretrained(work / "hfexport")

    _, seconds, added = measured(ours)
    rows["hfexport"] = {"wall_s": seconds, "added_rss_bytes": added}
    print(f"hfexport              {seconds:8.2f} s   +{added / 2**20:8.0f} MiB peak RSS "
          f"({100 * added / weights:.1f} % of the weights)", flush=True)

    if not args.skip_transformers:
        from transformers.exporters import OnnxConfig, OnnxExporter

        def theirs():
            exported = OnnxExporter().export(model, {**inputs, "use_cache": False}, config=OnnxConfig(dynamic=True))
            exported.save_pretrained(work / "transformers")

        _, seconds, added = measured(theirs)
        rows["transformers.exporters"] = {"wall_s": seconds, "added_rss_bytes": added}
        print(f"transformers.exporters {seconds:7.2f} s   +{added / 2**20:8.0f} MiB peak RSS "
              f"({100 * added / weights:.1f} % of the weights)")
        ours_row, theirs_row = rows["hfexport"], rows["transformers.exporters"]
        print(f"ratio: hfexport is {theirs_row['wall_s'] / ours_row['wall_s']:.1f}x faster and adds "
              f"{theirs_row['added_rss_bytes'] / max(ours_row['added_rss_bytes'], 1):.1f}x less peak RSS")

    if args.validate:
        import onnxruntime as ort

        with torch.no_grad():
            ref = model(**inputs).logits.numpy()
        feeds = {k: v.numpy() for k, v in inputs.items()}
        for name in rows:
            directory = work / ("hfexport" if name == "hfexport" else "transformers")
            onnx_file = next(directory.glob("*.onnx"))
            got = ort.InferenceSession(str(onnx_file)).run(None, feeds)[0]
            print(f"{name}: max |logits - eager| = {float(np.abs(got - ref).max()):.2e}")

    if args.json:
        args.json.write_text(json.dumps({"layers": args.layers, "weights_bytes": weights, "rows": rows}, indent=2))
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
