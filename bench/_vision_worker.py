"""The sides of bench/bench_vision.py. Prints one JSON line.

  build DIR SEED                      (the optimum venv: the transformers optimum-onnx pins)
      a CLIPModel checkpoint of clip-vit-base-patch32's shapes with random weights, float32.
  export-transformers CKPT OUT        (the main venv)
      transformers.exporters: OnnxExporter().export(model, inputs, OnnxConfig(dynamic=True)) and
      save_pretrained, the checkpoint loaded in float32, inputs one text and two images.
  time hfexport|onnx DIR BATCH REPEATS (the main venv)
      one short text and BATCH random 224x224 images per call: hfexport's ExportedModel (the default
      path users call) or a plain onnxruntime session over DIR/model.onnx (optimum's export);
      median seconds per call after a warm-up.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

CLIP_VIT_BASE_PATCH32 = dict(
    text_config=dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                     num_attention_heads=8, max_position_embeddings=77),
    vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                       image_size=224, patch_size=32),
    projection_dim=512)


def inputs(batch: int) -> dict:
    rng = np.random.default_rng(0)
    ids = np.array([[49406, 320, 1125, 539, 320, 2368, 49407]], np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids),
            "pixel_values": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}


def build(folder: str, seed: int) -> dict:
    import torch
    import transformers

    torch.manual_seed(seed)
    model = transformers.CLIPModel(transformers.CLIPConfig(**CLIP_VIT_BASE_PATCH32))
    model.eval().save_pretrained(folder, safe_serialization=True)
    return {"parameters": sum(p.numel() for p in model.parameters())}


def export_transformers(ckpt: str, out: str) -> dict:
    import torch
    from transformers import CLIPModel
    from transformers.exporters import OnnxConfig, OnnxExporter

    model = CLIPModel.from_pretrained(ckpt, dtype=torch.float32).eval()
    exported = OnnxExporter().export(model, {k: torch.from_numpy(v) for k, v in inputs(2).items()},
                                     config=OnnxConfig(dynamic=True))
    exported.save_pretrained(out)
    return {"saved": sorted(p.name for p in Path(out).iterdir())}


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def time_side(kind: str, folder: str, batch: int, repeats: int) -> dict:
    feeds = inputs(batch)
    if kind == "hfexport":
        from hfexport import ExportedModel

        model = ExportedModel(folder)
        run = lambda: model(**feeds)  # noqa: E731
    else:
        import onnxruntime as ort

        session = ort.InferenceSession(str(Path(folder) / "model.onnx"))
        names = {i.name for i in session.get_inputs()}
        run = lambda: session.run(None, {k: v for k, v in feeds.items() if k in names})  # noqa: E731
    seconds = median_time(run, repeats)
    return {"seconds": seconds, "images_per_s": batch / seconds}


def main() -> None:
    task = sys.argv[1]
    if task == "build":
        result = build(sys.argv[2], int(sys.argv[3]))
    elif task == "export-transformers":
        result = export_transformers(sys.argv[2], sys.argv[3])
    else:
        result = time_side(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
