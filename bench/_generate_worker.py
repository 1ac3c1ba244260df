"""Worker for bench_generate.py: one export or one timed generation loop, in its own process.

bench_generate.py runs every task in a fresh process, so each configuration starts from a clean heap
(a 28-layer float32 model is ~2.4 GB of weights per graph) and no thread pool is shared. Tasks:

  export-transformers CKPT OUT --fusions none|cpu
      transformers.exporters: OnnxExporter().export_for_generation(model, generate inputs,
      OnnxConfig(dynamic=True, ort_fusions=...)), saved with ExportedModel.save_pretrained
      (prefill.onnx + decode.onnx, each with its weights).
  bandwidth
      onnxruntime's float32 matrix-vector streaming rate, the bound on batch-1 decode: one MatMul
      x[1, 1024] @ W[1024, N], W a float32 initializer of max(1 GiB, 2 x the L3 cache) so that it
      streams from memory, written with external data to a temporary directory (--tmp-dir) and
      loaded by path; 3 warm-up runs, then --repeats timed runs; GB/s = W bytes / median seconds.
  time KIND PATH
      Greedy generation at batch 1 with a random prompt: a warm-up run, then --repeats timed runs,
      each timing the prefill (prompt in, first token's logits out, argmax included) and
      --new-tokens single-token decode steps (argmax included). KIND is
        hfexport              an hfexport output directory, through hfexport.open_runner
        genai                 a directory with a genai_config.json (onnxruntime-genai's model builder
                              output, or an hfexport export) through onnxruntime-genai's C++ loop
        builder-iobinding     the model builder's model.onnx through a minimal IO-binding loop with
                              hfexport's runner's mechanics (shared cache buffers)
        transformers-export   a transformers.exporters output directory, through its own runner
                              (--tf-loop runner) or a minimal IO-binding loop (--tf-loop iobinding)
        eager                 the checkpoint in PyTorch: a manual forward loop over a DynamicCache
  alternate HFEXPORT BUILDER
      hfexport's runner on one export and the builder-iobinding loop on the builder's, loaded in
      one process and run in alternating blocks of --block decode steps (the order swapped every
      block) over --generations generations: both see the same machine state at the same time,
      which separate processes (whose speed differs by 10-25 % on a shared VM) do not.
      --builder-first loads the builder's session first (bench_builder.py runs both orders).

Every task writes its result as JSON to --result; bench_generate.py reads it. Not meant to be run
by hand, but it can be: python bench/_generate_worker.py --result r.json time eager CKPT ...
(or --result r.json bandwidth).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def prompt_ids(vocab_size: int, length: int, seed: int) -> np.ndarray:
    """The benchmark prompt, [1, length] int64: the same in every worker for the same seed."""
    return np.random.default_rng(seed).integers(0, vocab_size, size=(1, length), dtype=np.int64)


def session_options(ort_threads: int):
    """onnxruntime session options: all defaults (intra-op pool over every physical core) unless
    ort_threads > 0."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if ort_threads > 0:
        options.intra_op_num_threads = ort_threads
    return options


# --------------------------------------------------------------------------- generation loops
#
# Each loop has prefill(input_ids [1, S]) -> logits [1, vocab] of the last position and
# step(tokens [1]) -> logits [1, vocab], both as numpy arrays.


class HfexportLoop:
    """An hfexport export through hfexport's own onnxruntime runner (IO binding, cache kept as
    OrtValues, static caches updated in place)."""

    def __init__(self, path: Path, new_tokens: int, ort_threads: int):
        from hfexport import open_runner

        self.runner = open_runner(path, session_options=session_options(ort_threads))
        self.new_tokens = new_tokens
        # The loop's own cost per step: the step's wall time less onnxruntime's run call in it.
        self.run_s = 0.0
        self.overheads_ms: list[float] = []
        for session in {self.runner.session.decode, self.runner.session.prefill_session} - {None}:
            session.run_with_iobinding = self._timed(session.run_with_iobinding)

    def _timed(self, run):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return run(*args, **kwargs)
            finally:
                self.run_s += time.perf_counter() - start
        return timed

    def prefill(self, input_ids: np.ndarray) -> np.ndarray:
        self.overheads_ms = []
        return self.runner.prefill(input_ids, np.ones_like(input_ids), self.new_tokens)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        self.run_s, start = 0.0, time.perf_counter()
        logits = self.runner.step(tokens)
        self.overheads_ms.append(1000 * (time.perf_counter() - start - self.run_s))
        return logits


class GenaiLoop:
    """Any directory with a genai_config.json (onnxruntime-genai's model builder output, or an
    hfexport export) through onnxruntime-genai's own C++ loop: og.Generator, greedy search. It picks
    the tokens itself, so it times a whole generation (generate) instead of prefill/step."""

    def __init__(self, path: Path):
        import onnxruntime_genai as og

        self.og = og
        self.model = og.Model(str(path))  # threads: genai_config.json's session_options (default: all)

    def generate(self, prompt: np.ndarray, new_tokens: int) -> tuple[float, float, list[int]]:
        og = self.og
        total = prompt.shape[1] + new_tokens + 1
        params = og.GeneratorParams(self.model)
        # min_length: random weights may emit an eos early; the benchmark times every token.
        params.set_search_options(max_length=total, min_length=total, do_sample=False)
        generator = og.Generator(self.model, params)
        start = time.perf_counter()
        generator.append_tokens(prompt.astype(np.int32))
        generator.generate_next_token()
        tokens = [int(generator.get_next_tokens()[0])]
        prefill_s = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(new_tokens):
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
        decode_s = time.perf_counter() - start
        return prefill_s, decode_s, tokens


class BuilderIoBindingLoop:
    """The model builder's graph (model.onnx: GroupQueryAttention, seqlens from attention_mask)
    under the same IO-binding mechanics as hfexport's runner: each past/present pair bound once to
    one buffer of the whole generation's length, one preallocated logits buffer per step. This
    times the builder's graph apart from onnxruntime-genai's loop."""

    def __init__(self, path: Path, new_tokens: int, ort_threads: int):
        import onnxruntime as ort

        self.ort = ort
        self.session = ort.InferenceSession(str(path / "model.onnx"), session_options(ort_threads),
                                            providers=["CPUExecutionProvider"])
        self.pasts = [i for i in self.session.get_inputs() if i.name.startswith("past_key_values")]
        # A hybrid's convolution state (LFM2, Qwen3.5: past.{i}.conv [batch, channels, kernel - 1])
        # and recurrent state (Qwen3.5: past.{i}.recurrent), replaced every call: two buffers per
        # layer, read from one and written to the other, swapped.
        self.convs = [i for i in self.session.get_inputs()
                      if i.name.startswith("past.") and i.name.endswith((".conv", ".recurrent"))]
        # Qwen3.5's graph takes M-RoPE positions [3, batch, sequence] (the same row three times for text).
        self.position_rows = next((len(i.shape) for i in self.session.get_inputs() if i.name == "position_ids"), 0)
        self.new_tokens = new_tokens
        self.vocab = self.session.get_outputs()[0].shape[-1]
        self.head_size = json.loads((path / "genai_config.json").read_text())["model"]["decoder"]["head_size"]

    def _run(self, ids: np.ndarray, logits) -> np.ndarray:
        b = self.binding
        b.bind_cpu_input("input_ids", ids)
        b.bind_cpu_input("attention_mask", np.ones((1, self.length), np.int64))
        if self.position_rows:
            positions = np.arange(self.length - ids.shape[1], self.length, dtype=np.int64)[None]
            b.bind_cpu_input("position_ids", np.ascontiguousarray(
                np.broadcast_to(positions, (3, *positions.shape)) if self.position_rows == 3 else positions))
        b.bind_ortvalue_output("logits", logits)
        for c, (read, write) in zip(self.convs, self.conv_buffers):
            b.bind_ortvalue_input(c.name, read)
            b.bind_ortvalue_output(c.name.replace("past.", "present.", 1), write)
        self.session.run_with_iobinding(b)
        self.conv_buffers = [(write, read) for read, write in self.conv_buffers]
        return logits.numpy()[:, -1].copy()

    def prefill(self, input_ids: np.ndarray) -> np.ndarray:
        ort = self.ort
        capacity = input_ids.shape[1] + self.new_tokens + 1
        self.binding = self.session.io_binding()
        self.buffers = []
        for p in self.pasts:
            value = ort.OrtValue.ortvalue_from_numpy(np.zeros([1, p.shape[1], capacity, self.head_size], np.float32))
            self.buffers.append(value)
            self.binding.bind_ortvalue_input(p.name, value)
            self.binding.bind_ortvalue_output(p.name.replace("past_key_values", "present"), value)
        self.conv_buffers = [tuple(ort.OrtValue.ortvalue_from_numpy(np.zeros([1, *c.shape[1:]], np.float32)) for _ in range(2))
                             for c in self.convs]
        self.step_logits = ort.OrtValue.ortvalue_from_numpy(np.zeros([1, 1, self.vocab], np.float32))
        self.length = input_ids.shape[1]
        prompt_logits = ort.OrtValue.ortvalue_from_numpy(np.zeros([1, self.length, self.vocab], np.float32))
        return self._run(input_ids, prompt_logits)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        self.length += 1
        return self._run(tokens.astype(np.int64)[:, None], self.step_logits)


class TransformersRunnerLoop:
    """A transformers.exporters export through transformers' own runner: ExportedModel.from_pretrained,
    then its "prefill" and "decode" components called with forward kwargs; the DynamicCache a call
    returns is the next call's input."""

    def __init__(self, path: Path, ort_threads: int):
        import torch
        from transformers import DynamicCache
        from transformers.exporters import ExportedModel

        self.torch, self.DynamicCache = torch, DynamicCache
        self.model = ExportedModel.from_pretrained(path, device="cpu", session_options=session_options(ort_threads))
        self.prefill_runner, self.decode_runner = self.model.runners["prefill"], self.model.runners["decode"]

    def prefill(self, input_ids: np.ndarray) -> np.ndarray:
        torch = self.torch
        length = input_ids.shape[1]
        out = self.prefill_runner(
            input_ids=torch.from_numpy(input_ids),
            position_ids=torch.arange(length, dtype=torch.int64)[None],
            cache=self.DynamicCache(config=self.model.config),
        )
        self.cache, self.position = out.cache, length
        return out.logits[:, -1].numpy()

    def step(self, tokens: np.ndarray) -> np.ndarray:
        torch = self.torch
        out = self.decode_runner(
            input_ids=torch.from_numpy(tokens.astype(np.int64)[:, None]),
            position_ids=torch.tensor([[self.position]], dtype=torch.int64),
            cache=self.cache,
        )
        self.cache, self.position = out.cache, self.position + 1
        return out.logits[:, -1].numpy()


class TransformersIoBindingLoop:
    """A transformers.exporters export through a minimal onnxruntime IO-binding loop, the same
    mechanics as hfexport's runner: the cache stays in OrtValues from one step to the next.

    Graph names: prefill takes input_ids, position_ids and returns logits, cache.layers.N.keys/values;
    decode takes input.cache.layers.N.* and returns output.cache.layers.N.*."""

    def __init__(self, path: Path, ort_threads: int):
        import onnxruntime as ort

        options, providers = session_options(ort_threads), ["CPUExecutionProvider"]
        self.prefill_session = ort.InferenceSession(str(path / "prefill.onnx"), options, providers=providers)
        self.decode_session = ort.InferenceSession(str(path / "decode.onnx"), options, providers=providers)
        self.cache_inputs = [i.name for i in self.decode_session.get_inputs() if i.name.startswith("input.")]
        if not self.cache_inputs:
            raise RuntimeError("decode.onnx has no input.* cache inputs: unknown transformers export layout")

    def _run(self, session, feeds: dict, cache: dict, output_prefix: str) -> np.ndarray:
        binding = session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, value)
        for name, value in cache.items():
            binding.bind_ortvalue_input(name, value)
        names = [o.name for o in session.get_outputs()]
        for name in names:
            binding.bind_output(name, "cpu")
        session.run_with_iobinding(binding)
        outputs = dict(zip(names, binding.get_outputs()))
        # decode's input.cache.X is the previous call's cache.X (prefill) or output.cache.X (decode).
        self.cache = {name: outputs[output_prefix + name.removeprefix("input.")] for name in self.cache_inputs}
        return outputs["logits"].numpy()[:, -1]

    def prefill(self, input_ids: np.ndarray) -> np.ndarray:
        positions = np.arange(input_ids.shape[1], dtype=np.int64)[None]
        self.position = input_ids.shape[1]
        return self._run(self.prefill_session, {"input_ids": input_ids, "position_ids": positions}, {}, "")

    def step(self, tokens: np.ndarray) -> np.ndarray:
        feeds = {
            "input_ids": tokens.astype(np.int64)[:, None],
            "position_ids": np.array([[self.position]], dtype=np.int64),
        }
        self.position += 1
        return self._run(self.decode_session, feeds, self.cache, "output.")


class EagerLoop:
    """The checkpoint in PyTorch (float32, default attention implementation unless --torch-attn):
    the forward calls model.generate makes, without its bookkeeping. Prefill keeps only the last
    position's logits (logits_to_keep=1, as generate does); each step feeds one token and the
    DynamicCache."""

    def __init__(self, checkpoint: Path, attn_implementation: str | None):
        import torch
        from transformers import AutoModelForCausalLM, DynamicCache

        self.torch, self.DynamicCache = torch, DynamicCache
        kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32, **kwargs).eval()
        self.attn_implementation = self.model.config._attn_implementation

    def _forward(self, input_ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        torch = self.torch
        with torch.inference_mode():
            out = self.model(
                input_ids=torch.from_numpy(input_ids),
                position_ids=torch.from_numpy(positions),
                cache=self.cache,
                use_cache=True,
                logits_to_keep=1,
            )
        return out.logits[:, -1].numpy()

    def prefill(self, input_ids: np.ndarray) -> np.ndarray:
        self.cache = self.DynamicCache(config=self.model.config)
        self.position = input_ids.shape[1]
        return self._forward(input_ids, np.arange(self.position, dtype=np.int64)[None])

    def step(self, tokens: np.ndarray) -> np.ndarray:
        positions = np.array([[self.position]], dtype=np.int64)
        self.position += 1
        return self._forward(tokens.astype(np.int64)[:, None], positions)


# --------------------------------------------------------------------------- timing


def generate_once(loop, prompt: np.ndarray, new_tokens: int) -> tuple[float, float, list[int]]:
    """(prefill seconds, decode seconds, greedy tokens): prefill, then new_tokens decode steps."""
    if hasattr(loop, "generate"):  # a loop that picks its own tokens
        return loop.generate(prompt, new_tokens)
    start = time.perf_counter()
    tokens = [loop.prefill(prompt).argmax(-1)]
    prefill_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(new_tokens):
        tokens.append(loop.step(tokens[-1]).argmax(-1))
    decode_s = time.perf_counter() - start
    return prefill_s, decode_s, [int(t[0]) for t in tokens]


def time_generation(loop, prompt: np.ndarray, new_tokens: int, repeats: int) -> dict:
    """One warm-up run, then `repeats` timed ones; medians of the prefill and of the decode."""
    generate_once(loop, prompt, new_tokens)
    runs = [generate_once(loop, prompt, new_tokens) for _ in range(repeats)]
    prefill_s = [r[0] for r in runs]
    decode_s = [r[1] for r in runs]
    if any(r[2] != runs[0][2] for r in runs):
        raise RuntimeError("greedy tokens differ between repeats")
    return {
        "prefill_ms": [1000 * s for s in prefill_s],
        "decode_s": decode_s,
        "prefill_ms_median": 1000 * statistics.median(prefill_s),
        "decode_tok_s_median": new_tokens / statistics.median(decode_s),
        "tokens": runs[0][2],
    }


def task_time(args) -> dict:
    if args.kind == "eager":
        import torch

        torch.set_num_threads(args.torch_threads)
    start = time.perf_counter()
    if args.kind == "hfexport":
        loop = HfexportLoop(args.path, args.new_tokens, args.ort_threads)
    elif args.kind == "builder-iobinding":
        loop = BuilderIoBindingLoop(args.path, args.new_tokens, args.ort_threads)
    elif args.kind == "genai":
        loop = GenaiLoop(args.path)
    elif args.kind == "transformers-export":
        loop_class = TransformersRunnerLoop if args.tf_loop == "runner" else TransformersIoBindingLoop
        loop = loop_class(args.path, args.ort_threads)
    else:
        loop = EagerLoop(args.path, args.torch_attn)
    load_s = time.perf_counter() - start
    result = {"load_s": load_s}
    if args.kind == "eager":
        result.update(torch_threads=torch.get_num_threads(), attn_implementation=loop.attn_implementation)
    prompt = prompt_ids(args.vocab_size, args.prompt_len, args.seed)
    result.update(time_generation(loop, prompt, args.new_tokens, args.repeats))
    if isinstance(loop, HfexportLoop) and loop.overheads_ms:  # the last run's steps
        result["step_overhead_ms_median"] = statistics.median(loop.overheads_ms)
    return result


def load_float32_model(path: Path, seed: int, *extra_imports: str) -> dict:
    """What an anchor exporter starts from: torch, transformers (and `extra_imports`) imported, the
    checkpoint loaded in float32 in eval mode, and a 16-token prompt tensor; with the import and
    load times."""
    import importlib

    start = time.perf_counter()
    import torch
    from transformers import AutoModelForCausalLM

    for module in extra_imports:
        importlib.import_module(module)
    import_s = time.perf_counter() - start
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    load_s = time.perf_counter() - start
    ids = torch.from_numpy(prompt_ids(model.config.vocab_size, 16, seed))
    return {"model": model, "ids": ids, "import_s": import_s, "load_s": load_s}


def task_export_transformers(args) -> dict:
    loaded = load_float32_model(args.path, args.seed, "transformers.exporters")
    import torch
    from transformers.exporters import OnnxConfig, OnnxExporter

    model, ids, import_s, load_s = loaded["model"], loaded["ids"], loaded["import_s"], loaded["load_s"]
    # generate() inputs; export_for_generation captures the prefill and decode forward kwargs from them.
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    config = OnnxConfig(dynamic=True, ort_fusions=None if args.fusions == "none" else args.fusions)
    start = time.perf_counter()
    exported = OnnxExporter().export_for_generation(model, inputs, config)
    export_s = time.perf_counter() - start
    start = time.perf_counter()
    exported.save_pretrained(args.out)
    save_s = time.perf_counter() - start
    return {"import_s": import_s, "load_s": load_s, "export_s": export_s, "save_s": save_s,
            "components": list(exported.components)}


# --------------------------------------------------------------------------- bandwidth

GIB = 1 << 30
BANDWIDTH_K = 1024  # W's rows: Qwen3-0.6B's hidden size, so x is one activation row as in a decode step
BANDWIDTH_WARMUP = 3


def l3_cache_bytes() -> int | None:
    """cpu0's L3 size as sysfs reports it ("491520K"), or None where it is not reported."""
    try:
        text = Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
    except (OSError, ValueError, IndexError):
        return None


def write_matmul_model(directory: Path, k: int, n: int, seed: int) -> Path:
    """y = x[1, k] @ W[k, n] with W a float32 initializer in external data next to the model.

    W is written straight to its file a block of rows at a time and the TensorProto only points at
    it, so no copy of W is ever held in Python (in-memory protobufs also stop at 2 GiB)."""
    from onnx import TensorProto, helper

    data = directory / "W.bin"
    rng = np.random.default_rng(seed)
    rows = max(1, (64 << 20) // (4 * n))  # ~64 MiB blocks
    with open(data, "wb") as f:
        for start in range(0, k, rows):
            rng.random((min(rows, k - start), n), dtype=np.float32).tofile(f)  # values do not matter
    weight = TensorProto(name="W", dims=[k, n], data_type=TensorProto.FLOAT, data_location=TensorProto.EXTERNAL)
    for key, value in {"location": data.name, "offset": "0", "length": str(data.stat().st_size)}.items():
        weight.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "bandwidth",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = directory / "matmul.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def task_bandwidth(args) -> dict:
    import onnxruntime as ort

    l3 = l3_cache_bytes()
    # Larger than the last-level cache, so every run streams W from memory as a decode step streams
    # its weights; N rounded up to a multiple of 256 columns.
    target = max(GIB, 2 * l3) if l3 else GIB
    n = -(-target // (4 * BANDWIDTH_K * 256)) * 256
    weight_bytes = 4 * BANDWIDTH_K * n
    with tempfile.TemporaryDirectory(prefix="bandwidth-", dir=args.tmp_dir) as tmp:
        start = time.perf_counter()
        path = write_matmul_model(Path(tmp), BANDWIDTH_K, n, args.seed)
        write_s = time.perf_counter() - start
        start = time.perf_counter()
        session = ort.InferenceSession(str(path), session_options(args.ort_threads),
                                       providers=["CPUExecutionProvider"])
        load_s = time.perf_counter() - start
    # The session holds its own copy (or mapping) of W: the files can go before the runs.
    x = np.random.default_rng(args.seed).standard_normal((1, BANDWIDTH_K), dtype=np.float32)
    for _ in range(BANDWIDTH_WARMUP):
        session.run(None, {"x": x})
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        session.run(None, {"x": x})
        times.append(time.perf_counter() - start)
    median_s = statistics.median(times)
    return {
        "k": BANDWIDTH_K,
        "n": n,
        "weight_bytes": weight_bytes,
        "l3_bytes": l3,
        "ort_threads": args.ort_threads,
        "write_s": write_s,
        "load_s": load_s,
        "warmup_runs": BANDWIDTH_WARMUP,
        "run_s": times,
        "median_s": median_s,
        "gb_s": weight_bytes / median_s / 1e9,
    }


def task_alternate(args) -> dict:
    """Paired per-block timings of hfexport's runner and the builder's graph in one process."""
    # The first large session a process loads decodes 4-8 % slower than the later ones (measured:
    # the same export loaded twice); --builder-first swaps the order so that a pair of runs cancels it.
    kinds = {"hfexport": (HfexportLoop, args.hfexport), "builder-graph": (BuilderIoBindingLoop, args.builder)}
    load_order = ["builder-graph", "hfexport"] if args.builder_first else ["hfexport", "builder-graph"]
    loops = {name: kinds[name][0](kinds[name][1], args.new_tokens, args.ort_threads) for name in load_order}
    prompt = prompt_ids(args.vocab_size, args.prompt_len, args.seed)
    step_s: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(args.generations):
        tokens = {name: loop.prefill(prompt).argmax(-1) for name, loop in loops.items()}
        for block in range(args.new_tokens // args.block):
            for name in list(loops) if block % 2 == 0 else reversed(loops):
                start = time.perf_counter()
                for _ in range(args.block):
                    tokens[name] = loops[name].step(tokens[name]).argmax(-1)
                step_s[name].append((time.perf_counter() - start) / args.block)
    ratios = [b / a for a, b in zip(step_s["hfexport"], step_s["builder-graph"])]
    return {
        "loaded_first": load_order[0], "blocks": len(ratios), "block_steps": args.block,
        "decode_tok_s_median": {name: 1 / statistics.median(v) for name, v in step_s.items()},
        "ratio_median": statistics.median(ratios), "ratio_mean": statistics.mean(ratios),
        "ratio_quartiles": statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3,
    }


# --------------------------------------------------------------------------- main


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--result", type=Path, required=True, help="where to write the result (JSON)")
    parser.add_argument("--seed", type=int, default=0, help="prompt seed")
    tasks = parser.add_subparsers(dest="task", required=True)

    export = tasks.add_parser("export-transformers")
    export.add_argument("path", type=Path, help="checkpoint directory")
    export.add_argument("out", type=Path)
    export.add_argument("--fusions", choices=["none", "cpu"], default="none", help="OnnxConfig.ort_fusions")

    timing = tasks.add_parser("time")
    timing.add_argument("kind", choices=["hfexport", "genai", "builder-iobinding", "transformers-export", "eager"])
    timing.add_argument("path", type=Path, help="the export directory, or the checkpoint for eager")
    timing.add_argument("--vocab-size", type=int, required=True)
    timing.add_argument("--prompt-len", type=int, default=128)
    timing.add_argument("--new-tokens", type=int, default=128)
    timing.add_argument("--repeats", type=int, default=3)
    timing.add_argument("--ort-threads", type=int, default=0, help="0: onnxruntime's default")
    timing.add_argument("--torch-threads", type=int, default=os.cpu_count())
    timing.add_argument("--torch-attn", default=None, help="attn_implementation for eager (default: transformers')")
    timing.add_argument("--tf-loop", choices=["runner", "iobinding"], default="iobinding")

    alternate = tasks.add_parser("alternate")
    alternate.add_argument("hfexport", type=Path, help="an hfexport export (shared-buffer generation)")
    alternate.add_argument("builder", type=Path, help="the model builder's output directory")
    alternate.add_argument("--vocab-size", type=int, required=True)
    alternate.add_argument("--prompt-len", type=int, default=128)
    alternate.add_argument("--new-tokens", type=int, default=128)
    alternate.add_argument("--block", type=int, default=16, help="decode steps per timed block")
    alternate.add_argument("--generations", type=int, default=3)
    alternate.add_argument("--builder-first", action="store_true", help="load the builder's session first")
    alternate.add_argument("--ort-threads", type=int, default=0, help="0: onnxruntime's default")

    bandwidth = tasks.add_parser("bandwidth")
    bandwidth.add_argument("--repeats", type=int, default=20, help="timed runs after 3 warm-up runs")
    bandwidth.add_argument("--ort-threads", type=int, default=0, help="0: onnxruntime's default")
    bandwidth.add_argument("--tmp-dir", type=Path, default=None,
                           help="where the temporary model and its ~1 GiB of weights go (default: the system's)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    tasks = {"export-transformers": task_export_transformers, "time": task_time, "bandwidth": task_bandwidth,
             "alternate": task_alternate}
    result = tasks[args.task](args)
    result["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    args.result.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
