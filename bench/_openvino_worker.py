"""Worker for bench_openvino.py: one anchor export or one timed generation loop, in its own process.

bench_openvino.py runs every task in a fresh process (so each export's peak RSS is its own, and each
timing starts from a clean heap and its own OpenVINO thread pool). Tasks:

  export-anchor exporters CKPT OUT
      transformers.exporters' OpenVINO exporter on the checkpoint loaded in float32:
      decompose_for_generation(model, generate inputs, multi_token_decode=True) captures the
      "decode" component (a dynamic query length: it runs the prompt on an empty cache as well as
      one token at a time), and OpenVINOExporter().export(decode, its inputs,
      OpenVINOConfig(dynamic=True)) turns it into one stateful model (KV cache in ReadValue/Assign
      variables, a beam_idx input), saved with ExportedModel.save_pretrained as
      openvino_model.xml + .bin. The "prefill" component export_for_generation would also export
      is not needed by a stateful loop and is not exported (see bench_openvino.py).
  export-anchor convert-model CKPT OUT
      openvino.convert_model on a torch.export of the float32 model behind a wrapper with flat
      past/present KV tensors, made stateful with OpenVINO's MakeStateful transformation (no
      beam_idx input, batch fixed to 1 so the variables start empty), saved as openvino_model.xml + .bin.
  time hfexport|anchor PATH
      Greedy generation at batch 1 with a random prompt (the same one _generate_worker.py uses):
      a warm-up run, then --repeats timed runs, each timing the prefill (prompt in, first token's
      logits out, argmax included) and --new-tokens single-token steps (argmax included).
        hfexport  an hfexport OpenVINO export, through hfexport.open_runner(PATH, config=...)
        anchor    PATH/openvino_model.xml through a minimal stateful loop: reset_state, then feed
                  input_ids / attention_mask / position_ids / beam_idx (whichever the model takes)
      Both compile for CPU with the same properties (--ov-config): by default
      {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}, hfexport's runner default.

Every task writes its result as JSON to --result; bench_openvino.py reads it. Not meant to be run
by hand, but it can be: python bench/_openvino_worker.py --result r.json time anchor OUT --vocab-size 151936
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np

from _generate_worker import load_float32_model, prompt_ids, time_generation

# The compile properties both sides get unless --ov-config: hfexport.open_runner's own default.
DEFAULT_OV_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


# --------------------------------------------------------------------------- anchor exports


def export_with_exporters(model, ids, out: Path) -> dict:
    """transformers.exporters: the multi-token "decode" component as one stateful OpenVINO model."""
    import torch
    from transformers.exporters.exporter_openvino import OpenVINOConfig, OpenVINOExporter
    from transformers.exporters.utils import decompose_for_generation

    start = time.perf_counter()
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    components = decompose_for_generation(model, inputs, multi_token_decode=True)
    decode_model, decode_inputs = components["decode"]
    capture_s = time.perf_counter() - start
    start = time.perf_counter()
    exported = OpenVINOExporter().export(decode_model, decode_inputs, OpenVINOConfig(dynamic=True, stateful=True))
    export_s = time.perf_counter() - start
    start = time.perf_counter()
    exported.save_pretrained(out)
    return {"capture_s": capture_s, "export_s": export_s, "save_s": time.perf_counter() - start,
            "components_available": list(components), "component_exported": "decode (multi_token_decode=True)"}


def export_with_convert_model(model, ids, out: Path) -> dict:
    """openvino.convert_model on torch.export of a flat-KV wrapper, then MakeStateful."""
    import openvino as ov
    import torch
    from openvino._offline_transformations import apply_make_stateful_transformation
    from torch.export import Dim
    from transformers import DynamicCache

    config = model.config
    layers = config.num_hidden_layers
    heads, head_dim = config.num_key_value_heads, getattr(config, "head_dim", None) or (
        config.hidden_size // config.num_attention_heads)

    class FlatKV(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, position_ids, past):
            # The layers are filled directly: DynamicCache(ddp_cache_data=...) concatenates each past
            # tensor to an empty 1-D one, which the OpenVINO frontend cannot convert.
            cache = DynamicCache(config=config)
            for i, layer in enumerate(cache.layers):
                layer.lazy_initialization(past[2 * i], past[2 * i + 1])
                layer.keys, layer.values = past[2 * i], past[2 * i + 1]
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             cache=cache, use_cache=True)
            present = [t for layer in out.cache.layers for t in (layer.keys, layer.values)]
            return (out.logits, *present)

    # Sizes > 1 and all different, so torch.export specialises none of them.
    batch, seq, past_len = 2, 3, 5
    sample_ids = ids[:1, :seq].expand(batch, seq).contiguous()
    mask = torch.ones(batch, past_len + seq, dtype=torch.int64)
    positions = torch.arange(past_len, past_len + seq, dtype=torch.int64).expand(batch, seq).contiguous()
    past = [torch.zeros(batch, heads, past_len, head_dim) for _ in range(2 * layers)]
    auto = Dim.AUTO
    shapes = ({0: auto, 1: auto}, {0: auto, 1: auto}, {0: auto, 1: auto}, [{0: auto, 2: auto}] * (2 * layers))
    start = time.perf_counter()
    with torch.no_grad():
        program = torch.export.export(FlatKV(model), (sample_ids, mask, positions, past), dynamic_shapes=shapes,
                                      strict=False)
    trace_s = time.perf_counter() - start
    start = time.perf_counter()
    ov_model = ov.convert_model(program)
    names = ["input_ids", "attention_mask", "position_ids", *[f"past.{j}" for j in range(2 * layers)]]
    for port, name in zip(ov_model.inputs, names):
        port.get_tensor().set_names({name})
    for port, name in zip(ov_model.outputs, ["logits", *[f"present.{j}" for j in range(2 * layers)]]):
        port.get_tensor().set_names({name})
    # Batch fixed to 1 first: a variable's initial value has size 0 along each dynamic dimension, so
    # a dynamic batch would start as an empty batch. Only the sequence axes stay dynamic.
    ov_model.reshape({
        **{name: ov.PartialShape([1, -1]) for name in names[:3]},
        **{name: ov.PartialShape([1, heads, -1, head_dim]) for name in names[3:]},
    })
    apply_make_stateful_transformation(ov_model, {f"past.{j}": f"present.{j}" for j in range(2 * layers)})
    convert_s = time.perf_counter() - start
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov_model, str(out / "openvino_model.xml"), compress_to_fp16=False)
    return {"trace_s": trace_s, "export_s": trace_s + convert_s, "convert_s": convert_s,
            "save_s": time.perf_counter() - start}


def task_export_anchor(args) -> dict:
    loaded = load_float32_model(args.path, args.seed)
    export = export_with_exporters if args.method == "exporters" else export_with_convert_model
    return {"method": args.method, "import_s": loaded["import_s"], "load_s": loaded["load_s"],
            **export(loaded["model"], loaded["ids"], args.out)}


# --------------------------------------------------------------------------- generation loops
#
# Each loop has prefill(input_ids [1, S]) -> logits [1, vocab] of the last position and
# step(tokens [1]) -> logits [1, vocab], both as numpy arrays.


class HfexportLoop:
    """An hfexport OpenVINO export through hfexport's own runner."""

    def __init__(self, path: Path, new_tokens: int, ov_config: dict):
        from hfexport import open_runner

        self.runner = open_runner(path, config=ov_config)
        self.new_tokens = new_tokens
        self.inputs = [port.get_any_name() for port in self.runner.session.compiled.inputs]

    def prefill(self, input_ids: np.ndarray) -> np.ndarray:
        return self.runner.prefill(input_ids, np.ones_like(input_ids), self.new_tokens)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        return self.runner.step(tokens)


class StatefulLoop:
    """A minimal loop over any stateful OpenVINO causal-LM model (the KV cache in its variables):
    reset_state before the prompt, then one infer per call with whichever of input_ids,
    attention_mask, position_ids and beam_idx the model takes. The mechanics match hfexport's
    runner: one infer request, inputs fed as numpy arrays, the last position's logits copied out."""

    def __init__(self, path: Path, ov_config: dict):
        import openvino as ov

        # openvino_model.xml: optimum-intel, hfexport, and the anchors above; openvino_decode.xml: a
        # transformers export_for_generation(..., multi_token_decode=True) output.
        xml = next((path / name for name in ["openvino_model.xml", "openvino_decode.xml"] if (path / name).exists()),
                   None)
        if xml is None:
            raise RuntimeError(f"{path}: no openvino_model.xml (nor openvino_decode.xml)")
        self.compiled = ov.Core().compile_model(str(xml), "CPU", ov_config)
        self.request = self.compiled.create_infer_request()
        self.inputs = [port.get_any_name() for port in self.compiled.inputs]
        known = {"input_ids", "attention_mask", "position_ids", "beam_idx"}
        if "input_ids" not in self.inputs or not set(self.inputs) <= known:
            raise RuntimeError(f"{xml}: unexpected inputs {self.inputs} (a stateful model takes {sorted(known)})")
        if not self.request.query_state():
            raise RuntimeError(f"{xml}: not a stateful model (no variables)")

    def _run(self, ids: np.ndarray) -> np.ndarray:
        length = ids.shape[1]
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones((1, self.position + length), dtype=np.int64),
            "position_ids": np.arange(self.position, self.position + length, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, dtype=np.int32),
        }
        self.request.infer({name: feeds[name] for name in self.inputs})
        self.position += length
        return self.request.get_tensor("logits").data[:, -1].copy()

    def prefill(self, input_ids: np.ndarray) -> np.ndarray:
        self.request.reset_state()
        self.position = 0
        return self._run(input_ids)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        return self._run(tokens.astype(np.int64)[:, None])


def task_time(args) -> dict:
    ov_config = json.loads(args.ov_config)
    start = time.perf_counter()
    if args.kind == "hfexport":
        loop = HfexportLoop(args.path, args.new_tokens, ov_config)
    else:
        loop = StatefulLoop(args.path, ov_config)
    load_s = time.perf_counter() - start
    compiled = loop.runner.session.compiled if args.kind == "hfexport" else loop.compiled
    result = {
        "load_s": load_s,
        "inputs": loop.inputs,
        "ov_config": ov_config,
        # What the CPU plugin settled on, to show both sides ran alike.
        "compiled_properties": {key: str(compiled.get_property(key)) for key in
                                ["INFERENCE_PRECISION_HINT", "KV_CACHE_PRECISION", "INFERENCE_NUM_THREADS",
                                 "PERFORMANCE_HINT", "NUM_STREAMS"]},
    }
    prompt = prompt_ids(args.vocab_size, args.prompt_len, args.seed)
    result.update(time_generation(loop, prompt, args.new_tokens, args.repeats))
    return result


# --------------------------------------------------------------------------- main


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--result", type=Path, required=True, help="where to write the result (JSON)")
    parser.add_argument("--seed", type=int, default=0, help="prompt seed")
    tasks = parser.add_subparsers(dest="task", required=True)

    export = tasks.add_parser("export-anchor")
    export.add_argument("method", choices=["exporters", "convert-model"])
    export.add_argument("path", type=Path, help="checkpoint directory")
    export.add_argument("out", type=Path)

    timing = tasks.add_parser("time")
    timing.add_argument("kind", choices=["hfexport", "anchor"])
    timing.add_argument("path", type=Path, help="the export directory")
    timing.add_argument("--vocab-size", type=int, required=True)
    timing.add_argument("--prompt-len", type=int, default=128)
    timing.add_argument("--new-tokens", type=int, default=128)
    timing.add_argument("--repeats", type=int, default=3)
    timing.add_argument("--ov-config", default=json.dumps(DEFAULT_OV_CONFIG), help="compile properties (JSON)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    result = task_export_anchor(args) if args.task == "export-anchor" else task_time(args)
    result["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    args.result.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
