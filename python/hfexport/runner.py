"""The decode-loop interface every runtime implements (prefill, step), the registry of runners by
export format, and the generation loop on top of them (sampling, eos, max new tokens)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .formats import declared, runner_class, set_runner
from .manifest import (CACHE_STATIC, ENCODER, MULTI_TOKEN_DECODE, PREFILL_CHUNK, REBUILD_CACHE_AT, VISION_EMBEDDINGS_MERGER,
                       VISION_ENCODER,
                       ExportManifest, load_manifest)
from .sampling import Sampler


class GenerationError(ValueError):
    """A request the exported graphs cannot serve (too long, batch out of bounds, ...)."""


class DecodeRunner(ABC):
    """One runtime's view of an exported generation model."""

    manifest: ExportManifest
    # The step graph's token input: input_ids, or a vision-language model's inputs_embeds, which
    # `_token_inputs` makes from the ids (with the token types where the graph takes them: hfexport.vlm).
    TOKENS = "input_ids"

    def _token_inputs(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        return {"input_ids": ids}

    def _position_ids(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The graph's position_ids for the tokens `ids` at these text positions [batch, query]:
        the positions themselves, or a multimodal RoPE's rows [3, batch, query] (hfexport.vlm)."""
        return positions

    @abstractmethod
    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray, max_new_tokens: int) -> np.ndarray:
        """Runs the (left-padded) prompt [batch, seq]; returns the last position's logits [batch, vocab].
        `max_new_tokens` lets a runner size fixed buffers and refuse what cannot fit."""

    @abstractmethod
    def step(self, tokens: np.ndarray) -> np.ndarray:
        """Feeds one new token per row [batch], or several [batch, n] where the manifest's
        multi_token_decode says the step graph takes them; returns the last one's logits [batch, vocab]."""

    def _advance(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A step's ids and positions [batch, query] from `self.next_position`, which moves past them."""
        ids = step_ids(tokens)
        positions = step_positions(self.next_position, ids.shape[1])
        self.next_position = self.next_position + ids.shape[1]
        return ids, positions

    def steps_take_several_tokens(self, batch: int) -> bool:
        """Whether `step` takes several tokens per row for a batch this large (after a prefill)."""
        return bool(self.manifest.generation.get(MULTI_TOKEN_DECODE))


def step_ids(tokens: np.ndarray) -> np.ndarray:
    """A step's tokens as [batch, query]: one per row ([batch]) or several ([batch, n])."""
    tokens = np.asarray(tokens).astype(np.int64)
    return tokens[:, None] if tokens.ndim == 1 else tokens


def step_positions(next_position: np.ndarray, count: int) -> np.ndarray:
    """The positions [batch, count] of a step's tokens, the first of each row at `next_position`."""
    return (np.asarray(next_position)[:, None] + np.arange(count)).astype(np.int64)


def prefill_in_chunks(runner: DecodeRunner, input_ids: np.ndarray, attention_mask: np.ndarray,
                      max_new_tokens: int) -> np.ndarray:
    """Runs the prompt: in one call, or where the manifest names a prefill_chunk (a recurrence whose
    one-call form costs more than linearly in the call's length) and the step graph takes several
    tokens, its first chunk and then the rest a chunk at a time, so prefill stays linear. The first
    call also takes every row's left padding: each later call's tokens are all real."""
    several = runner.steps_take_several_tokens(input_ids.shape[0])
    chunk = int(runner.manifest.generation.get(PREFILL_CHUNK) or 0) if several else 0
    length = input_ids.shape[1]
    padding = int((np.cumsum(attention_mask, axis=1) == 0).sum(axis=1).max())
    first = min(length, padding + chunk)
    if not chunk or first == length:
        return runner.prefill(input_ids, attention_mask, max_new_tokens)
    # The buffers are sized, and the request checked, for the whole prompt and the new tokens.
    logits = runner.prefill(input_ids[:, :first], attention_mask[:, :first], max_new_tokens + length - first)
    for start in range(first, length, chunk):
        logits = runner.step(input_ids[:, start:start + chunk])
    return logits


def check_cache_position_call(positions, real) -> None:
    """A graph taking cache_position (its mask and positions built from it) serves rows that share
    their positions and have no padding."""
    if not np.asarray(real).all() or (np.asarray(positions) != np.asarray(positions)[:1]).any():
        raise GenerationError("this export takes cache_position (one set of positions for every row, no padding): "
                              "left-padded rows need an export with attention_mask and position_ids")


def left_padded_positions(attention_mask: np.ndarray) -> np.ndarray:
    """position_ids of a left-padded batch, as transformers derives them from the mask."""
    return np.clip(np.cumsum(attention_mask, -1) - 1, 0, None)


def static_cache_mask(positions: np.ndarray, cache_len: int, real: np.ndarray | None = None) -> np.ndarray:
    """A static cache's 4-D bool mask [batch, 1, query, cache_len]: each query sees the slots up to
    its position, and (with `real`, the query tokens that are not padding) a pad query none past it
    either: rows see only slots that hold their real tokens (always the prefix 0..position)."""
    mask = np.arange(cache_len)[None, None, :] <= positions[:, :, None]
    if real is not None:
        mask &= real[:, :, None].astype(bool)
    return mask[:, None]


def state_buffer_shape(shape: list, batch: int, length: int, replaced: bool) -> list[int]:
    """A cache pair's buffer for `batch` rows: a KV cache's [batch, heads, length, head_dim] from its
    declared shape, or a replaced state's declared shape (its zeros start a sequence)."""
    return [batch, *shape[1:]] if replaced else [batch, shape[1], length, shape[3]]


def check_request(manifest: ExportManifest, input_ids: np.ndarray, max_new_tokens: int) -> None:
    """Refuses a generation request the export cannot serve: a static cache's batch and length, a
    dynamic one's batch and sequence bounds."""
    batch, length = input_ids.shape
    gen = manifest.generation
    if manifest.cache == CACHE_STATIC:
        fixed, max_cache_len = int(gen.get("batch_size", 1)), int(gen.get("max_cache_len", 0))
        if batch != fixed:
            raise GenerationError(f"batch of {batch} but the static cache was exported for batch {fixed}")
        if length > max_cache_len:
            raise GenerationError(f"prompt of {length} tokens exceeds max_cache_len {max_cache_len}")
        if length + max_new_tokens - 1 > max_cache_len:
            raise GenerationError(
                f"prompt of {length} tokens + {max_new_tokens} new tokens exceeds max_cache_len {max_cache_len}")
        return
    low, high = manifest.dim_bounds("batch")
    if not low <= batch <= high:
        raise GenerationError(f"batch of {batch} is outside the exported bounds [{low}, {high}]")
    limit = manifest.dim_bounds("total_sequence")[1]
    if length + max_new_tokens - 1 > limit:
        raise GenerationError(f"prompt of {length} tokens + {max_new_tokens} new tokens exceeds the exported "
                              f"sequence bound {limit}")


def park_padding(positions: np.ndarray, attention_mask: np.ndarray, cache_len: int) -> np.ndarray:
    """Positions for a static prefill in which pad tokens name the last slots of the cache
    instead of clashing with the first real token's slot (a scatter leaves duplicate indices
    undefined). A real token reaches such a slot only later, and writes it before any query can
    attend to it; nothing attends to the pad tokens themselves."""
    pads = attention_mask == 0
    parked = cache_len - pads[:, ::-1].cumsum(-1)[:, ::-1]  # k-th pad from the right -> len - k
    return np.where(pads, parked, positions).astype(np.int64)


def register_runner(export_format: str, target: str) -> None:
    """Adds (or replaces) the runner for `export_format`: `target` is "module:class", the class
    taking (manifest, **options), or "module:function", a function of the manifest returning one.
    Encoder-decoder exports get it under hfexport.cache_driver.EncoderDecoder, which opens and
    runs the encoder through the runner's `session` (a hfexport.cache_driver.Session)."""
    set_runner(export_format, target)


def open_runner(directory: str | Path, **options) -> DecodeRunner:
    manifest = load_manifest(directory)
    if not manifest.generation:
        raise GenerationError(f"{directory}: not exported with --for-generation")
    if manifest.has_component(VISION_ENCODER) or manifest.has_component(VISION_EMBEDDINGS_MERGER):
        from .vlm import open_vision_language_runner

        return open_vision_language_runner(manifest, **options)
    declaration = declared(manifest.format)
    target = declaration.runner if declaration else None
    if target is None:
        raise GenerationError(f"{directory}: no runner for format '{manifest.format}'")
    base = runner_class(target, manifest)
    if manifest.has_component(ENCODER):  # the decoder's loop, with the encoder's call
        from .cache_driver import encoder_decoder

        return encoder_decoder(base)(manifest, **options)
    return base(manifest, **options)


def generate(
    runner: DecodeRunner,
    input_ids: np.ndarray,
    attention_mask: np.ndarray | None = None,
    max_new_tokens: int = 32,
    sampler: Sampler | None = None,
    eos_token_ids: Sequence[int] | None = None,
    ignore_eos: bool = False,
    step_logits: list[np.ndarray] | None = None,
    on_tokens: Callable[[np.ndarray], None] | None = None,
    processor: Callable[[np.ndarray, int, list[np.ndarray]], np.ndarray] | None = None,
) -> np.ndarray:
    """Returns the new tokens [batch, n <= max_new_tokens]. Rows that produced an eos keep emitting
    the pad id (the manifest's pad_token_id, else the first eos id), as transformers does; the loop
    stops when every row has finished. Each step's logits are appended to `step_logits` if given;
    `on_tokens` gets each step's tokens [batch] as they are chosen (streaming); `processor(logits, i, chosen)`
    adjusts step i's logits before the choice, given the tokens chosen so far (a model's logits
    processors: Whisper's suppressed tokens and timestamp rules)."""
    input_ids = np.asarray(input_ids, dtype=np.int64)
    if input_ids.ndim == 1:
        input_ids = input_ids[None]
    if attention_mask is None:
        attention_mask = np.ones_like(input_ids)
    attention_mask = np.asarray(attention_mask, dtype=np.int64)
    if max_new_tokens < 1:
        raise GenerationError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    sampler = sampler or Sampler()
    eos = [] if ignore_eos else list(runner.manifest.eos_token_ids if eos_token_ids is None else eos_token_ids)
    pad = runner.manifest.generation.get("pad_token_id")
    pad = int(pad) if isinstance(pad, int) else (eos[0] if eos else 0)

    # Phi-3 longrope: when the sequence first reaches this length, the cache is rebuilt from the
    # whole sequence (its keys were rotated with the short factors), as transformers' generate does.
    rebuild_at = int(runner.manifest.generation.get(REBUILD_CACHE_AT) or 0)
    logits = prefill_in_chunks(runner, input_ids, attention_mask, max_new_tokens)
    finished = np.zeros(input_ids.shape[0], dtype=bool)
    out = []
    for i in range(max_new_tokens):
        if step_logits is not None:
            step_logits.append(logits)
        tokens = np.where(finished, pad, sampler(processor(logits, i, out) if processor is not None else logits))
        out.append(tokens)
        newly_done = np.isin(tokens, eos)
        if on_tokens is not None and not (finished | newly_done).all():
            on_tokens(tokens)
        finished |= newly_done
        if finished.all() or i + 1 == max_new_tokens:
            break
        if input_ids.shape[1] + i + 1 == rebuild_at and input_ids.shape[1] < rebuild_at:
            ids = np.concatenate([input_ids, np.stack(out, axis=1)], axis=1)
            mask = np.concatenate([attention_mask, np.ones((ids.shape[0], i + 1), dtype=np.int64)], axis=1)
            logits = prefill_in_chunks(runner, ids, mask, max_new_tokens - i - 1)
            continue
        logits = runner.step(tokens)
    return np.stack(out, axis=1)
