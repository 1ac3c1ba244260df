"""transformers.exporters' API over hfexport's C++ core: `OnnxExporter().export(model, inputs,
config)` and `export_for_generation(...)`, `AutoHfExporter`, `decompose_for_generation`, and the
`ExportedModel` they return (`save` / `save_pretrained` / `from_pretrained`, callable, `generate`).

`model` is a PreTrainedModel or a checkpoint directory. A live model's weights go to the core as
the addresses of its own tensors (no copy): the core reads them while it writes the export."""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .configs import (AutoExportConfig, ConfigError, DynamoConfig, ExecutorchConfig, ExportConfigMixin, OnnxConfig, OpenVINOConfig,
                      config_format, dims_from_dynamic_shapes, static_dims)
from .formats import declared, replace_file, resolve
from .forward import open_graph
from .manifest import CACHE_STATEFUL, DECODE, ENCODER, FILE_NAME, MODEL, PREFILL, load_manifest
from .versions import check_runtime_versions

logger = logging.getLogger("hfexport")

DECODER_INPUTS = ("input_ids", "attention_mask", "position_ids")
# Integer inputs whose callers pass other widths (SigLIP 2's processor: an int32 patch mask).
INTEGER_INPUTS = DECODER_INPUTS + ("pixel_attention_mask", "spatial_shapes")
CACHE_KWARGS = ("past_key_values", "cache")
# The input a forward call is built around (its batch), first match: token embeddings, tokens, audio
# features, images.
PRIMARY_INPUTS = ("inputs_embeds", "input_ids", "input_features", "input_values", "pixel_values")
# Files of a model directory that an export carries along for text in / text out.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "chat_template.json", "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json")
_TORCH_DTYPE_CODES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64", "int64": "I64",
                      "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}
# Largest |eager - exported| logit difference accepted, relative to the logits' scale.
TOLERANCE = {"float32": 1e-4, "float16": 2e-2, "bfloat16": 5e-2}


def core():
    """The compiled core (hfexport._core)."""
    try:
        from . import _core
    except ImportError as e:
        raise ImportError("hfexport's compiled core (hfexport._core) is missing: install hfexport with "
                          "`pip install .` from its checkout (it needs pybind11 and the Python headers)") from e
    return _core


# ------------------------------------------------------------------------------------------------
# Inputs


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":  # numpy has none: ml_dtypes' bfloat16, same bits
            import ml_dtypes
            import torch

            return value.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        value = value.numpy()
    return np.asarray(value)


def _tensor_inputs(inputs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The tensor-valued kwargs (a tokenizer's BatchEncoding included); flags such as use_cache
    are not graph inputs."""
    if inputs is None:
        return {}
    if not isinstance(inputs, Mapping) and not hasattr(inputs, "items"):
        raise TypeError(f"inputs must be a dict of forward kwargs, got {type(inputs).__name__}")
    return {k: v for k, v in dict(inputs).items() if v is not None and _is_tensor(v)}


def _batch_size(inputs: Mapping[str, Any] | None) -> int:
    """The sample inputs' batch (a static cache's fixed batch); 1 without input_ids."""
    ids = _tensor_inputs(inputs).get("input_ids")
    return 1 if ids is None else int(ids.shape[0])


def _positions_from_mask(mask: np.ndarray, query: int) -> np.ndarray:
    """position_ids as generate derives them from the mask, for the last `query` columns."""
    return np.clip(np.cumsum(mask, -1) - 1, 0, None)[:, -query:].astype(np.int64)


# ------------------------------------------------------------------------------------------------
# A live model's tensors, handed over without copying


def _tensor_buffers(model) -> tuple[list[tuple], list[Any]]:
    """(name, dtype code, shape, address, bytes) per state_dict tensor, and the tensors to keep
    alive while the core reads them. Only a non-contiguous view is copied (to be contiguous)."""
    entries, keep = [], []
    for name, t in model.state_dict().items():
        if t.device.type != "cpu":
            raise ConfigError(f"model tensor '{name}' is on {t.device}: hfexport reads CPU tensors "
                              "(move the model with .to('cpu'))")
        code = _TORCH_DTYPE_CODES.get(str(t.dtype).removeprefix("torch."))
        if code is None:
            raise ConfigError(f"model tensor '{name}' has dtype {t.dtype}, which no checkpoint holds")
        if not t.is_contiguous():
            t = t.contiguous()
        keep.append(t)
        entries.append((name, code, list(t.shape), t.data_ptr(), t.numel() * t.element_size()))
    return entries, keep


def _write_companion_files(model, tokenizer, directory: Path) -> None:
    """config.json and generation_config.json as save_pretrained writes them, and the tokenizer's
    files (the given tokenizer's, else those beside the checkpoint the model came from)."""
    model.config.save_pretrained(directory)
    can_generate = getattr(model, "can_generate", lambda: False)()
    if can_generate and getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(directory)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
        return
    source = Path(str(getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "") or ""))
    if source.is_dir():
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                shutil.copyfile(source / name, directory / name)


def _is_model_path(model: Any) -> bool:
    return isinstance(model, (str, os.PathLike))


# ------------------------------------------------------------------------------------------------
# The exported model


class ModelOutput(dict):
    """What an exported graph returns, by name; `.logits` like a transformers output."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _saver(export_format: str):
    """The load / save of one component's file in `export_format` (its declaration's)."""
    declaration = declared(export_format)
    if declaration is None or declaration.saver is None:
        raise ValueError(f"no saver for export format '{export_format}'")
    return declaration.saver


class ExportedComponent:
    """One exported graph of an export: `save(path)` writes it as one self-contained program."""

    def __init__(self, owner: "ExportedModel", name: str):
        self.owner, self.name = owner, name
        self._graph = None

    @property
    def entry(self) -> dict:
        return self.owner.manifest["components"][self.name]

    @property
    def path(self) -> Path:
        return self.owner.directory / self.entry["file"]

    @property
    def metadata(self) -> dict:
        return self.entry

    @property
    def program(self):
        """The backend's own model object (onnx.ModelProto without its weights; openvino.Model;
        torch.export.ExportedProgram)."""
        return _saver(self.owner.export_format).load(self.path, self.entry)

    def module(self):
        """A .pt2 program as a callable torch module (`ExportedProgram.module()`)."""
        program = self.program
        if not hasattr(program, "module"):
            raise AttributeError(f"module() is for .pt2 exports; this one is {self.owner.export_format}")
        return program.module()

    def save(self, path: str | os.PathLike) -> None:
        """Writes this graph to `path` and its weights beside it (`model.onnx` + `model.onnx.data`;
        `model.xml` + `model.bin`), replacing files of those names."""
        _saver(self.owner.export_format).save(self.path, self.entry, Path(path))

    def __call__(self, **kwargs) -> ModelOutput:
        return self.owner._run_component(self.name, kwargs)

    def __repr__(self) -> str:
        return f"ExportedComponent({self.name!r}, file={self.entry['file']!r})"


class ExportedModel(Mapping):
    """An export: its components by name (`exported["decode"]`, `.components`), callable like
    the model for a single-graph export, `generate` for a generation export, and
    `save_pretrained` / `from_pretrained` as in transformers 5.24."""

    def __init__(self, directory: str | os.PathLike, components: list[str] | None = None,
                 temporary: str | None = None, **runner_options):
        self.directory = Path(directory)
        self._manifest = load_manifest(self.directory)
        self.manifest = self._manifest.data
        # prefill before decode, the encoder before the decoder: the order a loop runs them
        names = components or sorted(self.manifest["components"], key=lambda n: (n not in (PREFILL, ENCODER), n))
        self.components = {name: ExportedComponent(self, name) for name in names}
        self.runner_options = runner_options
        self._decode_runner = None
        self._codec = None
        if temporary is not None:  # an export nobody saved yet: its files go with the object
            weakref.finalize(self, shutil.rmtree, temporary, True)
        check_runtime_versions(self.manifest)

    # -- Mapping over components --------------------------------------------------------------
    def __getitem__(self, name: str) -> ExportedComponent:
        return self.components[name]

    def __iter__(self):
        return iter(self.components)

    def __len__(self) -> int:
        return len(self.components)

    def __repr__(self) -> str:
        return f"ExportedModel(format={self.export_format!r}, components={list(self.components)})"

    @property
    def export_format(self) -> str:
        return self.manifest["format"]

    @property
    def config(self):
        """The source model's config (transformers' AutoConfig when installed, else the dict)."""
        path = self.directory / "config.json"
        if not path.is_file():
            return None
        try:
            from transformers import AutoConfig

            return AutoConfig.from_pretrained(self.directory)
        except ImportError:
            return json.loads(path.read_text())

    def _single(self) -> ExportedComponent:
        if len(self.components) != 1:
            raise ValueError(f"this export has {len(self.components)} components ({list(self.components)}): "
                             "take one from .components[name]")
        return next(iter(self.components.values()))

    @property
    def program(self):
        return self._single().program

    def module(self):
        """transformers.exporters' Dynamo example: `exported.module()(**inputs)`."""
        return self._single().module()

    def save(self, path: str | os.PathLike) -> None:
        """transformers.exporters' `onnx_program.save("model.onnx")`, for a single-graph export."""
        self._single().save(path)

    # -- files -------------------------------------------------------------------------------
    def save_pretrained(self, save_directory: str | os.PathLike) -> None:
        """Writes every file of the export (graphs, weights, export.json, config.json, tokenizer)
        into `save_directory`, created if missing; each file replaces its old copy atomically."""
        target = Path(save_directory)
        if target.resolve() == self.directory.resolve():
            return
        target.mkdir(parents=True, exist_ok=True)
        # Subfolders too: --onnx-layout optimum keeps its graph in onnx/.
        files = [p for p in self.directory.rglob("*") if p.is_file() and p != self.directory / FILE_NAME]
        for path in files:
            (target / path.relative_to(self.directory)).parent.mkdir(parents=True, exist_ok=True)
            replace_file(path, target / path.relative_to(self.directory))
        replace_file(self.directory / FILE_NAME, target / FILE_NAME)  # last: the export is complete

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *, device=None,
                        **runner_options) -> "ExportedModel":
        """Opens what save_pretrained wrote (a local directory); `device` and `runner_options` as for `to`."""
        path = Path(pretrained_model_name_or_path)
        if not (path / FILE_NAME).is_file():
            raise ValueError(f"{path}: not an hfexport export (no {FILE_NAME}); pass a local directory")
        return cls(path).to(device, **runner_options)

    def record(self, key: str, value: Any) -> None:
        """Adds `key` to export.json (the export's own files only)."""
        self.manifest[key] = value
        path = self.directory / FILE_NAME
        tmp = path.with_name(FILE_NAME + ".tmp")
        tmp.write_text(json.dumps(self.manifest, indent=2) + "\n")
        os.replace(tmp, path)

    # -- running -----------------------------------------------------------------------------
    def to(self, device=None, **runner_options) -> "ExportedModel":
        """Where the graphs run: the CPU (hfexport's runners); `runner_options` go to the runtime
        (`providers` / `session_options` for onnxruntime, `config` for OpenVINO)."""
        if device is not None and str(device).lower() != "cpu":
            raise ValueError(f"device {device!r}: hfexport's runners run on the CPU")
        self.runner_options = runner_options
        for component in self.components.values():
            component._graph = None
        self._decode_runner = None
        return self

    def __call__(self, **kwargs) -> ModelOutput:
        return self._run_component(self._single().name, kwargs)

    def encode(self, texts, batch_size: int = 32) -> np.ndarray:
        """SentenceTransformer.encode for a sentence-similarity export: texts (a string or a list)
        tokenized with the export's own tokenizer, one float32 embedding row per text."""
        from .run import run_texts
        from .text import TextCodec

        if self.manifest.get("task") != "sentence-similarity":
            raise ValueError(f"encode() takes a sentence-similarity export (this one is {self.manifest.get('task')!r}: "
                             "export a sentence-transformers checkpoint)")
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        codec, rows = TextCodec(self.directory), []
        for i in range(0, len(texts), batch_size):
            rows += [r["embedding"] for r in run_texts(self, codec, texts[i:i + batch_size])]
        out = np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)
        return out[0] if single else out

    def _run_component(self, name: str, kwargs: Mapping[str, Any]) -> ModelOutput:
        component = self.components[name]
        if component._graph is None:
            program = {"program": component.entry["program"]} if "program" in component.entry else {}
            component._graph = open_graph(self.export_format, component.path, self.manifest, **program,
                                          **self.runner_options)
        graph = component._graph
        feeds, as_torch = self._feeds(name, graph.input_names, kwargs)
        outputs = graph(feeds)
        out = ModelOutput()
        for key, value in outputs.items():
            out[key] = _as_torch(value) if as_torch else value
        present = [outputs[n] for n in sorted(outputs) if n.startswith("present.")]
        if present:
            out["past_key_values"] = [(present[i], present[i + 1]) for i in range(0, len(present), 2)]
        return out

    def _feeds(self, name: str, input_names: list[str], kwargs: Mapping[str, Any]) -> tuple[dict, bool]:
        """The graph's inputs from forward kwargs: unknown ones dropped with a warning, a missing
        attention_mask or position_ids filled in as the model's forward does (all ones; past_length +
        0..query-1), a transformers cache unpacked into past_key_values.{i}.key/value."""
        as_torch = any(hasattr(v, "detach") for v in kwargs.values())
        cache = next((kwargs[k] for k in CACHE_KWARGS if kwargs.get(k) is not None), None)
        tensors = {k: _to_numpy(v) for k, v in _tensor_inputs(kwargs).items() if k not in CACHE_KWARGS}
        feeds = {}
        for key in input_names:
            if key in tensors:
                feeds[key] = tensors[key].astype(np.int64) if key in INTEGER_INPUTS else tensors[key]
        dropped = [k for k in tensors if k not in feeds]
        if dropped:
            logger.warning("hfexport: dropping inputs the export does not take: %s", dropped)
        # What the component reads its batch from: tokens, their embeddings, or audio features.
        primary = next((n for n in PRIMARY_INPUTS if n in input_names), "input_ids")
        if primary not in feeds:
            raise ValueError(f"component '{name}' needs {primary}")
        batch, query = feeds[primary].shape[:2]
        if "attention_mask" in input_names and "attention_mask" not in feeds:
            past = _cache_length(cache)
            feeds["attention_mask"] = np.ones((batch, past + query), np.int64)
        if "position_ids" in input_names and "position_ids" not in feeds:
            # What the model's forward uses without them (and how a cache it built was rotated).
            past = _cache_length(cache)
            feeds["position_ids"] = np.broadcast_to(np.arange(past, past + query, dtype=np.int64), (batch, query)).copy()
        # past_key_values.{i}.key, or as a .pt2 program's keyword (past_key_values_{i}_key)
        past_inputs = [n for n in input_names if _PAST_INPUT.fullmatch(n)]
        if not past_inputs and _cache_length(cache) > 0 and self._manifest.cache == CACHE_STATEFUL:
            raise ValueError(f"component '{name}' keeps its KV cache inside the runtime: it cannot be called with "
                             "a given cache (use generate())")
        if past_inputs:
            if cache is None:
                raise ValueError(f"component '{name}' reads a KV cache: pass past_key_values")
            layers = _cache_layers(cache)
            for n in past_inputs:
                layer, kind = _PAST_INPUT.fullmatch(n).groups()
                k, v = layers[int(layer)]
                feeds[n] = _to_numpy(k if kind == "key" else v)
        missing = [n for n in input_names if n not in feeds and n != "beam_idx"]
        if missing:
            raise ValueError(f"component '{name}' cannot be called with these inputs: it also takes {missing} "
                             "(use generate() for the static-cache loop)")
        return feeds, as_torch

    # -- generation --------------------------------------------------------------------------
    @property
    def codec(self):
        if self._codec is None:
            from .text import TextCodec

            self._codec = TextCodec(self.directory)
        return self._codec

    def _runner(self):
        if self._decode_runner is None:
            from .runner import open_runner

            self._decode_runner = open_runner(self.directory)
        return self._decode_runner

    def generate(self, input_ids=None, attention_mask=None, *, max_new_tokens: int | None = None,
                 do_sample: bool | None = None, temperature: float | None = None, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None, generation_config=None,
                 chat: bool = False, system: str | None = None, ignore_eos: bool = False, streamer=None,
                 input_features=None, language: str | None = None, task: str | None = None,
                 return_timestamps: bool = False, return_segments: bool = False, pixel_values=None, images=None,
                 image_grid_thw=None, images_kwargs: Mapping[str, Any] | None = None, **kwargs):
        """Like model.generate: prompt ids [batch, seq] (left-padded, with attention_mask) in,
        prompt + new ids out (rows that finished padded with pad_token_id). A string (or a list of
        strings) is tokenized with the export's tokenizer (`chat=True`: through its chat template,
        with an optional `system` message) and the new text is returned instead. `streamer(text)`
        is called with the text of each step as it becomes final. A speech recognition export
        (Whisper) takes `input_features` [batch, mels, frames] (and `language`, `task`,
        `return_timestamps`; over 3000 frames: audio longer than 30 s, decoded sequentially, with
        `attention_mask` [batch, frames] for rows of different lengths) and returns the new ids, or
        with `return_segments` {"sequences", "segments"}, as WhisperForConditionalGeneration.generate does.
        A vision-language export (LLaVA, Gemma 3, Qwen2-VL) takes `pixel_values` [images, channels,
        height, width] for the prompt's image tokens (Qwen2-VL: flattened patches with
        `image_grid_thw`; what its processor returns: `generate(**processor(...))`), or
        `images` (files or Pillow images) with a prompt string, which is then formatted as the
        model's processor does (its image placeholders expanded; with chat, image entries), the
        images preprocessed with `images_kwargs` over the stored settings, as the processor takes
        them (e.g. {"do_pan_and_scan": True}: Gemma 3's crops)."""
        from .runner import generate as run_loop
        from .sampling import Sampler
        from .text import TextStream

        # token_type_ids, mm_token_type_ids (vision-language processors'): the image tokens follow from the ids.
        unknown = [k for k in kwargs if k not in ("pad_token_id", "eos_token_id", "use_cache", "return_dict_in_generate",
                                                  "token_type_ids", "mm_token_type_ids",
                                                  "pixel_attention_mask")]
        if unknown:
            raise TypeError(f"generate() got unsupported arguments {unknown}")
        if input_features is not None or self.manifest.get("task") == "automatic-speech-recognition":
            return self._generate_speech(input_features, attention_mask, max_new_tokens, language, task,
                                         generation_config, return_timestamps, return_segments)
        if self.manifest.get("task") == "text2text-generation":
            return self._generate_text2text(input_ids, attention_mask, max_new_tokens, generation_config,
                                            do_sample, temperature, top_k, top_p, seed, kwargs.get("eos_token_id"))
        prompts = input_ids
        text_in = isinstance(prompts, str) or (isinstance(prompts, (list, tuple)) and len(prompts) > 0
                                               and all(isinstance(t, str) for t in prompts))
        if images_kwargs and images is None:
            raise ValueError("generate(images_kwargs=...) applies to images=... (files or Pillow images)")
        if images is not None:
            if not (text_in and isinstance(prompts, str)):
                raise ValueError("generate(images=...) takes one prompt string (or pass the processor's inputs)")
            from .vision import image_inputs
            from .vlm import encode_image_prompt

            images = list(images) if isinstance(images, (list, tuple)) else [images]
            manifest = load_manifest(self.directory)
            processed = image_inputs(self.directory, images, dict(images_kwargs or {}))
            row = encode_image_prompt(manifest, self.codec, prompts, processed, chat, system)
            input_ids, attention_mask = np.array([row], np.int64), None
            pixel_values, image_grid_thw = processed["pixel_values"], processed.get("image_grid_thw")
        elif text_in:
            input_ids, attention_mask = self._encode_texts(prompts, chat, system)
        elif input_ids is None:
            raise ValueError("generate() needs input_ids or a prompt string")
        as_torch = hasattr(input_ids, "detach")
        ids = _to_numpy(input_ids).astype(np.int64)
        if ids.ndim == 1:
            ids = ids[None]
        mask = None if attention_mask is None else _to_numpy(attention_mask).astype(np.int64)
        settings = self._generation_settings(generation_config, max_new_tokens, do_sample, temperature, top_k, top_p)
        sampler = Sampler(settings["do_sample"], settings["temperature"], settings["top_k"], settings["top_p"], seed)
        eos = kwargs.get("eos_token_id")
        eos = [eos] if isinstance(eos, int) else eos
        stream = TextStream(self.codec) if (streamer is not None and text_in and len(ids) == 1) else None
        on_tokens = None
        if stream is not None:
            def on_tokens(tokens):
                text = stream.feed(int(tokens[0]))
                if text:
                    streamer(text)
        runner = self._runner()
        if hasattr(runner, "set_images"):  # a vision-language export: the prompt's images, or none
            grids = None if image_grid_thw is None else _to_numpy(image_grid_thw)
            pixel_mask = kwargs.get("pixel_attention_mask")
            runner.set_images(None if pixel_values is None else _to_numpy(pixel_values), grids,
                              None if pixel_mask is None else _to_numpy(pixel_mask))
        elif pixel_values is not None:
            raise ValueError("generate() got pixel_values, but this export has no vision encoder")
        new = run_loop(runner, ids, mask, max_new_tokens=settings["max_new_tokens"], sampler=sampler,
                       eos_token_ids=eos, ignore_eos=ignore_eos, on_tokens=on_tokens)
        if text_in:
            texts = [self.codec.decode(row) for row in new]
            return texts[0] if isinstance(prompts, str) else texts
        out = np.concatenate([ids, new.astype(np.int64)], axis=1)
        return _as_torch(out) if as_torch else out

    def _generate_speech(self, input_features, attention_mask, max_new_tokens, language, task, generation_config,
                         return_timestamps, return_segments):
        from .seq2seq import whisper_generate

        if input_features is None:
            raise ValueError("generate() of a speech recognition export takes input_features")
        as_torch = hasattr(input_features, "detach")
        gen_path = self.directory / "generation_config.json"
        gen = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
        if generation_config is not None:
            gen.update(generation_config.to_dict() if hasattr(generation_config, "to_dict") else dict(generation_config))
        segments = [] if return_segments else None
        mask = None if attention_mask is None else _to_numpy(attention_mask)
        out = whisper_generate(self._runner(), _to_numpy(input_features), gen, max_new_tokens, language=language,
                               task=task, return_timestamps=return_timestamps, attention_mask=mask, segments=segments)
        out = _as_torch(out) if as_torch else out
        return {"sequences": out, "segments": segments} if return_segments else out

    def _generate_text2text(self, inputs, attention_mask, max_new_tokens, generation_config, do_sample, temperature,
                            top_k, top_p, seed, eos):
        """An encoder-decoder's generate: ids in, the decoder's start token + new ids out; text
        (a string or a list of them) in, the decoded texts out."""
        from .sampling import Sampler
        from .seq2seq import text2text_generate

        if inputs is None:
            raise ValueError("generate() needs input_ids or a text")
        text_in = isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and len(inputs) > 0
                                              and all(isinstance(t, str) for t in inputs))
        if text_in:
            batch = self.codec.encode_batch([inputs] if isinstance(inputs, str) else list(inputs))
            ids, mask = batch["input_ids"], batch["attention_mask"]
        else:
            ids = _to_numpy(inputs).astype(np.int64)
            mask = None if attention_mask is None else _to_numpy(attention_mask).astype(np.int64)
        settings = self._generation_settings(generation_config, max_new_tokens, do_sample, temperature, top_k, top_p)
        sampler = Sampler(settings["do_sample"], settings["temperature"], settings["top_k"], settings["top_p"], seed)
        gen_path = self.directory / "generation_config.json"
        gen = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
        eos = [eos] if isinstance(eos, int) else eos
        out = text2text_generate(self._runner(), ids, mask, gen, settings["max_new_tokens"], sampler=sampler,
                                 eos_token_ids=eos)
        if text_in:
            texts = [self.codec.decode(row) for row in out]
            return texts[0] if isinstance(inputs, str) else texts
        return _as_torch(out) if hasattr(inputs, "detach") else out

    def _encode_texts(self, prompts, chat: bool, system: str | None):
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        rows = [self.codec.encode_prompt(p, chat=chat, system=system) for p in prompts]
        width = max(len(r) for r in rows)
        pad = self.manifest.get("generation", {}).get("pad_token_id")
        if not isinstance(pad, int):
            eos = self.manifest.get("generation", {}).get("eos_token_id") or [0]
            pad = int(eos[0])
        ids = np.full((len(rows), width), pad, np.int64)
        mask = np.zeros((len(rows), width), np.int64)
        for i, r in enumerate(rows):  # left padding, as decoder-only generation needs
            ids[i, width - len(r):] = r
            mask[i, width - len(r):] = 1
        return ids, mask

    def _generation_settings(self, generation_config, max_new_tokens, do_sample, temperature, top_k, top_p) -> dict:
        """Explicit arguments, else generation_config's, else the export's generation_config.json,
        else transformers' defaults."""
        saved = {}
        path = self.directory / "generation_config.json"
        if path.is_file():
            saved = json.loads(path.read_text())
        given = generation_config.to_dict() if hasattr(generation_config, "to_dict") else dict(generation_config or {})
        defaults = {"max_new_tokens": 20, "do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0}
        explicit = {"max_new_tokens": max_new_tokens, "do_sample": do_sample, "temperature": temperature,
                    "top_k": top_k, "top_p": top_p}
        out = {}
        for key, default in defaults.items():
            for source in (explicit, given, saved):
                if source.get(key) is not None:
                    out[key] = source[key]
                    break
            else:
                out[key] = default
        return out


_PAST_INPUT = re.compile(r"past_key_values[._](\d+)[._](key|value)")


def _cache_length(cache) -> int:
    if cache is None:
        return 0
    if hasattr(cache, "get_seq_length"):
        return int(cache.get_seq_length())
    return int(_to_numpy(cache[0][0]).shape[2])


def _cache_layers(cache) -> list[tuple[Any, Any]]:
    """[(keys, values)] per layer of a transformers Cache or a legacy tuple of pairs."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return [(k, v) for k, v in cache]


def _as_torch(value: np.ndarray):
    try:
        import torch
    except ImportError:
        return value
    value = np.ascontiguousarray(value)
    if value.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: torch's, same bits
        return torch.from_numpy(value.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(value)


# ------------------------------------------------------------------------------------------------
# Generation stages (decompose_for_generation)


def _stage_module(model, stage: str, multi_token_decode: bool, generation_config):
    import torch

    class GenerationStage(torch.nn.Module):
        """One stage of `model`'s generation (prefill or decode): runs eagerly as the model does;
        exporting it exports that stage's graph."""

        def __init__(self):
            super().__init__()
            self.model = model
            self.stage = stage
            self.multi_token_decode = multi_token_decode
            self.generation_config = generation_config
            self.config = model.config

        def forward(self, **kwargs):
            # transformers' caches grow in place: the stage runs on a copy, so its kwargs stay as
            # captured and an export after an eager call exports (and verifies) the same stage.
            kwargs = {k: copy.deepcopy(v) if k in CACHE_KWARGS else v for k, v in kwargs.items()}
            return self.model(**kwargs)

    return GenerationStage()


def decompose_for_generation(model, inputs: Mapping[str, Any], generation_config=None,
                             multi_token_decode: bool = False) -> dict[str, tuple[Any, dict]]:
    """Runs `model.generate(**inputs, max_new_tokens=2)` once and captures the forward kwargs of
    its prefill and first decode step: `{"prefill": (submodel, kwargs), "decode": (submodel,
    kwargs)}` (only "decode" with `multi_token_decode`). Each submodel runs eagerly
    (`submodel(**kwargs)`, on a copy of the captured cache: the kwargs never change), and
    `exporter.export(submodel, kwargs, config)` exports that stage, the same whether or not it
    ran before."""
    import torch

    calls: list[dict] = []
    original = model.forward

    def capture(*args, **kwargs):
        calls.append(copy.deepcopy(kwargs))  # the cache changes in place after the call
        return original(*args, **kwargs)

    model.forward = capture
    try:
        with torch.no_grad():
            generate_kwargs = dict(inputs)
            if generation_config is not None:
                generate_kwargs["generation_config"] = generation_config
            model.generate(**generate_kwargs, max_new_tokens=2, min_new_tokens=2, do_sample=False)
    finally:
        del model.forward
    if len(calls) < 2:
        raise RuntimeError(f"model.generate made {len(calls)} forward calls; a prefill and a decode step were expected")
    if multi_token_decode:
        return {DECODE: (_stage_module(model, DECODE, True, generation_config), calls[1])}
    return {PREFILL: (_stage_module(model, PREFILL, False, generation_config), calls[0]),
            DECODE: (_stage_module(model, DECODE, False, generation_config), calls[1])}


# ------------------------------------------------------------------------------------------------
# Exporters


PT2_INTERFACE = "pt2_interface"  # export.json: how a .pt2 decode program takes its cache
STATIC_CACHE = "transformers.StaticCache"


def _model_config(model):
    if _is_model_path(model):
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(str(model))
    return model.config


def static_cache_template(hf_config, batch: int, max_cache_len: int, dtype: str):
    """An initialized, zeroed transformers StaticCache for the export's cache, its pytree
    registered as transformers.exporters registers it (the documented loop does the same)."""
    import torch
    from transformers import StaticCache

    try:
        from transformers.exporters.exporter_dynamo import register_pytree_node
    except ImportError as e:
        raise ConfigError("DynamoConfig(cache_kwarg=...): the StaticCache interface needs transformers.exporters "
                          "(transformers >= 5.24); pass cache_kwarg=None for flat cache tensors") from e
    register_pytree_node(StaticCache)
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    cache = StaticCache(config=hf_config, max_cache_len=max_cache_len)
    cache.early_initialization(batch, kv_heads, head_dim, getattr(torch, dtype), torch.device("cpu"))
    return cache


def static_cache_interface(hf_config, gen: dict, dtype: str, cache_kwarg: str, inputs: dict, scratch: Path) -> dict:
    """The core's backend.interface for a StaticCache decode program: the pytree spec of
    (input_ids, attention_mask, position_ids, cache) and example inputs holding the template."""
    import torch
    import torch.utils._pytree as pytree

    batch, length = int(gen.get("batch_size", 1)), int(gen["max_cache_len"])
    cache = static_cache_template(hf_config, batch, length, dtype)
    ids = inputs.get("input_ids")
    ids = torch.as_tensor(_to_numpy(ids)).long() if ids is not None else torch.ones(batch, 1, dtype=torch.long)
    positions = torch.arange(ids.shape[1])[None].expand(ids.shape[0], -1)
    mask = (torch.arange(length)[None, None, :] <= positions[:, :, None])[:, None]
    kwargs = {"input_ids": ids, "attention_mask": mask, "position_ids": positions, cache_kwarg: cache}
    leaves, spec = pytree.tree_flatten(((), kwargs))
    want = (batch, None, length, None)
    for i, layer in enumerate(getattr(cache, "layers", [])):
        keys = getattr(layer, "keys", None)
        if keys is None or keys.shape[0] != want[0] or keys.shape[2] != want[2]:
            raise ConfigError(f"DynamoConfig: layer {i} of transformers' StaticCache for this model is not a full "
                              f"[{batch}, heads, {length}, head_dim] cache (a sliding-window layer?): hfexport's "
                              "static cache is full-length on every layer; pass cache_kwarg=None")
    if len(leaves) != 3 + 3 * len(cache.layers):
        raise ConfigError(f"DynamoConfig: transformers' StaticCache flattens to {len(leaves) - 3} tensors, not the "
                          "keys, values and cumulative_length of each layer hfexport writes; pass cache_kwarg=None")
    cache.reset()
    sample = scratch / "sample_inputs.pt"
    torch.save(((), kwargs), str(sample))
    return {"in_spec": pytree.treespec_dumps(spec), "forward_arg_names": list(kwargs), "cache_lengths": True,
            "sample_inputs": str(sample)}


def _generation_options(generation_config, multi_token_decode: bool, batch: int) -> dict:
    cache = "dynamic"
    max_cache_len = 0
    if generation_config is not None:
        get = generation_config.get if isinstance(generation_config, Mapping) else (
            lambda key, default=None: getattr(generation_config, key, default))
        cache = get("cache_implementation", None) or "dynamic"
        max_cache_len = int(get("max_cache_len", 0) or 0)
    if cache not in ("dynamic", "static"):
        raise ConfigError(f"generation_config: cache_implementation '{cache}' is not supported (dynamic, static)")
    out = {"enabled": True, "cache_implementation": cache, "multi_token_decode": bool(multi_token_decode)}
    if cache == "static":
        if max_cache_len <= 0:
            raise ConfigError("generation_config: a static cache needs max_cache_len")
        out["max_cache_len"] = max_cache_len
        out["batch_size"] = batch
    return out


class HfExporter:
    export_format: str
    config_class: type[ExportConfigMixin]

    def __init__(self, **options):
        """`options`: `tokenizer` (its files go into the export, for text in / text out), `verbose`."""
        unknown = [k for k in options if k not in ("tokenizer", "verbose")]
        if unknown:
            raise TypeError(f"{type(self).__name__}() got unknown options {unknown} (tokenizer, verbose)")
        self.tokenizer = options.get("tokenizer")
        self.verbose = bool(options.get("verbose", False))

    def _config(self, config) -> ExportConfigMixin:
        if config is None:
            return self.config_class()
        if isinstance(config, Mapping):
            config = dict(config)
            config.setdefault("export_format", self.config_class().export_format)
            return self.config_class.from_dict(config)
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} takes a {self.config_class.__name__} or a dict, "
                            f"got {type(config).__name__}")
        return config

    def core_config(self, config: ExportConfigMixin, inputs: Mapping[str, Any] | None,
                    generation: dict | None = None) -> dict:
        """The core's export config for `config` and the sample inputs (what export.json records)."""
        tensors = _tensor_inputs(inputs)
        shapes = {k: tuple(v.shape) for k, v in tensors.items()}
        out: dict[str, Any] = {"format": config.core_format(), "dtype": config.core_dtype()}
        if generation is not None:
            config.check_generation()
            out["generation"] = generation
        if config.dynamic_shapes is not None:
            dims = dims_from_dynamic_shapes(config.dynamic_shapes, shapes if generation is None else {})
            dynamic = True
        elif config.dynamic or generation is not None or not shapes:
            dims, dynamic = {}, True
        else:
            dims, dynamic = static_dims(shapes), False
        out["dynamic"] = dynamic
        if dims:
            out["dims"] = dims
        if generation is None and tensors:
            if any(k in tensors for k in CACHE_KWARGS):
                raise ConfigError("export(): the inputs hold a KV cache: export the generation components with "
                                  "export_for_generation (or a decompose_for_generation stage)")
            names = [k for k in tensors]
            if sorted(names) != sorted(DECODER_INPUTS):
                out["inputs"] = [n for n in DECODER_INPUTS if n in names] + [n for n in names if n not in DECODER_INPUTS]
        quantization = config.core_quantization()
        if quantization:
            out["quantization"] = quantization
        backend = config.core_backend(generation is not None)
        if backend:
            out["backend"] = backend
        return json.loads(core().normalize_config(json.dumps(out)))

    def _write(self, model, core_config: dict) -> tuple[Path, str]:
        """Runs the core's export into a fresh temporary directory: (export dir, the temp root)."""
        root = tempfile.mkdtemp(prefix="hfexport-")
        out = Path(root) / "export"
        try:
            if _is_model_path(model):
                core().export_checkpoint(str(model), str(out), json.dumps(core_config), False, self.verbose)
            else:
                self._write_live(model, out, core_config, Path(root))
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return out, root

    def _write_live(self, model, out: Path, core_config: dict, root: Path) -> None:
        if not hasattr(model, "config") or not hasattr(model, "state_dict"):
            raise TypeError(f"model must be a PreTrainedModel or a checkpoint directory, got {type(model).__name__}")
        companion = root / "companion"
        companion.mkdir()
        _write_companion_files(model, self.tokenizer, companion)
        generation = companion / "generation_config.json"
        entries, keep = _tensor_buffers(model)
        core().export_tensors((companion / "config.json").read_text(),
                              generation.read_text() if generation.is_file() else None, entries, str(companion),
                              str(out), json.dumps(core_config), False, self.verbose, type(model).__name__)
        del keep  # the core is done reading them

    # -- the API -----------------------------------------------------------------------------
    def export(self, model, inputs: Mapping[str, Any] | None = None, config=None, *,
               verify: bool | None = None) -> ExportedModel:
        """One graph taking exactly `inputs`' tensors (input_ids, and optionally attention_mask and
        position_ids; those left out are derived as the model's forward derives them). With inputs,
        the eager model and the export run on them and the largest logit difference is recorded
        in export.json (`verification`; a warning above tolerance). `verify` defaults to True for
        a live model, False for a checkpoint path (it would load the model in transformers)."""
        if getattr(model, "stage", None) in (PREFILL, DECODE) and hasattr(model, "multi_token_decode"):
            return self._export_stage(model, inputs, config, verify)
        config = self._config(config)
        directory, root = self._write(model, self.core_config(config, inputs))
        exported = ExportedModel(directory, temporary=root)
        if inputs and (verify if verify is not None else not _is_model_path(model)):
            _verify_forward(exported, model, inputs)
        return exported

    def export_for_generation(self, model, inputs: Mapping[str, Any] | None = None, config=None, *,
                              generation_config=None, multi_token_decode: bool = False,
                              verify: bool | None = None) -> ExportedModel:
        """The graphs a decode loop needs: `prefill` + `decode`, or one `decode` with
        multi_token_decode or a static cache (generation_config.cache_implementation="static" with
        max_cache_len), or as the format's op profile makes them. `inputs` are generate kwargs."""
        config = self._config(config)
        generation = _generation_options(generation_config, multi_token_decode, _batch_size(inputs))
        core_config = self._bounded_by(self.core_config(config, inputs, generation), inputs)
        with tempfile.TemporaryDirectory(prefix="hfexport-") as scratch:
            record = self._program_interface(model, config, core_config, inputs, Path(scratch))
            directory, root = self._write(model, core_config)
        exported = ExportedModel(directory, temporary=root)
        if record:
            exported.record(*record)
        if inputs and (verify if verify is not None else not _is_model_path(model)):
            _verify_generation(exported, model, inputs)
        return exported

    def _program_interface(self, model, config, core_config: dict, inputs, scratch: Path) -> tuple | None:
        """A format's hook into a generation export's calling convention: may add backend options
        to `core_config` (files in `scratch`); returns a (key, value) to record in export.json."""
        return None

    def _bounded_by(self, core_config: dict, inputs) -> dict:
        """A format's hook: bounds a generation export's dims so that the sample `inputs` fit."""
        return core_config

    def _export_stage(self, stage, inputs, config, verify) -> ExportedModel:
        """A decompose_for_generation stage: the generation export of its mode, keeping the graph
        that serves the stage (the format's one graph when it has no separate prefill)."""
        config = self._config(config)
        generation = _generation_options(stage.generation_config, stage.multi_token_decode, _batch_size(inputs))
        core_config = self._bounded_by(self.core_config(config, None, generation), inputs)
        directory, root = self._write(stage.model, core_config)
        names = list(load_manifest(directory).data["components"])
        name = stage.stage if stage.stage in names else DECODE
        exported = ExportedModel(directory, components=[name], temporary=root)
        if inputs and verify is not False:
            _verify_stage(exported, name, stage, inputs)
        return exported


class OnnxExporter(HfExporter):
    export_format = "onnx"
    config_class = OnnxConfig


class OpenVINOExporter(HfExporter):
    export_format = "openvino"
    config_class = OpenVINOConfig


class DynamoExporter(HfExporter):
    export_format = "dynamo"
    config_class = DynamoConfig

    def _program_interface(self, model, config, core_config: dict, inputs, scratch: Path) -> tuple | None:
        """A static cache's decode program takes a transformers StaticCache under
        `config.cache_kwarg` (its pytree spec and an initialized template as the program's
        example inputs), so that the documented Dynamo decode loop runs on it as it is."""
        gen = core_config.get("generation") or {}
        if gen.get("cache_implementation") != "static" or config.cache_kwarg is None:
            return None
        interface = static_cache_interface(_model_config(model), gen, core_config.get("dtype", "float32"),
                                           config.cache_kwarg, _tensor_inputs(inputs), scratch)
        core_config.setdefault("backend", {})["interface"] = interface
        return PT2_INTERFACE, {"cache": STATIC_CACHE, "kwarg": config.cache_kwarg}


class ExecutorchExporter(HfExporter):
    export_format = "executorch"
    config_class = ExecutorchConfig

    def _bounded_by(self, core_config: dict, inputs) -> dict:
        """ExecuTorch plans memory at the dims' bounds, batch 1 unless told: a dynamic cache's
        batch is bounded by the sample's (a static cache has its own batch_size)."""
        batch = _batch_size(inputs)
        static = (core_config.get("generation") or {}).get("cache_implementation") == "static"
        if batch > 1 and not static and "batch" not in core_config.get("dims", {}):
            core_config.setdefault("dims", {})["batch"] = {"min": 1, "max": batch}
        return core_config


class AutoHfExporter:
    """`AutoHfExporter.from_config(config)`: the exporter of the config's format."""

    @classmethod
    def from_config(cls, export_config, **kwargs) -> HfExporter:
        if isinstance(export_config, Mapping):
            export_config = AutoExportConfig.from_dict(export_config)
        if not isinstance(export_config, ExportConfigMixin):
            raise TypeError(f"AutoHfExporter.from_config takes an export config or a dict, got "
                            f"{type(export_config).__name__}")
        return resolve(config_format(export_config.export_format).exporter)(**kwargs)


# ------------------------------------------------------------------------------------------------
# Built-in parity verification


def _tolerance(exported: ExportedModel) -> float | None:
    """None for quantized weights: they differ from the float model by design."""
    if exported.manifest.get("quantization"):
        return None
    return TOLERANCE.get(exported.manifest.get("dtype", "float32"), 1e-4)


def _record(exported: ExportedModel, reference: np.ndarray, ours: np.ndarray, what: str, inputs,
            real: np.ndarray | None = None) -> None:
    """`real`: [batch, seq] of the positions compared (a pad position attends to nothing: its
    logits mean nothing in either model)."""
    import torch

    if real is not None:
        reference, ours = reference[real], ours[real]
    scale = max(1.0, float(np.abs(reference).max()))
    diff = float(np.abs(reference.astype(np.float64) - ours.astype(np.float64)).max())
    tolerance = _tolerance(exported)
    passed = None if tolerance is None else diff <= tolerance * scale
    exported.record("verification", {
        "compared": what, "reference": f"transformers eager (torch {torch.__version__})",
        "inputs": {k: list(v.shape) for k, v in _tensor_inputs(inputs).items()},
        "max_abs_diff": diff, "logits_scale": scale, "tolerance": tolerance, "passed": passed})
    if passed is False:
        logger.warning("hfexport: the export's %s differ from the eager model's by %.3g (tolerance %.3g x %.3g)",
                       what, diff, tolerance, scale)


def _eager(model, auto_class: str = "AutoModelForCausalLM"):
    """The eager model for a checkpoint path (loaded in float32 with `auto_class`), else the model itself."""
    if not _is_model_path(model):
        return model
    import transformers

    return getattr(transformers, auto_class).from_pretrained(str(model), dtype="float32").eval()


def _verify_forward(exported: ExportedModel, model, inputs) -> None:
    import torch

    with torch.no_grad():
        reference = _to_numpy(_eager(model)(**inputs).logits).astype(np.float32)
    mask = _tensor_inputs(inputs).get("attention_mask")
    real = None if mask is None else _to_numpy(mask).astype(bool)
    _record(exported, reference, _to_numpy(exported(**inputs)["logits"]), "logits at unpadded positions"
            if real is not None else "logits", inputs, real)


def _verify_generation(exported: ExportedModel, model, inputs) -> None:
    """The first step's logits: the eager forward's last position vs the decode loop's prefill."""
    import torch

    tensors = {k: _to_numpy(v) for k, v in _tensor_inputs(inputs).items()}
    if exported._manifest.has_component(ENCODER):
        return _verify_encoder_decoder(exported, model, tensors)
    ids = tensors["input_ids"].astype(np.int64)
    mask = tensors.get("attention_mask", np.ones_like(ids)).astype(np.int64)
    with torch.no_grad():
        eager = _eager(model)
        positions = torch.from_numpy(_positions_from_mask(mask, ids.shape[1]))
        logits = eager(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                       position_ids=positions).logits
    reference = _to_numpy(logits[:, -1]).astype(np.float32)
    ours = exported._runner().prefill(ids, mask, 1)  # the next prefill starts the loop afresh
    _record(exported, reference, ours, "first-step logits", inputs)


def _verify_encoder_decoder(exported: ExportedModel, model, tensors: dict) -> None:
    """The first step's logits of an encoder-decoder: the eager forward over the encoder inputs and
    the decoder prompt (decoder_input_ids, else the decoder's start token) vs the runner's."""
    import torch

    from .seq2seq import decoder_start_token

    encoder_inputs = {k: v for k, v in tensors.items() if k in ("input_features", "input_ids", "attention_mask")}
    batch = next(iter(encoder_inputs.values())).shape[0]
    prompt = tensors.get("decoder_input_ids")
    if prompt is None:
        gen_path = exported.directory / "generation_config.json"
        gen = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
        prompt = np.full((batch, 1), decoder_start_token(exported.directory, gen), np.int64)
    prompt = prompt.astype(np.int64)
    with torch.no_grad():
        feeds = {k: torch.from_numpy(v) for k, v in encoder_inputs.items()}
        auto = "AutoModelForSpeechSeq2Seq" if "input_features" in feeds else "AutoModelForSeq2SeqLM"
        logits = _eager(model, auto)(**feeds, decoder_input_ids=torch.from_numpy(prompt)).logits
    reference = _to_numpy(logits[:, -1]).astype(np.float32)
    runner = exported._runner()
    runner.encode(**{k: v.astype(np.int64) if v.dtype.kind in "iu" else v.astype(np.float32) for k, v in encoder_inputs.items()})
    ours = runner.prefill(prompt, np.ones_like(prompt), 1)
    _record(exported, reference, ours, "first-step logits", tensors)


def _verify_stage(exported: ExportedModel, name: str, stage, inputs) -> None:
    import torch

    try:
        ours = exported._run_component(name, inputs)["logits"]
    except ValueError as e:  # a graph only the loop can drive (static cache, shared buffer)
        exported.record("verification", {"compared": None, "skipped": str(e)})
        return
    with torch.no_grad():
        reference = stage(**copy.deepcopy(dict(inputs))).logits
    _record(exported, _to_numpy(reference[:, -1]).astype(np.float32), _to_numpy(ours)[:, -1], "last-position logits",
            inputs)
