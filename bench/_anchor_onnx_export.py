"""Anchor for bench_export.py: export a causal-LM checkpoint to ONNX with PyTorch/transformers.

Runs in its own process (so the benchmark can take its peak RSS) and exports the same graph
hfexport does: inputs input_ids / attention_mask / position_ids with a dynamic batch and sequence,
output logits, no KV cache, float32 weights and compute. Two code paths:

  exporters   transformers.exporters.OnnxExporter (torch.export + torch.onnx, the library's own
              ONNX exporter), saved with ExportedModel.save_pretrained (model.onnx + model.onnx.data)
  torch-onnx  plain torch.onnx.export(..., dynamo=True) on a thin wrapper returning logits,
              saved with external data

Usage: python bench/_anchor_onnx_export.py CKPT_DIR OUT_DIR --method exporters --result r.json

The result JSON holds the method and the import / load / export / save times in seconds.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def sample_inputs(vocab_size: int, batch: int = 2, seq: int = 16) -> dict:
    """Example inputs; batch and sequence are > 1 so torch.export does not specialise them."""
    import torch

    generator = torch.Generator().manual_seed(0)
    return {
        "input_ids": torch.randint(0, vocab_size, (batch, seq), generator=generator),
        "attention_mask": torch.ones(batch, seq, dtype=torch.int64),
        "position_ids": torch.arange(seq, dtype=torch.int64).expand(batch, seq).contiguous(),
    }


def dynamic_shapes(names) -> dict:
    """Batch and sequence dynamic on every input, and the same symbols across inputs."""
    from torch.export import Dim

    batch, sequence = Dim("batch", min=1, max=1024), Dim("sequence", min=1, max=131072)
    return {name: {0: batch, 1: sequence} for name in names}


def export_with_exporters(model, inputs: dict, out_dir: Path) -> dict:
    """transformers.exporters: OnnxExporter.export(...) then ExportedModel.save_pretrained(...)."""
    from transformers.exporters import OnnxConfig, OnnxExporter

    config = OnnxConfig(
        dynamic=True,
        dynamic_shapes=dynamic_shapes(inputs),
        prefer_deferred_runtime_asserts_over_guards=True,
    )
    start = time.perf_counter()
    exported = OnnxExporter().export(model, {**inputs, "use_cache": False}, config=config)
    export_s = time.perf_counter() - start
    start = time.perf_counter()
    exported.save_pretrained(out_dir)
    return {"export_s": export_s, "save_s": time.perf_counter() - start}


def export_with_torch_onnx(model, inputs: dict, out_dir: Path) -> dict:
    """torch.onnx.export(dynamo=True) on a wrapper that takes the three inputs positionally."""
    import torch

    class LogitsOnly(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, position_ids):
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            ).logits

    names = list(inputs)
    shapes = dynamic_shapes(names)
    start = time.perf_counter()
    with torch.no_grad():
        program = torch.onnx.export(
            LogitsOnly(model),
            tuple(inputs[name] for name in names),
            dynamo=True,
            dynamic_shapes=tuple(shapes[name] for name in names),
            input_names=names,
            output_names=["logits"],
        )
    export_s = time.perf_counter() - start
    start = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    program.save(str(out_dir / "model.onnx"), external_data=True)
    return {"export_s": export_s, "save_s": time.perf_counter() - start}


EXPORTERS = {"exporters": export_with_exporters, "torch-onnx": export_with_torch_onnx}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--method", choices=sorted(EXPORTERS), required=True)
    parser.add_argument("--result", type=Path, required=True, help="where to write the timings (JSON)")
    args = parser.parse_args()

    start = time.perf_counter()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    import_s = time.perf_counter() - start

    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32).eval()
    load_s = time.perf_counter() - start

    timings = EXPORTERS[args.method](model, sample_inputs(model.config.vocab_size), args.out_dir)
    result = {
        "method": args.method,
        "import_s": import_s,
        "load_s": load_s,
        **timings,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    args.result.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
