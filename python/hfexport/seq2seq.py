"""Encoder-decoder generation (Whisper; T5 and the text-to-text models). The `encoder` component runs once per input and also
writes every decoder layer's cross-attention keys and values (write-once state: export.json lists
it under each component's `states`); the `decoder` component is the step the decode loop repeats
over its own self-attention cache, reading that state unchanged. A runner here is a DecodeRunner
whose step is the decoder, plus `encode(**inputs)`, so runner.generate drives it as it drives a
decoder-only export.

Whisper's prompt and logits processors follow transformers' WhisperGenerationMixin for audio of
up to 30 s: the init tokens (decoder_start_token_id, then the language, task and no-timestamps
tokens from the arguments or the generation config's forced_decoder_ids, the language detected
from the first step's logits when a multilingual model is given none), `suppress_tokens` at every
step and `begin_suppress_tokens` at the first."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .manifest import DECODER, ENCODER, STATES, ExportManifest
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
        raise GenerationError("return_timestamps: timestamp generation is not supported yet")
    if isinstance(no_timestamps, int) and tokens[-1] != no_timestamps:
        tokens.append(no_timestamps)
    # A forced None with nothing to detect it from is left out, as transformers does.
    return [t for i, t in enumerate(tokens) if t is not None or (i == 1 and lang_to_id)]


def suppressor(gen: dict[str, Any], vocab: int):
    """suppress_tokens at every step, begin_suppress_tokens at the first generated one (ids
    outside the vocabulary ignored, as transformers' processors do)."""
    always = np.array([t for t in gen.get("suppress_tokens") or [] if 0 <= t < vocab], np.int64)
    begin = np.array([t for t in gen.get("begin_suppress_tokens") or [] if 0 <= t < vocab], np.int64)

    def process(logits: np.ndarray, step: int) -> np.ndarray:
        if not len(always) and not (step == 0 and len(begin)):
            return logits
        logits = logits.copy()
        logits[:, always] = -np.inf
        if step == 0:
            logits[:, begin] = -np.inf
        return logits

    return process


def whisper_generate(runner, input_features: np.ndarray, gen: dict[str, Any], max_new_tokens: int | None,
                     language: str | None = None, task: str | None = None, sampler=None,
                     eos_token_ids: Sequence[int] | None = None, step_logits: list | None = None,
                     on_tokens=None) -> np.ndarray:
    """The new tokens [batch, n] for a batch of 30 s log-mel features, as WhisperForConditionalGeneration.generate
    returns them (the init tokens left out). `max_new_tokens` None: up to the decoder's exported
    length (max_target_positions, what Whisper's generation config allows)."""
    from .runner import generate

    features = np.asarray(input_features, _input_dtype(runner.manifest, "input_features"))
    batch = features.shape[0]
    runner.encode(input_features=features)
    tokens = whisper_init_tokens(gen, language, task)
    rows = np.repeat(np.array([[t if t is not None else 0 for t in tokens]], np.int64), batch, axis=0)
    if None in tokens:  # language detection: the most likely language token after the start token
        at = tokens.index(None)
        logits = runner.prefill(rows[:, :at], np.ones((batch, at), np.int64), 1)
        lang_ids = np.array(sorted(gen["lang_to_id"].values()), np.int64)
        rows[:, at] = lang_ids[np.argmax(logits[:, lang_ids], axis=-1)]
    logits = next(o for o in runner.manifest.component(DECODER)["outputs"] if o["name"] == "logits")
    vocab = int(logits["shape"][-1])
    if max_new_tokens is None:
        max_new_tokens = runner.manifest.dim_bounds("total_sequence")[1] - rows.shape[1] + 1
    return generate(runner, rows, max_new_tokens=max_new_tokens, sampler=sampler, eos_token_ids=eos_token_ids,
                    step_logits=step_logits, on_tokens=on_tokens,
                    processor=suppressor(gen, vocab))


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

    def process(logits: np.ndarray, step: int) -> np.ndarray:
        forced = [bos] if step == 0 and isinstance(bos, int) else eos if step == max_new_tokens - 1 else []
        if not forced:
            return logits
        out = np.full_like(logits, -np.inf)
        out[:, forced] = 0
        return out

    return process
