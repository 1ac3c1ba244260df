"""Generation with a vision-language export (llava): its `vision_encoder` turns the images into
features, its `token_embedding` the prompt's ids into embeddings, and the features replace the
embeddings of the image tokens (as the model's forward does with masked_scatter) before the
`text_decoder` runs the decode loop over inputs_embeds. Each format's decode-loop runner serves
the text decoder; `VisionLanguage` gives it the embeddings instead of ids."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np

from .forward import open_graph
from .manifest import CACHE_DYNAMIC, TEXT_DECODER, TOKEN_EMBEDDING, VISION_ENCODER, ExportManifest
from .runner import DecodeRunner, GenerationError

IMAGE_TOKENS = "image_tokens"  # export.json: image_token_id, features_per_image


class VisionLanguage:
    """Mixed into a format's decode-loop runner (before it in the bases)."""

    STEP = TEXT_DECODER
    TOKENS = "inputs_embeds"

    def __init__(self, manifest: ExportManifest, **options):
        super().__init__(manifest, **options)
        self.embedder = _component_graph(manifest, TOKEN_EMBEDDING, options)
        self.vision = _component_graph(manifest, VISION_ENCODER, options)
        spec = manifest.data.get(IMAGE_TOKENS) or {}
        self.image_token_id = int(spec.get("image_token_id", -1))
        self.image_features: np.ndarray | None = None
        self.takes_token_types = any(i["name"] == "token_type_ids" for i in manifest.component(TEXT_DECODER)["inputs"])

    def set_images(self, pixel_values) -> None:
        """The images of the next prompt, [images, channels, height, width] in the order their
        image tokens appear (row by row); None for a prompt without images."""
        if pixel_values is None:
            self.image_features = None
            return
        pixels = np.ascontiguousarray(np.asarray(pixel_values, dtype=np.float32))
        features = self.vision({"pixel_values": pixels})["image_features"]
        self.image_features = np.asarray(features).reshape(-1, features.shape[-1])

    def _token_inputs(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        inputs = {"inputs_embeds": self._embeddings(ids)}
        if self.takes_token_types:  # 1 marks the image tokens (Gemma 3's image attention)
            inputs["token_type_ids"] = (ids == self.image_token_id).astype(np.int64)
        return inputs

    def _embeddings(self, ids: np.ndarray) -> np.ndarray:
        embeds = np.array(self.embedder({"input_ids": np.ascontiguousarray(ids, dtype=np.int64)})["inputs_embeds"])
        slots = ids == self.image_token_id
        count = int(slots.sum())
        if count:
            have = 0 if self.image_features is None else len(self.image_features)
            if count != have:
                raise GenerationError(f"the prompt has {count} image tokens but the images give {have} features")
            embeds[slots] = self.image_features.astype(embeds.dtype)
        return embeds


def _llava_placeholder(directory: Path, codec, spec: dict) -> tuple[str, str]:
    """LlavaProcessor: each image token of the text becomes features_per_image of them."""
    path = directory / "processor_config.json"
    settings = json.loads(path.read_text()) if path.is_file() else {}
    token = settings.get("image_token") or codec.token(int(spec["image_token_id"]))
    return token, token * int(spec["features_per_image"])


def _gemma3_placeholder(directory: Path, codec, spec: dict) -> tuple[str, str]:
    """Gemma3Processor: each <start_of_image> becomes "\n\n<start_of_image>", the image tokens,
    "<end_of_image>\n\n"."""
    config = json.loads((directory / "config.json").read_text())
    boi, eoi = codec.token(int(config.get("boi_token_index", 255999))), codec.token(int(config.get("eoi_token_index", 256000)))
    image = codec.token(int(spec["image_token_id"]))
    return boi, f"\n\n{boi}{image * int(spec['features_per_image'])}{eoi}\n\n"


# model_type -> (directory, codec, export.json's image_tokens) -> (the placeholder a prompt writes
# for an image, the text its processor puts there).
IMAGE_PLACEHOLDERS = {"llava": _llava_placeholder, "gemma3": _gemma3_placeholder}


def encode_image_prompt(manifest: ExportManifest, codec, prompt: str, images: int, chat: bool = False,
                        system: str | None = None) -> list[int]:
    """A prompt's ids as the model's processor makes them for `images` images: the prompt (through
    the chat template with chat=True, the images as {"type": "image"} entries), each image's
    placeholder replaced by its expansion. Without chat, placeholders missing from the prompt are
    put before it."""
    model_type = manifest.data.get("source", {}).get("model_type", "")
    if model_type not in IMAGE_PLACEHOLDERS:
        raise GenerationError(f"no prompt format for images of model type '{model_type}' "
                              f"(known: {', '.join(IMAGE_PLACEHOLDERS)}); pass the processor's input_ids")
    placeholder, expansion = IMAGE_PLACEHOLDERS[model_type](manifest.directory, codec, manifest.data[IMAGE_TOKENS])
    if not chat:
        prompt = placeholder * max(images - prompt.count(placeholder), 0) + prompt
    text, special_tokens = codec.prompt_text(prompt, chat=chat, system=system, images=images)
    if text.count(placeholder) != images:
        raise GenerationError(f"the prompt has {text.count(placeholder)} image placeholders ({placeholder}) "
                              f"for {images} images")
    return codec.encode(text.replace(placeholder, expansion), add_special_tokens=special_tokens)


def _component_graph(manifest: ExportManifest, name: str, options: dict):
    entry = manifest.component(name)
    program = {"program": entry["program"]} if "program" in entry else {}
    return open_graph(manifest.format, manifest.directory / entry["file"], manifest.data, **program, **options)


def _executorch_base(manifest: ExportManifest) -> str:
    kind = "Dynamic" if manifest.cache == CACHE_DYNAMIC else "Static"
    return f"hfexport.executorch_runner:Executorch{kind}Runner"


# Export format -> the decode-loop runner class the text decoder runs on.
_BASES = {
    "onnx": lambda manifest: "hfexport.onnxruntime_runner:OnnxRuntimeRunner",
    "openvino": lambda manifest: "hfexport.openvino_runner:OpenVinoRunner",
    "pt2": lambda manifest: "hfexport.torch_runner:TorchProgramRunner",
    "executorch": _executorch_base,
}


def open_vision_language_runner(manifest: ExportManifest, **options) -> DecodeRunner:
    if manifest.format not in _BASES:
        raise GenerationError(f"{manifest.directory}: no vision-language runner for format '{manifest.format}'")
    module, cls = _BASES[manifest.format](manifest).split(":")
    base = getattr(importlib.import_module(module), cls)
    runner = type(f"VisionLanguage{base.__name__}", (VisionLanguage, base), {})
    return runner(manifest, **options)
