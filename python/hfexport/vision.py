"""Images in: files decoded by Pillow and preprocessed as the export's preprocessor_config.json
says, step for step as transformers' image processors do on their Pillow backend (the one they
use without torchvision): convert to RGB (transparency onto white), resize (to height x width, or the shortest edge keeping
the aspect ratio, with the configured Pillow resampling filter), center crop, rescale (in float64,
then float32), normalize with the mean and std. ViT's, CLIP's and SigLIP's processors are such
sequences. The result is `pixel_values` [batch, channels, height, width] float32."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np


class ImageError(ValueError):
    pass


_DEFAULTS = {"do_resize": True, "resample": 2, "do_center_crop": False, "do_rescale": True,
             "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5],
             "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True}


def _stored_settings(directory: Path) -> tuple[Path, dict[str, Any]]:
    """The image processor's settings: preprocessor_config.json, or the `image_processor` entry of a
    multimodal processor's processor_config.json (as transformers 5 saves LlavaProcessor)."""
    path = directory / "preprocessor_config.json"
    if path.is_file():
        return path, json.loads(path.read_text())
    path = directory / "processor_config.json"
    if path.is_file() and isinstance(json.loads(path.read_text()).get("image_processor"), dict):
        return path, json.loads(path.read_text())["image_processor"]
    raise ImageError(f"{directory}: no preprocessor_config.json (export a checkpoint that has its image processor's)")


def processor_config(directory: str | Path) -> dict[str, Any]:
    path, stored = _stored_settings(Path(directory))
    config = {**_DEFAULTS, **{k: v for k, v in stored.items() if v is not None}}
    known = ("ViTImageProcessor", "CLIPImageProcessor", "SiglipImageProcessor", "BitImageProcessor",
             "Gemma3ImageProcessor")
    kind = config.get("image_processor_type", "")
    if kind.removesuffix("Fast").removesuffix("Pil") not in known:
        raise ImageError(f"{path}: image_processor_type {kind!r} is not supported (supported: {', '.join(known)})")
    if config.get("do_pan_and_scan"):
        raise ImageError(f"{path}: do_pan_and_scan (Gemma 3's crops) is not supported yet")
    return config


def open_image(path: str | Path):
    try:
        from PIL import Image
    except ImportError:
        raise ImageError("images need the Pillow package (pip install hfexport[image])") from None
    path = Path(path)
    if not path.is_file():
        raise ImageError(f"{path}: no such file")
    try:
        image = Image.open(path)
        image.load()
    except OSError as e:
        raise ImageError(f"{path}: cannot read the image ({e})") from None
    return image


def _resized_size(height: int, width: int, size: dict[str, int]) -> tuple[int, int]:
    if "shortest_edge" in size:  # the short side to it, the long side in proportion (truncated)
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = size["shortest_edge"], int(size["shortest_edge"] * long / short)
        return (new_long, new_short) if width <= height else (new_short, new_long)
    if "height" in size and "width" in size:
        return size["height"], size["width"]
    raise ImageError(f"preprocessor_config.json: size {size} is not supported (height and width, or shortest_edge)")


def _square(value) -> dict[str, int]:
    return value if isinstance(value, dict) else {"height": int(value), "width": int(value)}


def _rgb(image):
    """RGB, any transparency composited onto white (as transformers' convert_to_rgb does)."""
    from PIL import Image

    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    return image.convert("RGB")


def preprocess(image, config: dict[str, Any]) -> np.ndarray:
    """One Pillow image -> [channels, height, width] float32."""
    from PIL import Image

    if config["do_convert_rgb"]:
        image = _rgb(image)
    if config["do_resize"]:
        size = config.get("size") or {"height": 224, "width": 224}
        size = {"shortest_edge": int(size)} if isinstance(size, int) else size
        height, width = _resized_size(image.height, image.width, size)
        image = image.resize((width, height), resample=Image.Resampling(int(config["resample"])))
    pixels = np.array(image)
    pixels = pixels[None] if pixels.ndim == 2 else np.moveaxis(pixels, -1, 0)
    if config["do_center_crop"]:
        crop = _square(config.get("crop_size") or 224)
        top, left = (pixels.shape[1] - crop["height"]) // 2, (pixels.shape[2] - crop["width"]) // 2
        if top < 0 or left < 0:
            raise ImageError(f"an image of {pixels.shape[1]}x{pixels.shape[2]} is smaller than the crop {crop}")
        pixels = pixels[:, top:top + crop["height"], left:left + crop["width"]]
    pixels = (pixels.astype(np.float64) * config["rescale_factor"] if config["do_rescale"] else pixels).astype(np.float32)
    if config["do_normalize"]:
        mean = np.array(config["image_mean"], np.float32).reshape(-1, 1, 1)
        std = np.array(config["image_std"], np.float32).reshape(-1, 1, 1)
        pixels = (pixels - mean) / std
    return pixels


def pixel_values(directory: str | Path, images: Sequence) -> np.ndarray:
    """pixel_values [batch, channels, height, width] for image files (or Pillow images)."""
    config = processor_config(directory)
    opened = [open_image(i) if isinstance(i, (str, Path)) else i for i in images]
    batch = [preprocess(image, config) for image in opened]
    if len({b.shape for b in batch}) > 1:
        raise ImageError(f"the images preprocess to different sizes {sorted({b.shape for b in batch})}: "
                         "the processor config keeps aspect ratios without a crop")
    return np.stack(batch)
