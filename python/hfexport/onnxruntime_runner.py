"""Decode loop over onnxruntime (Python API: the onnxruntime wheel ships no C/C++ headers, and
Debian has no libonnxruntime-dev here). Three cache mechanics, as the manifest says:
- shared buffer (`past_present_share_buffer`, the ort-gqa default): each past/present pair is
  bound once to one buffer of the whole generation's length, which GroupQueryAttention appends to
  in place; the prompt's cache is copied in once after a separate prefill graph, and every step
  rebinds only its feeds (tokens, positions, the grown mask) and the logits array it returns (no
  per-step cache copy);
- dynamic: present -> past passed as OrtValues without copying to numpy (the graph's Concat
  copies the growing cache each step);
- static: each input./output. pair bound to one buffer the graph scatters into.
When several components read one weight file (prefill + decode), the weights are read once and
handed to every session (see shared_weights)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from .manifest import CACHE_STATIC, ENCODER, LOGITS, PREFILL, SHARES_BUFFER, ExportManifest
from .seq2seq import cross_state_names, decoder_feeds, encoder_results
from .cache_driver import DynamicCache, Session, StaticCache
from .runner import DecodeRunner, state_buffer_shape
from .versions import check_runtime_versions

_NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


# Ops whose CPU kernels run only at their speed on weights onnxruntime prepacked into a layout of
# its own (MatMulNBits' unpacked path is ~100x slower on int4 decode: bench/bench_default_paths.py).
NEEDS_PREPACKING = frozenset({"MatMulNBits", "QMoE", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"})
# Ops that prepack a constant input (into a copy per session), the above included.
PREPACKS = NEEDS_PREPACKING | {"MatMul", "Gemm", "FusedMatMul", "Conv", "GatherBlockQuantized"}


def _graph(path: Path):
    import onnx

    return onnx.load(str(path), load_external_data=False).graph


def prepacked_inputs(paths: list[Path]) -> tuple[bool, set[str]]:
    """(whether some op needs prepacking to be fast, the initializers a prepacking op reads)."""
    needs, read = False, set()
    for p in paths:
        for node in _graph(p).node:
            if node.op_type in PREPACKS:
                read.update(node.input)
                needs = needs or node.op_type in NEEDS_PREPACKING
    return needs, read


def _external_initializers(path: Path) -> dict[str, tuple]:
    """name -> (data file, offset, length, numpy dtype, dims) of the model's external initializers."""
    import onnx

    out = {}
    for t in _graph(path).initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        e = {x.key: x.value for x in t.external_data}
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
        out[t.name] = (e["location"], int(e.get("offset", 0)), int(e["length"]), np.dtype(dtype).str, tuple(t.dims))
    return out


def shared_weights(paths: list[Path], skip: frozenset[str] | set[str] = frozenset()) -> dict[str, ort.OrtValue]:
    """OrtValues over one in-memory copy of the data file, for the external initializers every
    model in `paths` stores identically, except those in `skip` (whose bytes are then not read:
    each of the others is read on its own). Given to each session with add_initializer, they replace
    the copies each session would otherwise make, so the weights are resident once.

    The file is read into anonymous memory rather than mapped: numpy backs large arrays with huge
    pages, and batch-1 decode streams every weight per token, so 4 KiB file pages cost it ~18 % in
    TLB misses (measured). onnxruntime prepacks MatMul weights into a private copy per session
    unless session.disable_prepacking is set: the caller decides which weights to share and
    whether to prepack (OnnxSession._share_weights; bench/bench_runner_memory.py has the
    figures)."""
    tables = [_external_initializers(p) for p in paths]
    common = {name: spec for name, spec in tables[0].items()
              if name not in skip and all(t.get(name) == spec for t in tables[1:])}
    maps: dict[str, np.ndarray] = {}
    values = {}
    for name, (location, offset, length, dtype, dims) in common.items():
        path = paths[0].parent / location
        if skip:
            raw = np.fromfile(path, dtype=np.uint8, count=length, offset=offset)
        else:
            if location not in maps:
                maps[location] = np.fromfile(path, dtype=np.uint8)
            raw = maps[location][offset : offset + length]
        values[name] = ort.OrtValue.ortvalue_from_numpy(raw.view(np.dtype(dtype)).reshape(dims))
    return values


class OnnxSession(Session):
    """The step component's session (and prefill's, where there is one), their common weights held
    once. A call binds the states as the OrtValues the last call returned (never copied to numpy)."""

    def __init__(self, manifest: ExportManifest, step: str, session_options: ort.SessionOptions | None = None,
                 providers: list | None = None, share_weights: bool = True):
        """`share_weights`: with several components, hold their common weights once in memory for
        all sessions (onnxruntime's per-session prepacked copies off, or, where an op needs them,
        only the weights no prepacking op reads shared: `weight_policy` says which); False keeps
        onnxruntime's defaults (faster prefill, a weight copy per session). With sharing, the shared
        initializers are added to `session_options`: do not reuse that object for another runner."""
        super().__init__()
        check_runtime_versions(manifest.data, ["onnxruntime"])
        providers = providers or ["CPUExecutionProvider"]
        # The encoder's (open_encoder): it shares no weights with the decoder.
        self.callers_options, self.providers = session_options, providers
        names = [n for n in (PREFILL, step) if manifest.has_component(n)]
        self.weight_policy = "per-session"
        if share_weights and len(names) > 1:
            session_options = session_options or ort.SessionOptions()
            self.weight_policy = self._share_weights(session_options, [manifest.file_of(n) for n in names])

        def session(name: str) -> ort.InferenceSession:
            return ort.InferenceSession(str(manifest.file_of(name)), session_options, providers=providers)

        self.decode = session(step)
        self.prefill_session = session(PREFILL) if manifest.has_component(PREFILL) else None
        self.pairs = [(p["input"], p["output"]) for p in manifest.generation["cache_pairs"]]
        inputs = {i.name: i for i in self.decode.get_inputs()}
        self.cache_specs = {name: inputs[name] for name, _ in self.pairs}
        self.replaced = manifest.replaced_states(step)
        self.session_inputs = {s: {i.name for i in s.get_inputs()} for s in (self.decode, self.prefill_session) if s}
        # A static cache: the step graph writes its buffers in place (bound as input and output).
        self.static = manifest.cache == CACHE_STATIC
        self.binding: ort.IOBinding | None = None  # the last call's
        # past_present_share_buffer: GroupQueryAttention appends to its past buffer in place.
        self.appends_in_place = bool(manifest.generation.get(SHARES_BUFFER)) and not self.static
        self.last_logits_only = manifest.generation.get(LOGITS) == "last"
        if self.appends_in_place:
            logits = next(o for o in self.decode.get_outputs() if o.name == "logits")
            self.vocab, self.logits_dtype = logits.shape[-1], _NUMPY_TYPES[logits.type]
        self.bound_states: dict | None = None  # the in-place buffers the step binding holds
        # The inputs the prefill graph takes besides the tokens (an encoder's output), and its
        # outputs every later step takes (output, step input): optimum's encoder-decoder layout,
        # whose first decoder step projects the cross-attention state.
        self.prefill_fixed: dict[str, ort.OrtValue] = {}
        self.kept_from_prefill: list[tuple[str, str]] = []

    def open_encoder(self, manifest: ExportManifest) -> None:
        self.encoder = ort.InferenceSession(str(manifest.file_of(ENCODER)), self.callers_options,
                                            providers=self.providers)
        # optimum's layout: the decoder's first step (prefill) projects the cross-attention state
        # from encoder_hidden_states; else the encoder computes it.
        self.cross = cross_state_names(manifest, PREFILL if self.prefill_session is not None else ENCODER)
        if self.prefill_session is not None:
            self.kept_from_prefill = self.cross

    def encode(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The encoder's state outputs stay OrtValues bound as the decoder's inputs on every call."""
        binding = self.encoder.io_binding()
        for name, value in inputs.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(value))
        names = [o.name for o in self.encoder.get_outputs()]
        for name in names:
            binding.bind_output(name, "cpu")
        self.encoder.run_with_iobinding(binding)
        outputs = dict(zip(names, binding.get_outputs()))
        given = {k: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)) for k, v in inputs.items()}
        if self.prefill_session is not None:  # the first step reads the encoder's output and padding
            self.prefill_fixed = decoder_feeds([], outputs, given, self.input_names(PREFILL))
            self.prefill_fixed["encoder_hidden_states"] = outputs["last_hidden_state"]
            self.fixed = decoder_feeds([], outputs, given, self.session_inputs[self.decode])
            return {name: value.numpy() for name, value in outputs.items()}
        self.fixed = decoder_feeds(self.cross, outputs, given, self.session_inputs[self.decode])
        return {name: value.numpy() for name, value in encoder_results(self.cross, outputs).items()}

    def _share_weights(self, session_options: ort.SessionOptions, paths: list[Path]) -> str:
        """Hands the sessions one copy of their common weights, as fast as each export allows:
        without prepacking where no op needs it, else with prepacking on and only the weights no
        prepacking op reads shared (those get a prepacked copy per session, the unpacked one freed)."""
        needs_prepacking, prepacked = prepacked_inputs(paths)
        if not needs_prepacking:
            session_options.add_session_config_entry("session.disable_prepacking", "1")
        # The OrtValues must outlive the sessions that read them.
        self.weights = shared_weights(paths, skip=prepacked if needs_prepacking else frozenset())
        for name, value in self.weights.items():
            session_options.add_initializer(name, value)
        return "shared, prepacked per session" if needs_prepacking else "shared, not prepacked"

    def has(self, component: str) -> bool:
        return self.prefill_session is not None if component == PREFILL else True

    def _session(self, component: str) -> ort.InferenceSession:
        return self.prefill_session if component == PREFILL else self.decode

    def input_names(self, component: str) -> set[str]:
        return self.session_inputs[self._session(component)]

    def state_shape(self, name: str, batch: int, length: int) -> list[int]:
        return state_buffer_shape(self.cache_specs[name].shape, batch, length, name in self.replaced)

    def state_dtype(self, name: str) -> type:
        return _NUMPY_TYPES[self.cache_specs[name].type]

    def zeros(self, name: str, batch: int, length: int) -> ort.OrtValue:
        return ort.OrtValue.ortvalue_from_numpy(np.zeros(self.state_shape(name, batch, length), self.state_dtype(name)))

    def empty_states(self, batch: int) -> dict[str, ort.OrtValue]:
        return {name: self.zeros(name, batch, 0) for name, _ in self.pairs}  # a replaced state: zeros

    def static_buffers(self, batch: int, length: int) -> dict[str, ort.OrtValue]:
        return {name: self.zeros(name, batch, length) for name, _ in self.pairs}

    def growing_buffers(self, batch: int, capacity: int, prompt: dict | None) -> dict[str, ort.OrtValue]:
        buffers = {}
        for name, _ in self.pairs:
            buf = np.zeros(self.state_shape(name, batch, capacity), self.state_dtype(name))
            if prompt is not None:
                rows = prompt[name].numpy()
                buf[:, :, : rows.shape[2]] = rows  # a replaced state: all of it
            buffers[name] = ort.OrtValue.ortvalue_from_numpy(buf)
        return buffers

    def takes_several_tokens(self, batch: int) -> bool:
        # GroupQueryAttention (the shared buffer's attention) takes several tokens over a past at batch 1 only.
        return batch == 1 or not self.appends_in_place

    def bind_fixed(self, binding: ort.IOBinding) -> None:
        for name, value in self.fixed.items():
            binding.bind_ortvalue_input(name, value)

    def run(self, component: str, feeds: dict[str, np.ndarray],
            states: dict[str, ort.OrtValue]) -> tuple[np.ndarray, dict[str, ort.OrtValue]]:
        session = self._session(component)
        if self.appends_in_place and session is self.decode:
            return self._run_appending(feeds, states), states
        binding = self.binding = session.io_binding()
        for name, value in feeds.items():
            if name in self.session_inputs[session]:  # a graph may count its positions itself
                binding.bind_cpu_input(name, np.ascontiguousarray(value))
        for name, value in states.items():
            binding.bind_ortvalue_input(name, value)
        if session is self.decode:
            self.bind_fixed(binding)
        else:
            for name, value in self.prefill_fixed.items():
                binding.bind_ortvalue_input(name, value)
        if self.static and session is self.decode:
            # logits first (get_outputs() lists outputs in binding order), then each cache output
            # bound to its input's buffer, so the graph updates it in place
            binding.bind_output("logits", "cpu")
            for name, present in self.pairs:
                binding.bind_ortvalue_output(present, states[name])
            session.run_with_iobinding(binding)
            return binding.get_outputs()[0].numpy()[:, -1], states
        for out in session.get_outputs():
            binding.bind_output(out.name, "cpu")
        session.run_with_iobinding(binding)
        named = dict(zip([o.name for o in session.get_outputs()], binding.get_outputs()))
        if session is not self.decode:
            self.fixed.update({step_input: named[output] for output, step_input in self.kept_from_prefill})
        return named["logits"].numpy()[:, -1], {name: named[present] for name, present in self.pairs}


    def _run_appending(self, feeds: dict[str, np.ndarray], states: dict[str, ort.OrtValue]) -> np.ndarray:
        """The step graph over buffers it appends to in place. The buffers (and the fixed inputs)
        are bound once per generation and the binding kept: a step binds only its feeds and the
        logits, which the graph writes straight into a fresh array the caller then owns (after the
        first steps the allocator hands back the same pages: no copy, no page faults)."""
        if states is not self.bound_states:
            binding = self.binding = self.decode.io_binding()
            self.bind_fixed(binding)
            for name, present in self.pairs:
                binding.bind_ortvalue_input(name, states[name])
                binding.bind_ortvalue_output(present, states[name])
            self.bound_states = states
        binding = self.binding
        for name, value in feeds.items():
            if name in self.session_inputs[self.decode]:  # a graph may count its positions itself
                binding.bind_cpu_input(name, np.ascontiguousarray(value))
        tokens = feeds["input_ids"] if "input_ids" in feeds else feeds["inputs_embeds"]
        rows = 1 if self.last_logits_only else tokens.shape[1]
        logits = np.empty([tokens.shape[0], rows, self.vocab], self.logits_dtype)
        binding.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))
        self.decode.run_with_iobinding(binding)
        return logits[:, -1]


class OnnxDynamicRunner(DynamicCache):
    """A dynamic cache: present -> past passed as OrtValues (the graph's Concat copies the growing
    cache each step)."""

    SESSION = OnnxSession


class OnnxStaticRunner(StaticCache):
    """A static cache: each cache pair bound to one buffer the graph scatters into."""

    SESSION = OnnxSession

    @property
    def binding(self) -> ort.IOBinding | None:
        """The last call's binding (its cache outputs are the buffers)."""
        return self.session.binding


class OnnxSharedBufferRunner(OnnxDynamicRunner):
    """A shared buffer: GroupQueryAttention appends each call's rows in place into one buffer per
    cache pair, as long as the generation (the dynamic driver over a session that appends in place)."""

    shared = True

    @property
    def buffers(self) -> dict[str, ort.OrtValue]:
        return self.past

    @property
    def binding(self) -> ort.IOBinding | None:
        """The binding of the step graph (its cache outputs are the buffers)."""
        return self.session.binding


def runner_class(manifest: ExportManifest) -> type[DecodeRunner]:
    """The runner class of an ONNX generation export, by its cache: static, shared buffer or dynamic."""
    if manifest.cache == CACHE_STATIC:
        return OnnxStaticRunner
    return OnnxSharedBufferRunner if manifest.generation.get(SHARES_BUFFER) else OnnxDynamicRunner
