"""The Python runners' split between a runtime and a cache mechanic (docs/notes/runner-session-split.md).

A `Session` is one runtime's side of a component call: feeds by name in, the last position's
logits and the states out. It knows nothing of positions, masks or cache policy. A cache driver is
the sequence bookkeeping of one mechanic, written once over any session: `DynamicCache` serves a
cache that grows with each call, either as past/present pairs the session hands back (dynamic) or
as variables the runtime holds between calls (stateful, a session that `holds_state`). `StaticCache`
serves buffers of a fixed length the graph writes in place at each token's position. A format's
runner is a driver with its session class (`SESSION`). Two mixins go over any of them: the
vision-language one (hfexport.vlm: `_token_inputs`, `_position_ids`, `STEP`) and `EncoderDecoder`
(the decoder as the step, `encode` through the session's encoder, whose outputs the session keeps
as the step's `fixed` inputs)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from .manifest import DECODE, DECODER, PREFILL, ExportManifest
from .runner import (DecodeRunner, GenerationError, check_cache_position_call, check_request, left_padded_positions,
                     park_padding, static_cache_mask)


class Session(ABC):
    """One runtime's calls of an export's step component (and its `prefill` where there is one)."""

    # The runtime keeps the cache between calls (OpenVINO's variables): no state crosses a call,
    # and `reset` starts a sequence.
    holds_state: ClassVar[bool] = False
    # A static cache's buffers are as long as max_cache_len whatever the request (a program
    # written for transformers' StaticCache, whose spec holds the length).
    full_length_buffers: bool = False
    # A dynamic cache the graph appends to in place (onnxruntime's GroupQueryAttention over a
    # shared past/present buffer): the driver asks for buffers of the generation's length once
    # (`growing_buffers`) and passes the same states on every call.
    appends_in_place: bool = False

    def __init__(self) -> None:
        # Inputs every call of the step takes unchanged (an encoder's output or cross-attention
        # state), in the runtime's own type.
        self.fixed: dict[str, Any] = {}

    @abstractmethod
    def has(self, component: str) -> bool:
        """Whether the export has this component for the session to run."""

    @abstractmethod
    def empty_states(self, batch: int) -> dict[str, Any]:
        """Each state's value before a sequence's first call (a zero-length past, a replaced
        state's zeros), by input name, in the runtime's own type."""

    @abstractmethod
    def input_names(self, component: str) -> set[str]:
        """The names of the component's inputs."""

    def growing_buffers(self, batch: int, capacity: int, prompt: dict[str, Any] | None) -> dict[str, Any]:
        """Buffers of `capacity` positions a graph that `appends_in_place` writes each call's rows
        into, holding the prompt's states (a prefill graph's presents) where given."""
        raise GenerationError(f"{type(self).__name__} has no buffers to append to")

    def takes_several_tokens(self, batch: int) -> bool:
        """Whether the step graph takes several tokens per row over a past for this batch."""
        return True

    def static_buffers(self, batch: int, length: int) -> dict[str, Any]:
        """A static cache's zeroed buffers of `length` slots for `batch` rows (and any other state
        the graph writes in place), by input name, in the runtime's own type."""
        raise GenerationError(f"{type(self).__name__} has no static cache buffers")

    @abstractmethod
    def run(self, component: str, feeds: dict[str, np.ndarray], states: dict[str, Any]) -> tuple[np.ndarray, dict]:
        """Runs `component` on `feeds` (numpy, by input name; names the graph does not take are
        dropped) and the states going in; returns the last position's logits [batch, vocab] and the
        states for the next call, by input name (a static cache's: the buffers it was given, written
        in place)."""

    def reset(self) -> None:
        """Starts a sequence in a session that holds its state."""

    def open_encoder(self, manifest: ExportManifest) -> None:
        """Opens an encoder-decoder export's encoder, which `encode` runs (the session's step is
        the export's `decoder`)."""
        raise GenerationError(f"{type(self).__name__} runs no encoder")

    def encode(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """An encoder-decoder's encoder call (after `open_encoder`): sets `fixed`
        to what every decoder call takes from it (its write-once state, its padding, in the
        runtime's own type) and returns its other outputs (last_hidden_state) as numpy."""
        raise GenerationError(f"{type(self).__name__} runs no encoder")


class SessionRunner(DecodeRunner):
    """A runner over a session of its `SESSION` class, opened for its `STEP` component."""

    SESSION: ClassVar[type[Session]]
    STEP = DECODE

    def __init__(self, manifest: ExportManifest, **options):
        self.manifest = manifest
        self.session = self.SESSION(manifest, self.STEP, **options)


class DynamicCache(SessionRunner):
    """prefill / step over a cache that grows by each call's tokens: left-padded positions, the 2-D
    mask growing by each step's columns, the prompt through `prefill` (or the step graph over an
    empty past), each step's past the last call's present. Over a session that holds its state
    (stateful), prefill resets it and no past is passed; over one that appends in place, the
    past is one set of buffers as long as the generation, passed on every call."""

    def __init__(self, manifest: ExportManifest, **options):
        super().__init__(manifest, **options)
        self.past: dict[str, Any] = {}
        self.capacity: int | None = None  # the positions the in-place buffers hold

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray, max_new_tokens: int) -> np.ndarray:
        check_request(self.manifest, input_ids, max_new_tokens)
        positions = left_padded_positions(attention_mask)
        self.attention_mask = np.asarray(attention_mask, np.int64)
        self.next_position = positions[:, -1] + 1
        feeds = self._sequence_feeds(np.asarray(input_ids, np.int64), positions)
        batch, length = input_ids.shape
        if self.session.holds_state:
            self.session.reset()
            return self._run(self.STEP, feeds, {})
        if self.session.appends_in_place:
            self.capacity = min(length + max_new_tokens, self.manifest.dim_bounds("total_sequence")[1])
            if not self.session.has(PREFILL):  # the prompt through the step graph, into the buffers
                return self._run(self.STEP, feeds, self.session.growing_buffers(batch, self.capacity, None))
            logits, prompt = self.session.run(PREFILL, feeds, {})
            self.past = self.session.growing_buffers(batch, self.capacity, prompt)
            return logits
        if self.session.has(PREFILL):
            return self._run(PREFILL, feeds, {})
        return self._run(self.STEP, feeds, self.session.empty_states(batch))

    def steps_take_several_tokens(self, batch: int) -> bool:
        return super().steps_take_several_tokens(batch) and self.session.takes_several_tokens(batch)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        ids, positions = self._advance(tokens)
        if self.capacity is not None and self.attention_mask.shape[1] + ids.shape[1] > self.capacity:
            raise GenerationError(f"generation reached the cache length {self.capacity}")
        self.attention_mask = np.concatenate([self.attention_mask, np.ones_like(ids)], axis=1)
        return self._run(self.STEP, self._sequence_feeds(ids, positions), self.past)

    def _sequence_feeds(self, ids: np.ndarray, positions: np.ndarray) -> dict[str, np.ndarray]:
        return {**self._token_inputs(ids), "attention_mask": self.attention_mask,
                "position_ids": self._position_ids(ids, positions)}

    def _run(self, component: str, feeds: dict[str, np.ndarray], past: dict[str, Any]) -> np.ndarray:
        logits, self.past = self.session.run(component, feeds, past)
        return logits


class StaticCache(SessionRunner):
    """prefill / step over buffers of a fixed length that the graph writes in place at each
    token's position: buffers sized once per request (max_cache_len, or the prompt and its new
    tokens where shorter), the prompt's padding parked in the last slots, each call's 4-D mask
    over the slots (or the graph's own, from cache_position), the length checked."""

    def __init__(self, manifest: ExportManifest, **options):
        super().__init__(manifest, **options)
        self.max_cache_len = int(manifest.generation.get("max_cache_len", 0))
        # The graph builds its mask and positions from cache_position (ExecuTorch's LLM runner's form).
        self.takes_cache_position = "cache_position" in self.session.input_names(self.STEP)
        self.buffers: dict[str, Any] = {}

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray, max_new_tokens: int) -> np.ndarray:
        self._check_request(input_ids, attention_mask, max_new_tokens)
        positions = left_padded_positions(attention_mask)
        self.next_position = positions[:, -1] + 1
        batch, length = input_ids.shape
        full = self.takes_cache_position or self.session.full_length_buffers  # a mask as long as max_cache_len
        self.cache_len = self.max_cache_len if full else min(self.max_cache_len, length + max_new_tokens)
        self.buffers = self._allocate(batch)
        return self._run(input_ids, park_padding(positions, attention_mask, self.cache_len), attention_mask)

    def _check_request(self, input_ids: np.ndarray, attention_mask: np.ndarray, max_new_tokens: int) -> None:
        check_request(self.manifest, input_ids, max_new_tokens)

    def _allocate(self, batch: int) -> dict[str, Any]:
        return self.session.static_buffers(batch, self.cache_len)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        ids, positions = self._advance(tokens)
        if positions.max() >= self.cache_len:
            raise GenerationError(f"generation reached the cache length {self.cache_len}")
        return self._run(ids, positions, np.ones_like(ids))

    def _run(self, ids: np.ndarray, positions: np.ndarray, real: np.ndarray) -> np.ndarray:
        if self.takes_cache_position:
            check_cache_position_call(positions, real)
            feeds = {**self._token_inputs(ids), "cache_position": np.ascontiguousarray(positions[0])}
        else:
            feeds = {**self._token_inputs(ids), "attention_mask": static_cache_mask(positions, self.cache_len, real),
                     "position_ids": np.ascontiguousarray(positions)}
        logits, _ = self.session.run(self.STEP, feeds, self.buffers)
        return logits


class EncoderDecoder:
    """Mixed into a format's decode-loop runner (before it in the bases) for an encoder-decoder
    export (hfexport.seq2seq): the decoder is the step, and `encode(**inputs)` runs the encoder
    once; what every decoder call takes from it stays in the runtime's own type as the session's
    fixed inputs, never copied per step."""

    STEP = DECODER

    def __init__(self, manifest: ExportManifest, **options):
        super().__init__(manifest, **options)
        session = getattr(self, "session", None)
        if session is None:  # a runner registered without a session
            raise GenerationError(f"{type(self).__name__} has no session to run the encoder with")
        session.open_encoder(manifest)

    def encode(self, **inputs) -> dict[str, np.ndarray]:
        """Runs the encoder; returns its outputs other than the decoder's state (last_hidden_state)."""
        return self.session.encode(inputs)


_ENCODER_DECODERS: dict[type, type] = {}


def encoder_decoder(base: type[DecodeRunner]) -> type[DecodeRunner]:
    """The encoder-decoder runner over a format's decode-loop runner class."""
    if base not in _ENCODER_DECODERS:
        _ENCODER_DECODERS[base] = type(f"EncoderDecoder{base.__name__}", (EncoderDecoder, base), {})
    return _ENCODER_DECODERS[base]
