"""Generation with a vision-language export (llava): its `vision_encoder` turns the images into
features, its `token_embedding` the prompt's ids into embeddings, and the features replace the
embeddings of the image tokens (as the model's forward does with masked_scatter) before the
`text_decoder` runs the decode loop over inputs_embeds. Each format's decode-loop runner serves
the text decoder; `VisionLanguage` gives it the embeddings instead of ids."""

from __future__ import annotations

import importlib

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

    def set_images(self, pixel_values) -> None:
        """The images of the next prompt, [images, channels, height, width] in the order their
        image tokens appear (row by row); None for a prompt without images."""
        if pixel_values is None:
            self.image_features = None
            return
        pixels = np.ascontiguousarray(np.asarray(pixel_values, dtype=np.float32))
        features = self.vision({"pixel_values": pixels})["image_features"]
        self.image_features = np.asarray(features).reshape(-1, features.shape[-1])

    def _tokens(self, ids: np.ndarray) -> np.ndarray:
        embeds = np.array(self.embedder({"input_ids": np.ascontiguousarray(ids, dtype=np.int64)})["inputs_embeds"])
        slots = ids == self.image_token_id
        count = int(slots.sum())
        if count:
            have = 0 if self.image_features is None else len(self.image_features)
            if count != have:
                raise GenerationError(f"the prompt has {count} image tokens but the images give {have} features")
            embeds[slots] = self.image_features.astype(embeds.dtype)
        return embeds


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
