"""Decode loop over an ExecuTorch export (.pte), with ExecuTorch's Python runtime. The static KV
cache is a mutable buffer of the `forward` method, written in place at the positions of each
call and kept by the loaded method between calls: each call passes the tokens, a 4-D boolean mask
over the cache's slots and their positions, never the cache. A --no-alloc-graph-io export takes
the cache as inputs too (the zero-copy interface): the runner passes the same zeroed tensors every
call. ExecuTorch's Python Method has no set_output_data_ptr: it binds each output that has no
planned memory to storage of its own, kept across calls, and the cache inputs are the same tensors
as those outputs, so the method writes and reads the cache there (the C++ loop binds them onto
the caller's buffers instead)."""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

import numpy as np

from .cache_driver import DynamicCache, Session, StaticCache
from .manifest import CACHE_DYNAMIC, CACHE_STATEFUL, CACHE_STATIC, DECODER, ENCODER, PREFILL, SHARES_BUFFER, ExportManifest
from .runner import DecodeRunner, GenerationError, state_buffer_shape
from .versions import check_runtime_versions


KERNELS_LIBRARY = "libhfexport_executorch_kernels.so"
_kernels_loaded = False


def kernels_library() -> Path | None:
    """hfexport's ExecuTorch kernel library (hfexport::sdpa.out), beside the package (the build
    puts it there, as it does the extension module), or where HFEXPORT_EXECUTORCH_KERNELS says."""
    candidates = [os.environ.get("HFEXPORT_EXECUTORCH_KERNELS", ""), str(Path(__file__).with_name(KERNELS_LIBRARY))]
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def load_hfexport_kernels() -> bool:
    """Registers hfexport's kernels with the ExecuTorch runtime of this process (once); False if
    the library was not built. The runtime's own library is loaded first, so that ours binds to it."""
    global _kernels_loaded
    if not _kernels_loaded and (library := kernels_library()) is not None:
        import executorch.runtime  # noqa: F401 - loads libexecutorch.so, which the library registers into

        ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
        _kernels_loaded = True
    return _kernels_loaded


def needs_hfexport_kernels(program_path) -> bool:
    """Whether the export beside this program was written with --executorch-kernels hfexport."""
    meta = Path(program_path).with_name("export.json")
    if not meta.is_file():
        return False
    backend = json.loads(meta.read_text()).get("export_config", {}).get("backend", {})
    return backend.get("executorch_kernels") == "hfexport"


def load_program(path):
    """The program, verified as ExecuTorch's runtime loads it (each load has fresh method state),
    with hfexport's kernels registered first when they are built (a program exported with
    --executorch-kernels hfexport calls them)."""
    from executorch.runtime import Runtime, Verification

    if not load_hfexport_kernels() and needs_hfexport_kernels(path):
        raise GenerationError(f"{path}: exported with --executorch-kernels hfexport, and hfexport's kernel library "
                              f"({KERNELS_LIBRARY}) is not beside the hfexport package; build hfexport with the "
                              "executorch wheel installed, or set HFEXPORT_EXECUTORCH_KERNELS to its path")
    return Runtime.get().load_program(str(path), verification=Verification.InternalConsistency)


def as_tensor(a):
    """A method input from an array or a tensor. An empty one (a zero-length past) gets torch's
    contiguous strides: numpy's are ones the runtime refuses. bfloat16 arrays (ml_dtypes') keep
    their bits."""
    import torch

    if not isinstance(a, torch.Tensor):
        a = np.ascontiguousarray(a)
        a = (torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype.name == "bfloat16"
             else torch.from_numpy(a))
    return a.contiguous() if a.numel() else torch.zeros(a.shape, dtype=a.dtype)


def execute_without_clones(method, feeds):
    """Method.execute, but the outputs left in the method's memory rather than cloned into new
    tensors: a clone of the logits is a torch copy whose OpenMP workers then spin on the cores
    XNNPACK's threads need (a fifth of an int4 decode step, measured). The caller copies what it
    keeps before the next call."""
    raw = getattr(method, "_method", None)
    if raw is None:
        return method.execute(feeds)
    return raw(feeds, clone_outputs=False)


def as_array(t) -> np.ndarray:
    """A method output as numpy; bfloat16 as ml_dtypes' bfloat16 (numpy has none of its own)."""
    import torch

    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def callers_cache(generation: dict) -> bool:
    """A --no-alloc-graph-io export: the cache is passed in and returned (zero-copy interface)."""
    return generation.get("cache") == CACHE_STATIC and bool(generation.get(SHARES_BUFFER))


class ExecutorchGraph:
    """One method of a .pte for ExportedModel(**inputs): numpy in, numpy out, by name. A method
    with a static cache is loaded afresh for each call (its buffers start zeroed). One that takes
    the cache (--no-alloc-graph-io) keeps it in the method's output storage (see above): a call
    may pass a zero cache (a fresh method) or the cache the previous call returned, not another."""

    def __init__(self, path, manifest_data: dict, program: str = "forward", **options):
        check_runtime_versions(manifest_data, ["executorch"])
        self.path, self.method_name = path, program
        component = next(c for c in manifest_data["components"].values() if c.get("program") == program)
        self.input_names = [i["name"] for i in component["inputs"]]
        self.output_names = [o["name"] for o in component["outputs"]]
        generation = manifest_data.get("generation") or {}
        self.cache_pairs = ([(p["input"], p["output"]) for p in generation["cache_pairs"]]
                            if callers_cache(generation) else [])
        self.stateful = generation.get("cache") == CACHE_STATEFUL
        self.method, self.last_cache = None, None

    def _method_for(self, feeds: dict[str, np.ndarray]):
        if self.method is None or self.stateful:
            return load_program(self.path).load_method(self.method_name)
        if not self.cache_pairs:
            return self.method
        fed = [feeds[i] for i, _ in self.cache_pairs]
        if all(not c.any() for c in fed):
            return load_program(self.path).load_method(self.method_name)
        if self.last_cache is None or not all(np.array_equal(a, b) for a, b in zip(fed, self.last_cache)):
            raise ValueError("this .pte takes its cache zero-copy (--no-alloc-graph-io), which ExecuTorch's Python "
                             "runtime keeps in the method's own output storage: pass a zero cache or the one the "
                             "previous call returned (or bind buffers with set_output_data_ptr in C++)")
        return self.method

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.method = self._method_for(feeds)
        outputs = self.method.execute([as_tensor(feeds[n]) for n in self.input_names])
        result = {name: as_array(value) for name, value in zip(self.output_names, outputs)}
        if self.cache_pairs:
            self.last_cache = [result[o] for _, o in self.cache_pairs]
        return result


def runner_class(manifest: ExportManifest) -> type[DecodeRunner]:
    """The runner class of a .pte generation export: its cache static (in the method or the caller's) or dynamic."""
    return ExecutorchDynamicRunner if manifest.cache == CACHE_DYNAMIC else ExecutorchStaticRunner



class _EncoderMethod:
    """Mixed into the sessions of an encoder-decoder export (hfexport.seq2seq): `encode` runs the
    `encoder` method; its state outputs stay tensors every `text_decoder` call takes (`fixed`)."""

    def open_encoder(self, manifest: ExportManifest) -> None:
        from .seq2seq import cross_state_names

        self.cross = cross_state_names(manifest)
        self.encoder_entry = manifest.component(ENCODER)
        self.decoder_inputs = {i["name"] for i in manifest.component(DECODER)["inputs"]}
        self.encoder_path = manifest.file_of(ENCODER)
        self.encoder_program = None

    def encode(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from .seq2seq import decoder_feeds, encoder_results

        if self.encoder_program is None:
            self.encoder_program = load_program(self.encoder_path)
        method = self.encoder_program.load_method(self.encoder_entry.get("program", "encoder"))
        values = method.execute([as_tensor(np.ascontiguousarray(inputs[i["name"]])) for i in self.encoder_entry["inputs"]])
        outputs = {o["name"]: v for o, v in zip(self.encoder_entry["outputs"], values)}
        given = {k: as_tensor(np.ascontiguousarray(v)) for k, v in inputs.items()}
        self.fixed = decoder_feeds(self.cross, outputs, given, self.decoder_inputs)
        return {k: as_array(v) for k, v in encoder_results(self.cross, outputs).items()}


class ExecutorchSession(_EncoderMethod, Session):
    """The .pte's methods, the program loaded at the first call; a call passes the states as the
    tensors the last call returned."""

    def __init__(self, manifest: ExportManifest, step: str, **options):
        super().__init__()
        check_runtime_versions(manifest.data, ["executorch"])
        self.manifest, self.step = manifest, step
        self.path = manifest.file_of(step)
        self.pairs = [(p["input"], p["output"]) for p in manifest.generation["cache_pairs"]]
        self.components = {c: manifest.component(c) for c in (PREFILL, step) if manifest.has_component(c)}
        self.program = None

    def has(self, component: str) -> bool:
        return component in self.components

    def input_names(self, component: str) -> set[str]:
        return {i["name"] for i in self.components[component]["inputs"]}

    def empty_states(self, batch: int) -> dict:
        import torch

        specs = {i["name"]: i for i in self.components[self.step]["inputs"]}
        replaced = self.manifest.replaced_states(self.step)
        states = {}
        for past, _ in self.pairs:  # multi-token: the prompt over an empty past
            empty = state_buffer_shape(specs[past]["shape"], batch, 0, past in replaced)
            states[past] = torch.zeros(empty, dtype=getattr(torch, specs[past]["dtype"]))
        return states

    def run(self, component: str, feeds: dict, states: dict) -> tuple[np.ndarray, dict]:
        if self.program is None:
            self.program = load_program(self.path)
        entry = self.components[component]
        method = self.program.load_method(entry.get("program", "forward"))
        feeds = {**feeds, **states, **(self.fixed if component == self.step else {})}
        outputs = method.execute([as_tensor(feeds[i["name"]]) for i in entry["inputs"]])
        named = {o["name"]: v for o, v in zip(entry["outputs"], outputs)}
        states = {past: named[present] for past, present in self.pairs}  # tensors, fed back as they are
        return named["logits"][:, -1].float().numpy(), states


class ExecutorchDynamicRunner(DynamicCache):
    """A dynamic cache: `prefill` (or, multi-token, `forward` over an empty past) returns the
    present keys and values, which each step feeds back as the past (and gets one row longer)."""

    SESSION = ExecutorchSession


class ExecutorchStaticSession(_EncoderMethod, Session):
    """The step method with a static cache: in the method's own buffers, kept by the loaded method
    between calls, or (--no-alloc-graph-io) in tensors the session passes on every call. Either is
    as long as max_cache_len and lives as long as the session: a request's slots past its prompt
    may hold an earlier request's rows, which the mask never reaches before this request writes them."""

    full_length_buffers = True

    def __init__(self, manifest: ExportManifest, step: str, **options):
        super().__init__()
        check_runtime_versions(manifest.data, ["executorch"])
        gen = manifest.generation
        if (manifest.cache != CACHE_STATEFUL and not callers_cache(gen)) or not gen.get("max_cache_len"):
            raise GenerationError(f"{manifest.directory}: not an ExecuTorch export with a static cache")
        self.step = step
        self.path = manifest.file_of(step)
        component = manifest.component(step)
        self.names = [i["name"] for i in component["inputs"]]
        self.method_name = component.get("program", "forward")
        self.method = None
        # The zero-copy interface's cache inputs: the same tensors every call; the logits come
        # after the N returned caches.
        self.caches: dict = {}
        if callers_cache(gen):
            import torch

            cache_inputs = {p["input"] for p in gen["cache_pairs"]}
            self.caches = {i["name"]: torch.zeros(i["shape"], dtype=getattr(torch, i["dtype"]))
                           for i in component["inputs"] if i["name"] in cache_inputs}
        self.logits_index = len(self.caches)

    def has(self, component: str) -> bool:
        return component == self.step

    def input_names(self, component: str) -> set[str]:
        return set(self.names)

    def empty_states(self, batch: int) -> dict:
        return {}

    @property
    def loaded(self) -> bool:
        return self.method is not None

    def static_buffers(self, batch: int, length: int) -> dict:
        if self.method is None:
            self.method = load_program(self.path).load_method(self.method_name)
        return self.caches

    def run(self, component: str, feeds: dict, states: dict) -> tuple[np.ndarray, dict]:
        import torch

        feeds = {**feeds, **states, **self.fixed}
        values = [v if isinstance(v := feeds[name], torch.Tensor) else torch.from_numpy(np.ascontiguousarray(v))
                  for name in self.names]
        outputs = execute_without_clones(self.method, values)
        # The outputs are the method's memory, rewritten by the next call: the last row is copied.
        return np.array(outputs[self.logits_index][:, -1].float().numpy()), states


class ExecutorchStaticRunner(StaticCache):
    """A static cache (see ExecutorchStaticSession), batch 1 without padding."""

    SESSION = ExecutorchStaticSession

    def _check_request(self, input_ids: np.ndarray, attention_mask: np.ndarray, max_new_tokens: int) -> None:
        batch, length = input_ids.shape
        if batch != 1:
            raise GenerationError(f"batch of {batch} but a .pte's in-place cache serves batch 1")
        if not attention_mask.all():
            raise GenerationError("a batch of 1 has no padding: the attention mask must be all ones")
        if length + max_new_tokens - 1 > self.max_cache_len:
            raise GenerationError(
                f"prompt of {length} tokens + {max_new_tokens} new tokens exceeds max_cache_len {self.max_cache_len}")

    def _allocate(self, batch: int) -> dict:
        first = not self.session.loaded
        self.buffers = self.session.static_buffers(batch, self.cache_len)
        if first and not self.buffers:
            self._presize_method()
        return self.buffers

    def _presize_method(self) -> None:
        """One call at the last slot when the method is loaded. With XNNPACK, attention over the
        method's cache reads only the filled slots, and XNNPACK re-plans a delegate's memory on
        every call whose shapes outgrow the largest it has seen (each step of a first request,
        ~4 % of its decode measured); this sizes them for the whole cache up front. It writes only
        the last slot, which any request writes before a query may read it."""
        self._run(np.zeros((1, 1), np.int64), np.array([[self.max_cache_len - 1]], np.int64), np.ones((1, 1), np.int64))
