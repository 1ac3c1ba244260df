"""Decode loop over onnxruntime (Python API: the onnxruntime wheel ships no C/C++ headers, and
Debian has no libonnxruntime-dev here). Three cache mechanics, as the manifest says:
- shared buffer (`past_present_share_buffer`, the ort-gqa default): each past/present pair is
  bound once to one buffer of the whole generation's length, which GroupQueryAttention appends to
  in place; the prompt's cache is copied in once after a separate prefill graph, and every step
  rebinds only the grown mask and the logits array it returns (no per-step cache copy);
- dynamic: present -> past passed as OrtValues without copying to numpy (the graph's Concat
  copies the growing cache each step);
- static: each input./output. pair bound to one buffer the graph scatters into.
When several components read one weight file (prefill + decode), the weights are read once and
handed to every session (see shared_weights)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from .manifest import CACHE_STATIC, DECODE, DECODER, ENCODER, LOGITS, PREFILL, SHARES_BUFFER, ExportManifest
from .seq2seq import cross_state_names, decoder_feeds, encoder_results
from .cache_driver import DynamicCache, Session, SessionRunner, StaticCache
from .runner import DecodeRunner, GenerationError, check_request, left_padded_positions, state_buffer_shape
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
    whether to prepack (OnnxRuntimeRunner._share_weights; bench/bench_runner_memory.py has the
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
        callers_options = session_options  # the encoder's: it shares no weights with the decoder
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
        self.decode_input_names = set(inputs)
        self.session_inputs = {s: {i.name for i in s.get_inputs()} for s in (self.decode, self.prefill_session) if s}
        # A static cache: the step graph writes its buffers in place (bound as input and output).
        self.static = manifest.cache == CACHE_STATIC
        self.binding: ort.IOBinding | None = None  # the last call's
        # The inputs the prefill graph takes besides the tokens (an encoder's output), and its
        # outputs every later step takes (output, step input): optimum's encoder-decoder layout,
        # whose first decoder step projects the cross-attention state.
        self.prefill_fixed: dict[str, ort.OrtValue] = {}
        self.kept_from_prefill: list[tuple[str, str]] = []
        if step == DECODER:
            self._open_encoder(manifest, callers_options, providers)

    def _open_encoder(self, manifest: ExportManifest, session_options: ort.SessionOptions | None,
                      providers: list) -> None:
        self.encoder = ort.InferenceSession(str(manifest.file_of(ENCODER)), session_options, providers=providers)
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
            self.fixed = decoder_feeds([], outputs, given, self.decode_input_names)
            return {name: value.numpy() for name, value in outputs.items()}
        self.fixed = decoder_feeds(self.cross, outputs, given, self.decode_input_names)
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

    def bind_fixed(self, binding: ort.IOBinding) -> None:
        for name, value in self.fixed.items():
            binding.bind_ortvalue_input(name, value)

    def run(self, component: str, feeds: dict[str, np.ndarray],
            states: dict[str, ort.OrtValue]) -> tuple[np.ndarray, dict[str, ort.OrtValue]]:
        session = self._session(component)
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


class OnnxSharedBufferRunner(SessionRunner):
    """A shared buffer: GroupQueryAttention appends each call's rows in place into one buffer per
    cache pair, as long as the generation."""

    # The component a decode loop repeats (an encoder-decoder's is its decoder).
    STEP = DECODE
    shared = True

    def __init__(self, manifest: ExportManifest, **options):
        self.manifest = manifest
        self.session = OnnxSession(manifest, self.STEP, **options)
        self.last_logits_only = manifest.generation.get(LOGITS) == "last"
        self.buffers: dict[str, ort.OrtValue] = {}
        self.binding: ort.IOBinding | None = None

    # -- shared buffer --------------------------------------------------------------------------
    def _allocate_shared(self, batch: int, capacity: int, attention_mask: np.ndarray,
                         prompt: dict[str, ort.OrtValue] | None) -> None:
        """One buffer per cache pair for the whole generation, holding the prompt's rows if given,
        the decode binding that reuses them for every step, and the mask starting with the prompt's."""
        self.buffers = {}
        self.binding = self.session.decode.io_binding()
        self.session.bind_fixed(self.binding)
        for name, present in self.session.pairs:
            buf = np.zeros(self.session.state_shape(name, batch, capacity), self.session.state_dtype(name))
            if prompt is not None:
                rows = prompt[name].numpy()
                buf[:, :, : rows.shape[2]] = rows  # a replaced state: all of it
            value = ort.OrtValue.ortvalue_from_numpy(buf)
            self.buffers[name] = value
            self.binding.bind_ortvalue_input(name, value)
            self.binding.bind_ortvalue_output(present, value)
        self.capacity = capacity
        logits = next(o for o in self.session.decode.get_outputs() if o.name == "logits")
        self.vocab, self.logits_dtype = logits.shape[-1], _NUMPY_TYPES[logits.type]
        # The mask grows by one column per step: kept in one array, bound as a prefix view.
        self.mask_buffer = np.ones([batch, capacity], np.int64)
        self.mask_buffer[:, : attention_mask.shape[1]] = attention_mask
        # A step's token and position: each step writes them in place (bound after the prompt).
        self.step_ids = np.zeros([batch, 1], np.int64)
        self.step_positions = np.zeros([batch, 1], np.int64)
        self.step_position_ids = self.step_positions  # the graph's position_ids, if the hook maps them

    def _run_shared(self, length: int, rows: int) -> np.ndarray:
        """Runs the decode graph over the shared buffers with the mask's first `length` columns and
        the bound ids and positions, whose query length is `rows`."""
        b = self.binding
        b.bind_cpu_input("attention_mask", np.ascontiguousarray(self.mask_buffer[:, :length]))
        # The graph writes the logits straight into a fresh array the caller then owns (after the
        # first steps the allocator hands back the same pages: no copy, no page faults).
        rows = 1 if self.last_logits_only else rows
        logits = np.empty([self.step_ids.shape[0], rows, self.vocab], self.logits_dtype)
        b.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))
        self.session.decode.run_with_iobinding(b)
        return logits[:, -1]

    def _prefill_shared(self, input_ids: np.ndarray, attention_mask: np.ndarray, positions: np.ndarray,
                        max_new_tokens: int) -> np.ndarray:
        batch, length = input_ids.shape
        capacity = min(length + max_new_tokens, self.manifest.dim_bounds("total_sequence")[1])
        if self.session.prefill_session is not None:
            feeds = {**self._token_inputs(input_ids), "attention_mask": attention_mask,
                     "position_ids": self._position_ids(input_ids, positions)}
            logits, prompt = self.session.run(PREFILL, feeds, {})
            self._allocate_shared(batch, capacity, attention_mask, prompt)
        else:  # the prompt through the decode graph
            self._allocate_shared(batch, capacity, attention_mask, None)
            for name, value in self._token_inputs(input_ids).items():
                self.binding.bind_cpu_input(name, value)
            if "position_ids" in self.session.decode_input_names:
                self.binding.bind_cpu_input("position_ids", self._position_ids(input_ids, positions))
            logits = self._run_shared(length, length)
        self._bind_step_buffers()
        self.length = length
        return logits

    def _bind_step_buffers(self) -> None:
        if self.TOKENS == "input_ids":  # bound once: each step writes its tokens into step_ids
            self.binding.bind_cpu_input("input_ids", self.step_ids)
        if "position_ids" in self.session.decode_input_names:  # else the graph counts them
            # Bound once: step_positions, or a buffer (M-RoPE's [3, batch, 1]) each step writes the hook's rows into.
            rows = self._position_ids(self.step_ids, self.step_positions)
            if rows is not self.step_positions:
                self.step_position_ids = np.array(rows, np.int64)
            self.binding.bind_cpu_input("position_ids", self.step_position_ids)

    def _extend_shared(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Several tokens through the decode graph over the shared buffers (a prompt fed in chunks);
        the one-token step's bound inputs are bound again after."""
        for name, value in self._token_inputs(ids).items():
            self.binding.bind_cpu_input(name, value)
        if "position_ids" in self.session.decode_input_names:
            self.binding.bind_cpu_input("position_ids", self._position_ids(ids, positions))
        self.length += ids.shape[1]
        logits = self._run_shared(self.length, ids.shape[1])
        self._bind_step_buffers()
        return logits

    # -- DecodeRunner -----------------------------------------------------------------------------
    def steps_take_several_tokens(self, batch: int) -> bool:
        # GroupQueryAttention (the shared buffer's attention) takes several tokens over a past at batch 1 only.
        return super().steps_take_several_tokens(batch) and batch == 1

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray, max_new_tokens: int) -> np.ndarray:
        check_request(self.manifest, input_ids, max_new_tokens)
        positions = left_padded_positions(attention_mask)
        self.next_position = positions[:, -1] + 1
        return self._prefill_shared(input_ids, attention_mask, positions, max_new_tokens)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        ids, positions = self._advance(tokens)
        count = ids.shape[1]
        if self.length + count > self.capacity:
            raise GenerationError(f"generation reached the cache length {self.capacity}")
        if count > 1:
            return self._extend_shared(ids, positions)
        self.length += 1
        self.step_ids[:, 0] = ids[:, 0]
        if self.TOKENS != "input_ids":
            for name, value in self._token_inputs(self.step_ids).items():
                self.binding.bind_cpu_input(name, value)
        self.step_positions[:] = positions
        if self.step_position_ids is not self.step_positions:
            self.step_position_ids[:] = self._position_ids(self.step_ids, self.step_positions)
        return self._run_shared(self.length, 1)


def runner_class(manifest: ExportManifest) -> type[DecodeRunner]:
    """The runner class of an ONNX generation export, by its cache: static, shared buffer or dynamic."""
    if manifest.cache == CACHE_STATIC:
        return OnnxStaticRunner
    return OnnxSharedBufferRunner if manifest.generation.get(SHARES_BUFFER) else OnnxDynamicRunner
