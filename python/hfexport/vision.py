"""Images in: files decoded by Pillow and preprocessed as the export's preprocessor_config.json
says, step for step as transformers' image processors do on their Pillow backend (the one they
use without torchvision): convert to RGB (transparency onto white), resize (to height x width, or the shortest edge keeping
the aspect ratio, with the configured Pillow resampling filter), center crop, rescale (in float64,
then float32), normalize with the mean and std. ViT's, CLIP's and SigLIP's processors are such
sequences. The result is `pixel_values` [batch, channels, height, width] float32. Qwen2-VL's processor
resizes each image to its own size (smart_resize) and returns flattened patches with image_grid_thw;
SigLIP 2's resizes each image to the largest patch grid within max_num_patches that keeps its
aspect ratio and returns its patches padded to max_num_patches, with their mask and grid shape."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np


class ImageError(ValueError):
    pass


_DEFAULTS = {"do_resize": True, "resample": 2, "do_center_crop": False, "do_rescale": True,
             "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5],
             "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True}


QWEN2_VL = "Qwen2VLImageProcessor"  # Qwen2-VL's and Qwen2.5-VL's
_CLIP_MEAN, _CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
_QWEN2_VL_DEFAULTS = {**_DEFAULTS, "resample": 3, "image_mean": _CLIP_MEAN, "image_std": _CLIP_STD, "patch_size": 14,
                      "temporal_patch_size": 2, "merge_size": 2}


SIGLIP2 = "Siglip2ImageProcessor"
_SIGLIP2_DEFAULTS = {**_DEFAULTS, "patch_size": 16, "max_num_patches": 256}

GEMMA3 = "Gemma3ImageProcessor"
# What Gemma3Processor passes its image processor on every call, over the stored settings (so
# pan-and-scan runs only when the call asks for it: images_kwargs, `--image-option`).
_GEMMA3_PROCESSOR_SETTINGS = {"do_convert_rgb": True, "do_pan_and_scan": False, "pan_and_scan_min_crop_size": 256,
                              "pan_and_scan_max_num_crops": 4, "pan_and_scan_min_ratio_to_activate": 1.2}

SMOLVLM = "SmolVLMImageProcessor"
_SMOLVLM_DEFAULTS = {**_DEFAULTS, "resample": 1, "size": {"longest_edge": 4 * 364}, "max_image_size": {"longest_edge": 364},
                     "do_image_splitting": True}


def _kind(config: dict[str, Any]) -> str:
    return config.get("image_processor_type", "").removesuffix("Fast").removesuffix("Pil")


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


def processor_config(directory: str | Path, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The image processor's settings as the model's processor calls it: the stored ones over the
    class's defaults, what the processor passes on every call, then the call's `options`
    (transformers' images_kwargs: e.g. {"do_pan_and_scan": True})."""
    path, stored = _stored_settings(Path(directory))
    config = {**_DEFAULTS, **{k: v for k, v in stored.items() if v is not None}}
    known = ("ViTImageProcessor", "CLIPImageProcessor", "SiglipImageProcessor", "BitImageProcessor",
             GEMMA3, QWEN2_VL, SMOLVLM, SIGLIP2)
    kind = config.get("image_processor_type", "")
    if _kind(config) not in known:
        raise ImageError(f"{path}: image_processor_type {kind!r} is not supported (supported: {', '.join(known)})")
    defaults = {QWEN2_VL: _QWEN2_VL_DEFAULTS, SMOLVLM: _SMOLVLM_DEFAULTS, SIGLIP2: _SIGLIP2_DEFAULTS}.get(_kind(config))
    if defaults:  # its class's defaults for the keys a config omits
        config = {**defaults, **{k: v for k, v in stored.items() if v is not None}}
    if _kind(config) == GEMMA3:
        config.update(_GEMMA3_PROCESSOR_SETTINGS)
    unknown = sorted(set(options or {}) - set(config))
    if unknown:
        raise ImageError(f"image option {unknown[0]!r} is not a setting of {kind} (settings: {', '.join(sorted(config))})")
    config.update(options or {})
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


def _native_resize_matches_pillow() -> bool:
    """hfexport's C++ resize follows Pillow 13.0's rules (its pass order changed between versions);
    with another Pillow, Pillow's own resize keeps the pixels the model's processor computes."""
    import PIL

    return PIL.__version__.split(".")[:2] == ["13", "0"]


def resize(image, width: int, height: int, resample: int):
    """image.resize((width, height), resample) for a Pillow image: computed by hfexport's C++ core
    (hfexport._core.resize_image, byte for byte Pillow 13.0's) for 8-bit L and RGB images and the
    filters it implements (Pillow's numbers 1 to 5), by Pillow otherwise."""
    from PIL import Image

    if (image.mode in ("L", "RGB") and 1 <= resample <= 5 and image.size != (width, height)
            and _native_resize_matches_pillow()):
        from hfexport import _core

        pixels = np.asarray(image)
        out = _core.resize_image(pixels[:, :, None] if pixels.ndim == 2 else pixels, height, width, resample)
        return Image.fromarray(out[:, :, 0] if image.mode == "L" else out, image.mode)
    return image.resize((width, height), resample=Image.Resampling(resample))


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
    if config["do_convert_rgb"]:
        image = _rgb(image)
    if config["do_resize"]:
        size = config.get("size") or {"height": 224, "width": 224}
        size = {"shortest_edge": int(size)} if isinstance(size, int) else size
        height, width = _resized_size(image.height, image.width, size)
        image = resize(image, width, height, int(config["resample"]))
    pixels = np.array(image)
    pixels = pixels[None] if pixels.ndim == 2 else np.moveaxis(pixels, -1, 0)
    if config["do_center_crop"]:
        crop = _square(config.get("crop_size") or 224)
        top, left = (pixels.shape[1] - crop["height"]) // 2, (pixels.shape[2] - crop["width"]) // 2
        if top < 0 or left < 0:
            raise ImageError(f"an image of {pixels.shape[1]}x{pixels.shape[2]} is smaller than the crop {crop}")
        pixels = pixels[:, top:top + crop["height"], left:left + crop["width"]]
    return _rescaled_normalized(pixels, config)


def _rescaled_normalized(pixels: np.ndarray, config: dict[str, Any]) -> np.ndarray:
    pixels = (pixels.astype(np.float64) * config["rescale_factor"] if config["do_rescale"] else pixels).astype(np.float32)
    if config["do_normalize"]:
        mean = np.array(config["image_mean"], np.float32).reshape(-1, 1, 1)
        std = np.array(config["image_std"], np.float32).reshape(-1, 1, 1)
        pixels = (pixels - mean) / std
    return pixels


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2-VL's target size: both sides multiples of `factor` (patch x merge), the area within
    [min_pixels, max_pixels], the aspect ratio kept as closely as that allows."""
    if max(height, width) / min(height, width) > 200:
        raise ImageError(f"an image of {height}x{width}: Qwen2-VL's processor takes aspect ratios below 200")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _pixel_bounds(config: dict[str, Any]) -> tuple[int, int]:
    """min_pixels / max_pixels: the 4.x keys, else size's shortest_edge / longest_edge (5.x)."""
    size = config.get("size") if isinstance(config.get("size"), dict) else {}
    low = config.get("min_pixels") or size.get("shortest_edge") or size.get("min_pixels") or 56 * 56
    high = config.get("max_pixels") or size.get("longest_edge") or size.get("max_pixels") or 28 * 28 * 1280
    return int(low), int(high)


def _resized_pixels(image, config: dict[str, Any], target_size) -> np.ndarray:
    """One Pillow image -> [channels, height, width] float32: RGB as configured, resized to
    target_size(height, width) when do_resize, rescaled and normalized (no crop)."""
    if config["do_convert_rgb"]:
        image = _rgb(image)
    if config["do_resize"]:
        height, width = target_size(image.height, image.width)
        image = resize(image, width, height, int(config["resample"]))
    pixels = np.array(image)
    return _rescaled_normalized(pixels[None] if pixels.ndim == 2 else np.moveaxis(pixels, -1, 0), config)


def qwen2_vl_patches(image, config: dict[str, Any]) -> tuple[np.ndarray, list[int]]:
    """One Pillow image -> its flattened patches [grid_h * grid_w, channels * temporal * patch^2]
    (each merge x merge block of patches consecutive, the frame repeated over the temporal patch)
    and its grid [1, grid_h, grid_w], as Qwen2VLImageProcessor makes them."""
    patch, merge, temporal = int(config["patch_size"]), int(config["merge_size"]), int(config["temporal_patch_size"])
    pixels = _resized_pixels(image, config, lambda h, w: smart_resize(h, w, patch * merge, *_pixel_bounds(config)))
    channels, height, width = pixels.shape
    grid_h, grid_w = height // patch, width // patch
    if height % (patch * merge) or width % (patch * merge):
        raise ImageError(f"an image of {height}x{width} does not divide into {patch * merge}-pixel blocks (do_resize is off)")
    blocks = pixels.reshape(channels, grid_h // merge, merge, patch, grid_w // merge, merge, patch)
    blocks = blocks.transpose(1, 4, 2, 5, 0, 3, 6)[:, :, :, :, :, None]
    blocks = np.broadcast_to(blocks, (*blocks.shape[:5], temporal, patch, patch))
    return np.ascontiguousarray(blocks.reshape(grid_h * grid_w, -1), dtype=np.float32), [1, grid_h, grid_w]


def _scaled_side(side: int, scale: float, patch: int) -> int:
    return max(patch, math.ceil(side * scale / patch) * patch)


def size_for_max_patches(height: int, width: int, patch: int, max_patches: int, eps: float = 1e-5) -> tuple[int, int]:
    """SigLIP 2's target size: both sides multiples of the patch, scaled by one factor (bisected to
    eps, as its processor does) to the most patches within max_patches, at least one patch a side."""
    low, high = eps / 10, 100.0
    while high - low >= eps:
        scale = (low + high) / 2
        rows, cols = _scaled_side(height, scale, patch) / patch, _scaled_side(width, scale, patch) / patch
        low, high = (scale, high) if rows * cols <= max_patches else (low, scale)
    return _scaled_side(height, low, patch), _scaled_side(width, low, patch)


def siglip2_patches(image, config: dict[str, Any]) -> tuple[np.ndarray, list[int]]:
    """One Pillow image -> its patches [rows * cols, patch * patch * channels] (each patch's pixels
    row by row, channels last) and its grid [rows, cols], as Siglip2ImageProcessor makes them."""
    patch = int(config["patch_size"])
    pixels = _resized_pixels(image, config,
                             lambda h, w: size_for_max_patches(h, w, patch, int(config["max_num_patches"])))
    channels, rows, cols = pixels.shape[0], pixels.shape[1] // patch, pixels.shape[2] // patch
    grid = pixels[:, : rows * patch, : cols * patch].reshape(channels, rows, patch, cols, patch)
    return np.ascontiguousarray(grid.transpose(1, 3, 2, 4, 0).reshape(rows * cols, -1)), [rows, cols]


def siglip2_inputs(images: Sequence, config: dict[str, Any]) -> dict[str, np.ndarray]:
    """The processor's batch: pixel_values [images, max_num_patches, patch * patch * channels],
    pixel_attention_mask [images, max_num_patches] (int32, 0 on the padding) and spatial_shapes."""
    limit = int(config["max_num_patches"])
    patches, grids = zip(*(siglip2_patches(image, config) for image in images))
    values = np.zeros((len(patches), limit, patches[0].shape[1]), np.float32)
    mask = np.zeros((len(patches), limit), np.int32)
    for row, p in enumerate(patches):
        if len(p) > limit:
            raise ImageError(f"an image of {grids[row]} patches exceeds max_num_patches {limit} (do_resize is off)")
        values[row, : len(p)], mask[row, : len(p)] = p, 1
    return {"pixel_values": values, "pixel_attention_mask": mask, "spatial_shapes": np.array(grids, np.int64)}


def _longest_edge_size(height: int, width: int, longest: int) -> tuple[int, int]:
    """SmolVLM's resize: the longest side to `longest`, the other in proportion (truncated, then
    made even), at most 4096 a side."""
    ratio = width / height
    if width >= height:
        width, height = longest, int(longest / ratio)
        height += height % 2
    else:
        height, width = longest, int(longest * ratio)
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    if max(height, width) > 4096:
        height, width = _longest_edge_size(height, width, 4096)
    return height, width


def smolvlm_tiles(image, config: dict[str, Any]) -> tuple[list[np.ndarray], int, int]:
    """One Pillow image -> SmolVLMImageProcessor's frames [channels, tile, tile] float32: the image
    resized (longest edge), then to whole tiles, cut into rows x cols tiles, and the whole image
    at one tile's size last (or the image alone when it is one tile); with its rows and cols."""
    if not config["do_image_splitting"]:
        raise ImageError("SmolVLM's processor without do_image_splitting is not supported yet")
    if config["do_convert_rgb"]:
        image = _rgb(image)
    resample = int(config["resample"])
    tile = int(config["max_image_size"]["longest_edge"])
    if config["do_resize"]:
        height, width = _longest_edge_size(image.height, image.width, int(config["size"]["longest_edge"]))
        image = resize(image, width, height, resample)
    height, width, ratio = image.height, image.width, image.width / image.height
    if width >= height:  # whole tiles, as resize_for_vision_encoder
        width = math.ceil(width / tile) * tile
        height = math.ceil(int(width / ratio) / tile) * tile
    else:
        height = math.ceil(height / tile) * tile
        width = math.ceil(int(height * ratio) / tile) * tile
    image = resize(image, width, height, resample)
    frames, rows, cols = [image], 0, 0
    if height > tile or width > tile:
        rows, cols = (height - tile) // tile + 1, (width - tile) // tile + 1
        frames = [image.crop((c * tile, r * tile, (c + 1) * tile, (r + 1) * tile)) for r in range(rows) for c in range(cols)]
        frames.append(resize(image, tile, tile, resample))
    return [_rescaled_normalized(np.moveaxis(np.array(f), -1, 0), config) for f in frames], rows, cols


def pan_and_scan_crops(image, config: dict[str, Any]) -> list:
    """Gemma3ImageProcessor's pan-and-scan: an image whose long side is at least
    pan_and_scan_min_ratio_to_activate times its short one is cut along the long side into 2 to
    pan_and_scan_max_num_crops crops of about its aspect ratio (each side at least
    pan_and_scan_min_crop_size, else none), row by row; the last crop is cut short at the edge."""
    width, height = image.width, image.height
    smallest, most = int(config["pan_and_scan_min_crop_size"]), int(config["pan_and_scan_max_num_crops"])
    ratio = float(config["pan_and_scan_min_ratio_to_activate"])
    long, short = max(width, height), min(width, height)
    if long / short < ratio:
        return []
    count = min(int(math.floor(long / short + 0.5)), int(math.floor(long / smallest)))  # half rounds up
    count = min(most, max(2, count))
    cols, rows = (count, 1) if width >= height else (1, count)
    crop_w, crop_h = math.ceil(width / cols), math.ceil(height / rows)
    if min(crop_w, crop_h) < smallest:
        return []
    return [image.crop((c * crop_w, r * crop_h, min((c + 1) * crop_w, width), min((r + 1) * crop_h, height)))
            for r in range(rows) for c in range(cols)]


def gemma3_inputs(images: Sequence, config: dict[str, Any]) -> dict[str, Any]:
    """Gemma3ImageProcessor with do_pan_and_scan: each image, then its crops, each preprocessed to
    the tower's size (pixel_values of every view in that order), with each image's num_crops."""
    views = []
    for image in images:
        image = _rgb(image) if config["do_convert_rgb"] else image
        views.append([image, *pan_and_scan_crops(image, config)])
    return {"pixel_values": np.stack([preprocess(v, config) for image_views in views for v in image_views]),
            "num_crops": [len(image_views) - 1 for image_views in views]}


def image_inputs(directory: str | Path, images: Sequence, options: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """What the model's processor gives the vision encoder for image files (or Pillow images):
    pixel_values [batch, channels, height, width]; Qwen2-VL's flattened patches and image_grid_thw;
    SmolVLM's tiles of every image in order, with each image's rows and cols; Gemma 3's pan-and-scan
    views (each image and its crops), with each image's num_crops. `options` are the call's
    settings over the stored ones (processor_config)."""
    config = processor_config(directory, options)
    opened = [open_image(i) if isinstance(i, (str, Path)) else i for i in images]
    if _kind(config) == SMOLVLM:
        split = [smolvlm_tiles(image, config) for image in opened]
        return {"pixel_values": np.stack([f for frames, _, _ in split for f in frames]),
                "rows": [r for _, r, _ in split], "cols": [c for _, _, c in split]}
    if _kind(config) == SIGLIP2:
        return siglip2_inputs(opened, config)
    if _kind(config) == GEMMA3 and config["do_pan_and_scan"]:
        return gemma3_inputs(opened, config)
    if _kind(config) != QWEN2_VL:
        return {"pixel_values": pixel_values(directory, opened)}
    patches, grids = zip(*(qwen2_vl_patches(image, config) for image in opened))
    return {"pixel_values": np.concatenate(patches), "image_grid_thw": np.array(grids, np.int64)}


def pixel_values(directory: str | Path, images: Sequence) -> np.ndarray:
    """pixel_values [batch, channels, height, width] for image files (or Pillow images)."""
    config = processor_config(directory)
    if _kind(config) in (QWEN2_VL, SIGLIP2):
        raise ImageError(f"{_kind(config)} makes flattened patches with their grids (hfexport.vision.image_inputs)")
    opened = [open_image(i) if isinstance(i, (str, Path)) else i for i in images]
    batch = [preprocess(image, config) for image in opened]
    if len({b.shape for b in batch}) > 1:
        raise ImageError(f"the images preprocess to different sizes {sorted({b.shape for b in batch})}: "
                         "the processor config keeps aspect ratios without a crop")
    return np.stack(batch)
