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
from .runner import (DecodeRunner, state_buffer_shape, static_cache_mask, GenerationError, check_cache_position_call, check_request, left_padded_positions,
                     park_padding)
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


class OnnxRuntimeRunner(DecodeRunner):
    # The component a decode loop repeats (an encoder-decoder's is its decoder).
    STEP = DECODE

    def __init__(self, manifest: ExportManifest, session_options: ort.SessionOptions | None = None,
                 providers: list | None = None, share_weights: bool = True):
        """`share_weights`: with several components, hold their common weights once in memory for
        all sessions (onnxruntime's per-session prepacked copies off, or, where an op needs them,
        only the weights no prepacking op reads shared: `weight_policy` says which); False keeps
        onnxruntime's defaults (faster prefill, a weight copy per session). With sharing, the shared
        initializers are added to `session_options`: do not reuse that object for another runner."""
        self.manifest = manifest
        check_runtime_versions(manifest.data, ["onnxruntime"])
        gen = manifest.generation
        self.static = manifest.cache == CACHE_STATIC
        self.shared = bool(gen.get(SHARES_BUFFER)) and not self.static
        self.last_logits_only = gen.get(LOGITS) == "last"
        providers = providers or ["CPUExecutionProvider"]
        names = [n for n in (PREFILL, self.STEP) if manifest.has_component(n)]
        self.weight_policy = "per-session"
        if share_weights and len(names) > 1:
            session_options = session_options or ort.SessionOptions()
            self.weight_policy = self._share_weights(session_options, [manifest.file_of(n) for n in names])

        def session(name: str) -> ort.InferenceSession:
            return ort.InferenceSession(str(manifest.file_of(name)), session_options, providers=providers)

        self.decode = session(self.STEP)
        self.prefill_session = session(PREFILL) if manifest.has_component(PREFILL) else None
        self.pairs = [(p["input"], p["output"]) for p in gen["cache_pairs"]]
        inputs = {i.name: i for i in self.decode.get_inputs()}
        self.cache_specs = {name: inputs[name] for name, _ in self.pairs}
        self.replaced = manifest.replaced_states(self.STEP)
        self.decode_input_names = set(inputs)
        self.max_cache_len = int(gen.get("max_cache_len", 0))
        self.buffers: dict[str, ort.OrtValue] = {}
        self.binding: ort.IOBinding | None = None
        # Inputs every call of the step takes unchanged (an encoder's cross-attention state), and
        # those the prefill graph takes besides the tokens (an encoder's output).
        self.fixed_inputs: dict[str, ort.OrtValue] = {}
        self.prefill_fixed: dict[str, ort.OrtValue] = {}
        self.input_names = {s: {i.name for i in s.get_inputs()} for s in (self.decode, self.prefill_session) if s}

    def _bind_fixed(self, binding: ort.IOBinding) -> None:
        for name, value in self.fixed_inputs.items():
            binding.bind_ortvalue_input(name, value)

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

    def _run_dynamic(self, session: ort.InferenceSession, feeds: dict[str, np.ndarray],
                     past: list[ort.OrtValue] | None) -> np.ndarray:
        binding = session.io_binding()
        for name, value in feeds.items():
            if name in self.input_names[session]:  # a graph may count its positions itself
                binding.bind_cpu_input(name, value)
        for (name, _), value in zip(self.pairs, past or []):
            binding.bind_ortvalue_input(name, value)
        if session is self.decode:
            self._bind_fixed(binding)
        else:
            for name, value in self.prefill_fixed.items():
                binding.bind_ortvalue_input(name, value)
        for out in session.get_outputs():
            binding.bind_output(out.name, "cpu")
        session.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        names = [o.name for o in session.get_outputs()]
        self.past = [outputs[names.index(present)] for _, present in self.pairs]
        if session is not self.decode:
            self._prefilled(dict(zip(names, outputs)))
        return outputs[names.index("logits")].numpy()[:, -1]

    def _prefilled(self, outputs: dict[str, ort.OrtValue]) -> None:
        """What the prefill graph's outputs other than the cache give the steps (none here)."""

    def _state_shape(self, name: str, batch: int, length: int) -> list[int]:
        return state_buffer_shape(self.cache_specs[name].shape, batch, length, name in self.replaced)

    def _empty_past(self, batch: int) -> list[ort.OrtValue]:
        values = []
        for name, _ in self.pairs:
            spec = self.cache_specs[name]
            shape = self._state_shape(name, batch, 0)  # a replaced state starts as zeros
            values.append(ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, _NUMPY_TYPES[spec.type])))
        return values

    # -- shared buffer --------------------------------------------------------------------------
    def _allocate_shared(self, batch: int, capacity: int, attention_mask: np.ndarray,
                         prompt: list[ort.OrtValue] | None) -> None:
        """One buffer per cache pair for the whole generation, holding the prompt's rows if given,
        the decode binding that reuses them for every step, and the mask starting with the prompt's."""
        self.buffers = {}
        self.binding = self.decode.io_binding()
        self._bind_fixed(self.binding)
        for i, (name, present) in enumerate(self.pairs):
            spec = self.cache_specs[name]
            buf = np.zeros(self._state_shape(name, batch, capacity), _NUMPY_TYPES[spec.type])
            if prompt is not None:
                rows = prompt[i].numpy()
                buf[:, :, : rows.shape[2]] = rows  # a replaced state: all of it
            value = ort.OrtValue.ortvalue_from_numpy(buf)
            self.buffers[name] = value
            self.binding.bind_ortvalue_input(name, value)
            self.binding.bind_ortvalue_output(present, value)
        self.capacity = capacity
        logits = next(o for o in self.decode.get_outputs() if o.name == "logits")
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
        self.decode.run_with_iobinding(b)
        return logits[:, -1]

    def _prefill_shared(self, input_ids: np.ndarray, attention_mask: np.ndarray, positions: np.ndarray,
                        max_new_tokens: int) -> np.ndarray:
        batch, length = input_ids.shape
        capacity = min(length + max_new_tokens, self.manifest.dim_bounds("total_sequence")[1])
        if self.prefill_session is not None:
            feeds = {**self._token_inputs(input_ids), "attention_mask": attention_mask,
                     "position_ids": self._position_ids(input_ids, positions)}
            logits = self._run_dynamic(self.prefill_session, feeds, None)
            self._allocate_shared(batch, capacity, attention_mask, self.past)
            self.past = None
        else:  # the prompt through the decode graph
            self._allocate_shared(batch, capacity, attention_mask, None)
            for name, value in self._token_inputs(input_ids).items():
                self.binding.bind_cpu_input(name, value)
            if "position_ids" in self.decode_input_names:
                self.binding.bind_cpu_input("position_ids", self._position_ids(input_ids, positions))
            logits = self._run_shared(length, length)
        self._bind_step_buffers()
        self.length = length
        return logits

    def _bind_step_buffers(self) -> None:
        if self.TOKENS == "input_ids":  # bound once: each step writes its tokens into step_ids
            self.binding.bind_cpu_input("input_ids", self.step_ids)
        if "position_ids" in self.decode_input_names:  # else the graph counts them
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
        if "position_ids" in self.decode_input_names:
            self.binding.bind_cpu_input("position_ids", self._position_ids(ids, positions))
        self.length += ids.shape[1]
        logits = self._run_shared(self.length, ids.shape[1])
        self._bind_step_buffers()
        return logits

    # -- static cache ---------------------------------------------------------------------------
    def _allocate_static(self, batch: int, length: int) -> None:
        self.binding = self.decode.io_binding()
        self._bind_fixed(self.binding)
        self.buffers = {}
        for name, _ in self.pairs:
            spec = self.cache_specs[name]
            buf = ort.OrtValue.ortvalue_from_numpy(np.zeros(self._state_shape(name, batch, length),
                                                            _NUMPY_TYPES[spec.type]))
            self.buffers[name] = buf
            self.binding.bind_ortvalue_input(name, buf)
        self.cache_len = length

    def _bind_static_outputs(self) -> None:
        # Logits change shape between prefill and steps, so outputs are bound afresh each run:
        # logits first (get_outputs() lists outputs in binding order), then each cache output to
        # its input's buffer, so the graph updates it in place.
        self.binding.clear_binding_outputs()
        self.binding.bind_output("logits", "cpu")
        for name, out in self.pairs:
            self.binding.bind_ortvalue_output(out, self.buffers[name])

    def _run_static(self, input_ids: np.ndarray, positions: np.ndarray, real: np.ndarray) -> np.ndarray:
        for name, value in self._token_inputs(input_ids).items():
            self.binding.bind_cpu_input(name, np.ascontiguousarray(value))
        if "cache_position" in self.decode_input_names:  # the graph builds mask and positions
            check_cache_position_call(positions, real)
            self.binding.bind_cpu_input("cache_position", np.ascontiguousarray(positions[0]))
        else:
            self.binding.bind_cpu_input("position_ids", np.ascontiguousarray(positions))
            self.binding.bind_cpu_input("attention_mask", static_cache_mask(positions, self.cache_len, real))
        self._bind_static_outputs()
        self.decode.run_with_iobinding(self.binding)
        return self.binding.get_outputs()[0].numpy()[:, -1]

    # -- DecodeRunner -----------------------------------------------------------------------------
    def steps_take_several_tokens(self, batch: int) -> bool:
        # GroupQueryAttention (the shared buffer's attention) takes several tokens over a past at batch 1 only.
        return super().steps_take_several_tokens(batch) and (batch == 1 or not self.shared)

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray, max_new_tokens: int) -> np.ndarray:
        check_request(self.manifest, input_ids, max_new_tokens)
        positions = left_padded_positions(attention_mask)
        self.attention_mask = attention_mask
        self.next_position = positions[:, -1] + 1
        if self.static:
            # A cache_position graph's buffers are as long as its mask: max_cache_len.
            fixed = "cache_position" in self.decode_input_names
            self._allocate_static(input_ids.shape[0], self.max_cache_len if fixed else
                                  min(self.max_cache_len, input_ids.shape[1] + max_new_tokens))
            return self._run_static(input_ids, park_padding(positions, attention_mask, self.cache_len), attention_mask)
        if self.shared:
            return self._prefill_shared(input_ids, attention_mask, positions, max_new_tokens)
        feeds = {**self._token_inputs(input_ids), "attention_mask": attention_mask,
                     "position_ids": self._position_ids(input_ids, positions)}
        if self.prefill_session is not None:
            return self._run_dynamic(self.prefill_session, feeds, None)
        return self._run_dynamic(self.decode, feeds, self._empty_past(input_ids.shape[0]))

    def step(self, tokens: np.ndarray) -> np.ndarray:
        ids, positions = self._advance(tokens)
        count = ids.shape[1]
        if self.static:
            if positions.max() >= self.cache_len:
                raise GenerationError(f"generation reached the cache length {self.cache_len}")
            return self._run_static(ids, positions, np.ones_like(ids))
        if self.shared:
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
        self.attention_mask = np.concatenate([self.attention_mask, np.ones_like(ids)], axis=1)
        feeds = {**self._token_inputs(ids), "attention_mask": self.attention_mask,
                 "position_ids": self._position_ids(ids, positions)}
        return self._run_dynamic(self.decode, feeds, self.past)


class OnnxSeq2SeqRunner(OnnxRuntimeRunner):
    """An encoder-decoder export (hfexport.seq2seq): the decoder is the step; `encode(**inputs)`
    runs the encoder once, and its state outputs stay OrtValues bound as the decoder's inputs on
    every call (never copied per step)."""

    STEP = DECODER

    def __init__(self, manifest: ExportManifest, session_options: ort.SessionOptions | None = None,
                 providers: list | None = None, **options):
        super().__init__(manifest, session_options=session_options, providers=providers, **options)
        self.encoder = ort.InferenceSession(str(manifest.file_of(ENCODER)), session_options,
                                            providers=providers or ["CPUExecutionProvider"])
        # optimum's layout: the decoder's first step (prefill) projects the cross-attention state
        # from encoder_hidden_states; else the encoder computes it.
        self.cross = cross_state_names(manifest, PREFILL if self.prefill_session is not None else ENCODER)

    def _prefilled(self, outputs: dict[str, ort.OrtValue]) -> None:
        self.fixed_inputs.update({decoder_input: outputs[output] for output, decoder_input in self.cross})

    def encode(self, **inputs) -> dict[str, np.ndarray]:
        """Runs the encoder; returns its outputs other than the decoder's state (last_hidden_state)."""
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
            self.prefill_fixed = decoder_feeds([], outputs, given, self.input_names[self.prefill_session])
            self.prefill_fixed["encoder_hidden_states"] = outputs["last_hidden_state"]
            self.fixed_inputs = decoder_feeds([], outputs, given, self.decode_input_names)
            return {name: value.numpy() for name, value in outputs.items()}
        self.fixed_inputs = decoder_feeds(self.cross, outputs, given, self.decode_input_names)
        return {name: value.numpy() for name, value in encoder_results(self.cross, outputs).items()}
