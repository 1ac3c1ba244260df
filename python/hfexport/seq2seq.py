"""Encoder-decoder generation (Whisper; T5 and the text-to-text models). The `encoder` component runs once per input and also
writes every decoder layer's cross-attention keys and values (write-once state: export.json lists
it under each component's `states`); the `decoder` component is the step the decode loop repeats
over its own self-attention cache, reading that state unchanged. A runner here is a DecodeRunner
whose step is the decoder, plus `encode(**inputs)`, so runner.generate drives it as it drives a
decoder-only export.

Whisper's prompt, logits processors and decoding loop follow transformers' WhisperGenerationMixin:
the init tokens (decoder_start_token_id, then the language, task and no-timestamps tokens from the
arguments or the generation config's forced_decoder_ids, the language detected from the first
window's first step when a multilingual model is given none), `suppress_tokens` at every step and
`begin_suppress_tokens` at the first, the timestamp rules with `return_timestamps`, and its
sequential decoding of 30 s windows for longer audio (greedy; no temperature fallback, no
conditioning on earlier windows' tokens: transformers' defaults)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .manifest import CACHE_STATIC, DECODER, ENCODER, STATES, ExportManifest
from .runner import GenerationError


def cross_state_names(manifest: ExportManifest, writer: str = ENCODER) -> list[tuple[str, str]]:
    """(output, decoder input) of each write-once state the `writer` component computes and the
    decoder reads: the encoder, or the decoder's first step in optimum's layout (its `prefill`)."""
    written = {s["name"]: s["output"] for s in manifest.component(writer).get(STATES, []) if "output" in s}
    read = [s for s in manifest.component(DECODER).get(STATES, []) if s.get("policy") == "write_once"]
    missing = [s["name"] for s in read if s["name"] not in written]
    if missing:
        raise GenerationError(f"{manifest.directory}: the {writer} does not compute the decoder's state {missing[0]}")
    return [(written[s["name"]], s["input"]) for s in read if "input" in s]


def decoder_feeds(cross: list[tuple[str, str]], outputs: dict, inputs: dict, decoder_inputs) -> dict:
    """What every decoder call takes from the encoder's call: the state it wrote (by the decoder's
    input names) and its padding (an encoder input `x` the decoder takes as `encoder_x`)."""
    feeds = {decoder_input: outputs[output] for output, decoder_input in cross}
    for name, value in inputs.items():
        if f"encoder_{name}" in decoder_inputs:
            feeds[f"encoder_{name}"] = value
    return feeds


def encoder_results(cross: list[tuple[str, str]], outputs: dict) -> dict:
    """The encoder's outputs other than the decoder's state (last_hidden_state)."""
    state = {output for output, _ in cross}
    return {name: value for name, value in outputs.items() if name not in state}


def _input_dtype(manifest: ExportManifest, name: str):
    """The numpy dtype the encoder's input `name` takes (the export's float dtype)."""
    spec = next((i for i in manifest.component(ENCODER)["inputs"] if i["name"] == name), {"dtype": "float32"})
    if spec["dtype"] == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(spec["dtype"])


# -- Whisper ---------------------------------------------------------------------------------------

_TASKS = ("transcribe", "translate")


def _language_token(language: str, lang_to_id: dict[str, int]) -> int:
    for token in (language, f"<|{language.lower()}|>"):
        if token in lang_to_id:
            return int(lang_to_id[token])
    try:  # language names ("french") -> codes, as transformers spells them
        from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE
    except ImportError:
        TO_LANGUAGE_CODE = {}
    code = TO_LANGUAGE_CODE.get(language.lower())
    if code and f"<|{code}|>" in lang_to_id:
        return int(lang_to_id[f"<|{code}|>"])
    raise GenerationError(f"language {language!r} is not in the generation config's lang_to_id")


def whisper_init_tokens(gen: dict[str, Any], language: str | None = None, task: str | None = None,
                        return_timestamps: bool = False) -> list[int | None]:
    """The decoder's prompt before the audio's first token; a None in the language's place means
    "detect it" (a multilingual model given no language)."""
    start = gen.get("decoder_start_token_id")
    if not isinstance(start, int):
        raise GenerationError("the generation config has no decoder_start_token_id")
    tokens: list[int | None] = [start]
    task = task or gen.get("task")
    language = language or gen.get("language")
    if task is None and language is None:
        forced = gen.get("forced_decoder_ids") or []
        for i, (index, token) in enumerate(forced, start=1):
            if index != i:
                raise GenerationError(f"forced_decoder_ids {forced} do not follow Whisper's prompt pattern")
            tokens.append(token)
    lang_to_id = gen.get("lang_to_id") or {}
    if language is not None:
        lang = _language_token(language, lang_to_id)
        tokens[1:2] = [lang]
    elif lang_to_id and (len(tokens) <= 1 or tokens[1] is None):
        tokens[1:2] = [None]  # detected from the first step
    if task is not None:
        if task not in _TASKS:
            raise GenerationError(f"task {task!r}: Whisper's tasks are {', '.join(_TASKS)}")
        task_to_id = gen.get("task_to_id") or {}
        if task not in task_to_id:
            raise GenerationError(f"task {task!r} is not in the generation config's task_to_id")
        task_ids = set(task_to_id.values())
        if any(t in task_ids for t in tokens):
            tokens = [task_to_id[task] if t in task_ids else t for t in tokens]
        else:
            tokens.append(task_to_id[task])
    elif language is not None and "task_to_id" in gen and not any(t in gen["task_to_id"].values() for t in tokens):
        tokens.append(gen["task_to_id"]["transcribe"])  # a language given without a task: transcribe
    no_timestamps = gen.get("no_timestamps_token_id")
    if return_timestamps:
        if not isinstance(no_timestamps, int):
            raise GenerationError("return_timestamps: the generation config has no no_timestamps_token_id "
                                  "(the token before the first timestamp)")
        if tokens[-1] == no_timestamps:
            tokens.pop()
    elif isinstance(no_timestamps, int) and tokens[-1] != no_timestamps:
        tokens.append(no_timestamps)
    # A forced None with nothing to detect it from is left out, as transformers does.
    return [t for i, t in enumerate(tokens) if t is not None or (i == 1 and lang_to_id)]


def suppressor(gen: dict[str, Any], vocab: int):
    """suppress_tokens at every step, begin_suppress_tokens at the first generated one (ids
    outside the vocabulary ignored, as transformers' processors do)."""
    always = np.array([t for t in gen.get("suppress_tokens") or [] if 0 <= t < vocab], np.int64)
    begin = np.array([t for t in gen.get("begin_suppress_tokens") or [] if 0 <= t < vocab], np.int64)

    def process(logits: np.ndarray, step: int, chosen=None) -> np.ndarray:
        if not len(always) and not (step == 0 and len(begin)):
            return logits
        logits = logits.copy()
        logits[:, always] = -np.inf
        if step == 0:
            logits[:, begin] = -np.inf
        return logits

    return process


def timestamp_rules(gen: dict[str, Any]):
    """transformers' WhisperTimeStampLogitsProcessor over the tokens generated after the prompt:
    <|notimestamps|> never; the first token a timestamp (at most max_initial_timestamp_index);
    timestamps in pairs (after a lone one only a timestamp or eos and what precedes it, after a
    pair only text); never decreasing; and only timestamps when their total probability beats
    every text token's."""
    no_timestamps = int(gen["no_timestamps_token_id"])
    begin = no_timestamps + 1
    eos = gen.get("eos_token_id") or gen.get("bos_token_id")
    eos = int(eos[0] if isinstance(eos, (list, tuple)) else eos)
    max_initial = gen.get("max_initial_timestamp_index")
    from_logprob = gen.get("_detect_timestamp_from_logprob", True)

    def process(logits: np.ndarray, step: int, chosen: list[np.ndarray]) -> np.ndarray:
        logits = logits.astype(np.float32, copy=True)
        logits[:, no_timestamps] = -np.inf
        for row in range(logits.shape[0]):
            seq = [int(step_tokens[row]) for step_tokens in chosen]
            last = len(seq) >= 1 and seq[-1] >= begin
            penultimate = len(seq) < 2 or seq[-2] >= begin
            if last:
                if penultimate:
                    logits[row, begin:] = -np.inf
                else:
                    logits[row, :eos] = -np.inf
            stamps = [t for t in seq if t >= begin]
            if stamps:  # never decreasing; after a pair not the same one again
                logits[row, begin:stamps[-1] + (0 if last and not penultimate else 1)] = -np.inf
        if step == 0:
            logits[:, :begin] = -np.inf
            if max_initial is not None:
                logits[:, begin + int(max_initial) + 1:] = -np.inf
        if from_logprob and logits.shape[-1] > begin:
            with np.errstate(divide="ignore", invalid="ignore"):
                top = logits.max(axis=-1, keepdims=True)
                logprobs = logits - (top + np.log(np.exp(logits - top).sum(axis=-1, keepdims=True)))
                stamp_top = logprobs[:, begin:].max(axis=-1, keepdims=True)
                stamp_mass = (stamp_top + np.log(np.exp(logprobs[:, begin:] - stamp_top).sum(axis=-1, keepdims=True)))[:, 0]
            text_best = logprobs[:, :begin].max(axis=-1)
            logits[stamp_mass > text_best, :begin] = -np.inf
        return logits

    return process


def chained(*processors):
    """Logits processors applied in order (None entries skipped)."""
    live = [p for p in processors if p is not None]

    def process(logits: np.ndarray, step: int, chosen: list[np.ndarray]) -> np.ndarray:
        for p in live:
            logits = p(logits, step, chosen)
        return logits

    return process


def _detect_language(runner, rows: np.ndarray, tokens: list[int | None], gen: dict[str, Any]) -> None:
    """The language slot of each row: the most likely language token after the start token (the
    encoder's last call holds the audio), as WhisperForConditionalGeneration.detect_language picks it."""
    if None not in tokens:
        return
    at = tokens.index(None)
    logits = runner.prefill(rows[:, :at], np.ones((rows.shape[0], at), np.int64), 1)
    lang_ids = np.array(sorted(gen["lang_to_id"].values()), np.int64)
    rows[:, at] = lang_ids[np.argmax(logits[:, lang_ids], axis=-1)]


def _vocab(runner) -> int:
    logits = next(o for o in runner.manifest.component(DECODER)["outputs"] if o["name"] == "logits")
    return int(logits["shape"][-1])


def _segment_frames(runner) -> int:
    """The mel frames one encoder call takes (3000: 30 s)."""
    spec = next(i for i in runner.manifest.component(ENCODER)["inputs"] if i["name"] == "input_features")
    frames = spec["shape"][-1]
    if not isinstance(frames, int):
        raise GenerationError(f"{runner.manifest.directory}: the encoder's input_features have no fixed length")
    return frames


def _target_positions(runner) -> int:
    """The decoder's longest sequence: config.json's max_target_positions, or the export's bound."""
    import json
    from pathlib import Path

    bound = runner.manifest.dim_bounds("total_sequence")[1]
    gen = runner.manifest.generation
    if runner.manifest.cache == CACHE_STATIC:
        bound = int(gen.get("max_cache_len") or bound)
    config_path = Path(runner.manifest.directory) / "config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    return min(int(config.get("max_target_positions") or bound), bound)


def whisper_generate(runner, input_features: np.ndarray, gen: dict[str, Any], max_new_tokens: int | None,
                     language: str | None = None, task: str | None = None, sampler=None,
                     eos_token_ids: Sequence[int] | None = None, step_logits: list | None = None,
                     on_tokens=None, return_timestamps: bool = False, attention_mask: np.ndarray | None = None,
                     segments: list | None = None) -> np.ndarray:
    """The new tokens [batch, n] for a batch of log-mel features [batch, mels, frames], as
    WhisperForConditionalGeneration.generate returns them: each row's segments' tokens (no init
    tokens, no eos) right-padded with the pad id. Whisper's sequential decoding: 30 s windows, each
    starting where the last one's last complete segment ended (with `return_timestamps`, which
    features over 30 s imply), `attention_mask` [batch, frames] marking each row's own length.
    `segments`, a list, gets each row's segments ({"start", "end" in seconds, "tokens"}).
    `max_new_tokens` None: what the generation config's max_length allows per window."""
    from .runner import generate

    features = np.asarray(input_features, _input_dtype(runner.manifest, "input_features"))
    if features.ndim != 3:
        raise GenerationError(f"input_features of shape {list(features.shape)}: expected [batch, mels, frames]")
    batch, frames = features.shape[0], features.shape[-1]
    window = _segment_frames(runner)
    timestamps = return_timestamps or frames > window
    lengths = (np.full(batch, frames, np.int64) if attention_mask is None
               else np.asarray(attention_mask).astype(np.int64).sum(-1))
    init = whisper_init_tokens(gen, language, task, return_timestamps=timestamps)
    begin = int(gen["no_timestamps_token_id"]) + 1 if timestamps else _vocab(runner)
    eos = list(eos_token_ids or []) or gen.get("eos_token_id") or runner.manifest.eos_token_ids
    eos = int(eos[0] if isinstance(eos, (list, tuple)) else eos)
    pad = gen.get("pad_token_id")
    pad = int(pad) if isinstance(pad, int) else eos
    target = _target_positions(runner)
    if max_new_tokens is not None and max_new_tokens + len(init) > target:
        raise GenerationError(f"{len(init)} prompt tokens + max_new_tokens {max_new_tokens} exceed the decoder's "
                              f"{target} positions")
    processor = chained(suppressor(gen, _vocab(runner)), timestamp_rules(gen) if timestamps else None)
    seek = np.zeros(batch, np.int64)
    found: list[list[dict]] = [[] for _ in range(batch)]
    prompts, encoded = _prompts(runner, features, init, gen, window)
    max_length = int(gen.get("max_length") or 20)
    while (seek < lengths).any():
        active = [row for row in range(batch) if seek[row] < lengths[row]]
        spans = {row: int(min(lengths[row] - seek[row], window)) for row in active}
        fill = _slots(runner, active)
        chunk = np.zeros((len(fill), features.shape[1], window), features.dtype)
        for slot, row in enumerate(fill):
            chunk[slot, :, :spans[row]] = features[row, :, seek[row]:seek[row] + spans[row]]
        if encoded is None or not np.array_equal(encoded, chunk):
            runner.encode(input_features=chunk)
        encoded = None
        if max_new_tokens is None:  # transformers lets each window's max_length grow by the prompt
            max_length = min(max_length + min(target // 2 - 1, len(init)), target)
        limit = max(max_length - len(init), 1) if max_new_tokens is None else max_new_tokens
        new = generate(runner, prompts[fill], max_new_tokens=limit, sampler=sampler, eos_token_ids=eos_token_ids,
                       step_logits=step_logits, on_tokens=on_tokens, processor=processor)
        for slot, row in enumerate(active):
            tokens = _strip_finished(new[slot], eos, pad)
            cut, advance = _window_segments(tokens, begin, float(seek[row]) * 0.02 / 2, spans[row])
            found[row] += cut
            seek[row] += advance
    if segments is not None:
        segments[:] = found
    rows = [np.concatenate([s["tokens"] for s in row_segments]) if row_segments else np.zeros(0, np.int64)
            for row_segments in found]
    width = max(len(r) for r in rows)
    return np.stack([np.pad(r, (0, width - len(r)), constant_values=pad) for r in rows]).astype(np.int64)


def _slots(runner, active: list[int]) -> list[int]:
    """The row each batch slot of a window runs: the active rows, the last repeated to fill a
    static cache's fixed batch (or a batch bound's minimum)."""
    if runner.manifest.cache == CACHE_STATIC:
        slots = int(runner.manifest.generation.get("batch_size", 1))
        if len(active) > slots:
            raise GenerationError(f"batch of {len(active)} but the static cache was exported for batch {slots}")
    else:
        slots = max(len(active), runner.manifest.dim_bounds("batch")[0])
    return active + [active[-1]] * (slots - len(active))


def _prompts(runner, features: np.ndarray, init: list[int | None], gen: dict[str, Any],
             window: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Each row's init tokens [batch, n], the language detected (when the prompt leaves it open)
    from the row's first 30 s as given; and the features the encoder then holds (None if none)."""
    rows = np.array([[t if t is not None else 0 for t in init]] * features.shape[0], np.int64)
    if None not in init:
        return rows, None
    fill = _slots(runner, list(range(features.shape[0])))
    first = features[fill, :, :window]
    first = np.pad(first, ((0, 0), (0, 0), (0, window - first.shape[-1])))
    runner.encode(input_features=first)
    detected = rows[fill]
    _detect_language(runner, detected, init, gen)
    return detected[:len(rows)], first


def _strip_finished(tokens: np.ndarray, eos: int, pad: int) -> np.ndarray:
    """A window's tokens as generate_with_fallback trims them: a finished row's padding (every pad
    id in it, as transformers counts them; the eos kept when it is the pad), then the eos."""
    seq = np.array(tokens, np.int64)
    ends = np.flatnonzero(seq == eos)
    if len(ends):
        seq[ends[0] + 1:] = pad
    if len(seq) and seq[-1] == pad:
        count = int((seq == pad).sum()) - (1 if pad == eos else 0)
        if count:
            seq = seq[:-count]
    if len(seq) and seq[-1] == eos:
        seq = seq[:-1]
    return seq


def _window_segments(tokens: np.ndarray, begin: int, offset: float, span: int) -> tuple[list[dict], int]:
    """WhisperGenerationMixin._retrieve_segment: the window's tokens split at each pair of
    timestamps, the start and end times in seconds, and how many frames the seek advances (to the
    last pair's time when the window ends mid-segment, else the whole window)."""
    stamp = [int(t) >= begin for t in tokens]
    single_ending = stamp[-2:] == [False, True]
    cuts = [i + 1 for i in range(len(stamp) - 1) if stamp[i] and stamp[i + 1]]
    if not cuts:
        # float32, as transformers computes it from its frame count
        position = float(int(np.float32(np.float32(span) * np.float32(0.01)) / np.float32(0.02)))
        stamps = [i for i, s in enumerate(stamp) if s]
        if stamps and int(tokens[stamps[-1]]) != begin:
            position = float(int(tokens[stamps[-1]]) - begin)
        return [{"start": offset, "end": offset + position * 0.02, "tokens": tokens}], span
    if single_ending:
        cuts.append(len(tokens))
    else:
        cuts[-1] += 1  # the last pair's second timestamp stays with its segment
    found, last = [], 0
    for i, cut in enumerate(cuts):
        piece = tokens[last:cut]
        end_at = -1 if i < len(cuts) - 1 or single_ending else -2
        found.append({"start": offset + (int(piece[0]) - begin) * 0.02,
                      "end": offset + (int(piece[end_at]) - begin) * 0.02, "tokens": piece})
        last = cut
    advance = span if single_ending else (int(tokens[last - 2]) - begin) * 2
    return found, advance


# -- text to text (T5) ----------------------------------------------------------------------------

def decoder_start_token(directory, gen: dict[str, Any]) -> int:
    """generation_config's decoder_start_token_id, else config.json's (T5: the pad id)."""
    import json
    from pathlib import Path

    start = gen.get("decoder_start_token_id")
    if not isinstance(start, int):
        config_path = Path(directory) / "config.json"
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        start = config.get("decoder_start_token_id")
    if not isinstance(start, int):
        raise GenerationError(f"{directory}: no decoder_start_token_id in generation_config.json or config.json")
    return start


def text2text_generate(runner, input_ids: np.ndarray, attention_mask: np.ndarray | None, gen: dict[str, Any],
                       max_new_tokens: int | None, sampler=None, eos_token_ids: Sequence[int] | None = None,
                       step_logits: list | None = None, on_tokens=None) -> np.ndarray:
    """model.generate of an encoder-decoder over text: the decoder's start token and the new tokens
    [batch, 1 + n] (rows that finished padded with the pad id)."""
    from .runner import generate

    ids = np.asarray(input_ids, np.int64)
    if ids.ndim == 1:
        ids = ids[None]
    mask = np.ones_like(ids) if attention_mask is None else np.asarray(attention_mask, np.int64)
    runner.encode(input_ids=ids, attention_mask=mask)
    prompt = np.full((ids.shape[0], 1), decoder_start_token(runner.manifest.directory, gen), np.int64)
    if max_new_tokens is None:
        max_new_tokens = int(gen.get("max_new_tokens") or max(int(gen.get("max_length") or 20) - 1, 1))
    new = generate(runner, prompt, max_new_tokens=max_new_tokens, sampler=sampler, eos_token_ids=eos_token_ids,
                   step_logits=step_logits, on_tokens=on_tokens, processor=forced_tokens(gen, max_new_tokens))
    return np.concatenate([prompt, new], axis=1)


def forced_tokens(gen: dict[str, Any], max_new_tokens: int):
    """The generation config's forced_bos_token_id (the first new token: mBART's target language,
    BART's bos) and forced_eos_token_id (the last one, when the length limit ends the sequence), as
    transformers' ForcedBOS / ForcedEOS logits processors force them; None when neither is set."""
    bos, eos = gen.get("forced_bos_token_id"), gen.get("forced_eos_token_id")
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    if not isinstance(bos, int) and not eos:
        return None

    def process(logits: np.ndarray, step: int, chosen=None) -> np.ndarray:
        forced = [bos] if step == 0 and isinstance(bos, int) else eos if step == max_new_tokens - 1 else []
        if not forced:
            return logits
        out = np.full_like(logits, -np.inf)
        out[:, forced] = 0
        return out

    return process
