"""Generation with a vision-language export (llava, gemma3, qwen2_vl, qwen3_vl): its `vision_encoder` turns the images into
features, its `token_embedding` the prompt's ids into embeddings, and the features replace the
embeddings of the image tokens (as the model's forward does with masked_scatter) before the
`text_decoder` runs the decode loop over inputs_embeds. Each format's decode-loop runner serves
the text decoder; `VisionLanguage` gives it the embeddings instead of ids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from .forward import open_graph
from .formats import declared, runner_class
from .manifest import (TEXT_DECODER, TOKEN_EMBEDDING, VISION_EMBEDDINGS, VISION_EMBEDDINGS_MERGER,
                       VISION_EMBEDDINGS_POS, VISION_ENCODER, ExportManifest)
from .runner import DecodeRunner, GenerationError

IMAGE_TOKENS = "image_tokens"  # export.json: image_token_id, features_per_image


class VisionLanguage:
    """Mixed into a format's decode-loop runner (before it in the bases)."""

    STEP = TEXT_DECODER
    TOKENS = "inputs_embeds"

    def __init__(self, manifest: ExportManifest, **options):
        super().__init__(manifest, **options)
        self.embedder = _component_graph(manifest, TOKEN_EMBEDDING, options)
        self.vision = open_vision_encoder(manifest, **options)
        spec = manifest.data.get(IMAGE_TOKENS) or {}
        self.image_token_id = int(spec.get("image_token_id", -1))
        self.image_features: np.ndarray | None = None
        decoder_inputs = {i["name"]: i for i in manifest.component(TEXT_DECODER)["inputs"]}
        self.takes_token_types = "token_type_ids" in decoder_inputs
        # Qwen3-VL's deepstack: the vision encoder's deepstack_features [layers, features, hidden] go
        # to the text decoder with the image tokens' mask (zero features in a call without images).
        self.deepstack_layers = int(decoder_inputs["deepstack_visual_embeds"]["shape"][0]) \
            if "deepstack_visual_embeds" in decoder_inputs else 0
        self.deepstack_features: np.ndarray | None = None
        self.hidden_size = int(decoder_inputs["inputs_embeds"]["shape"][-1])
        embedder_inputs = {i["name"]: i for i in manifest.component(TOKEN_EMBEDDING)["inputs"]}
        self.merges_features = "image_features" in embedder_inputs
        # the features' dtype (the export's); numpy has no bfloat16: such an export is fed float32
        self.feature_dtype = np.dtype({"float16": np.float16}.get(
            embedder_inputs.get("image_features", {}).get("dtype"), np.float32))
        # Qwen2-VL's multimodal RoPE: position_ids [3, batch, query] from the images' grids.
        self.rope_index = spec.get("rope_index")
        self.merge_size = int(spec.get("spatial_merge_size", 1))
        self.image_grids: np.ndarray | None = None
        self.rope_deltas: np.ndarray | None = None  # per row, from the prompt: step positions' offset
        self.in_prompt = False

    def set_images(self, pixel_values, image_grid_thw=None, pixel_attention_mask=None) -> None:
        """The images of the next prompt, in the order their image tokens appear (row by row):
        pixel_values as the model's processor returns them ([images, channels, height, width]; Qwen2-VL's
        flattened patches [patches, patch size] with image_grid_thw [images, 3]; SmolVLM's 5-D tiles
        with their padding images and pixel_attention_mask); None for a prompt without images."""
        self.image_grids = None if image_grid_thw is None else np.asarray(image_grid_thw, np.int64).reshape(-1, 3)
        if pixel_values is None:
            self.image_features = self.deepstack_features = None
            return
        pixels = np.ascontiguousarray(real_images(np.asarray(pixel_values, dtype=np.float32), pixel_attention_mask))
        feeds = {"pixel_values": pixels}
        if self.rope_index is not None:
            if self.image_grids is None:
                raise GenerationError("this export's vision encoder takes image_grid_thw with pixel_values "
                                      "(what its processor returns)")
            feeds["image_grid_thw"] = np.ascontiguousarray(self.image_grids)
        outputs = self.vision(feeds)
        features = outputs["image_features"]
        self.image_features = np.asarray(features).reshape(-1, features.shape[-1])
        if self.deepstack_layers:
            self.deepstack_features = np.asarray(outputs["deepstack_features"], dtype=self.feature_dtype)

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray, max_new_tokens: int) -> np.ndarray:
        self.rope_deltas = None  # this prompt sets them
        self.in_prompt = True  # only the prompt's image tokens take the features (a step's are plain tokens)
        try:
            return super().prefill(input_ids, attention_mask, max_new_tokens)
        finally:
            self.in_prompt = False

    def _token_inputs(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        inputs = {"inputs_embeds": self._embeddings(ids)}
        if self.takes_token_types:  # 1 marks the image tokens (Gemma 3's image attention)
            inputs["token_type_ids"] = (ids == self.image_token_id).astype(np.int64)
        if self.deepstack_layers:
            with_images = self.in_prompt and self.deepstack_features is not None
            marked = (ids == self.image_token_id) & with_images
            features = self.deepstack_features if with_images else \
                np.zeros((self.deepstack_layers, 0, self.hidden_size), self.feature_dtype)
            inputs["visual_pos_masks"] = np.ascontiguousarray(marked)
            inputs["deepstack_visual_embeds"] = np.ascontiguousarray(features)
        return inputs

    def _position_ids(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        if self.rope_index is None:
            return positions
        if self.rope_deltas is None:  # the prompt: its images' grid positions
            rows, self.rope_deltas = qwen2_vl_rope_index(ids, positions, self.image_grids,
                                                         self.image_token_id, self.merge_size)
            return rows
        return np.ascontiguousarray(np.broadcast_to((positions + self.rope_deltas[:, None])[None], (3, *positions.shape)))

    def _embeddings(self, ids: np.ndarray) -> np.ndarray:
        slots = ids == self.image_token_id
        count = int(slots.sum()) if self.in_prompt else 0
        have = 0 if self.image_features is None else len(self.image_features)
        if count and count != have:
            raise GenerationError(f"the prompt has {count} image tokens but the images give {have} features")
        feeds = {"input_ids": np.ascontiguousarray(ids, dtype=np.int64)}
        if self.merges_features:  # the graph puts them at the image tokens (a step's get none)
            features = self.image_features if count else np.zeros((0, self.hidden_size))
            feeds["image_features"] = np.ascontiguousarray(features, dtype=self.feature_dtype)
        embeds = np.array(self.embedder(feeds)["inputs_embeds"])
        if count and not self.merges_features:
            embeds[slots] = self.image_features.astype(embeds.dtype)
        return embeds


def open_vision_encoder(manifest: ExportManifest, **options) -> Callable[[dict], dict]:
    """The export's vision encoder as one call (inputs as its processor gives them -> image_features and,
    for Qwen3-VL, deepstack_features), whether it is one graph or OpenVINO GenAI's split."""
    if manifest.has_component(VISION_EMBEDDINGS_MERGER):
        return OpenVinoGenaiTower(manifest, **options)
    return _component_graph(manifest, VISION_ENCODER, options)


class OpenVinoGenaiTower:
    """A Qwen-VL tower exported as OpenVINO GenAI's VLMPipeline splits it, run with what the pipeline
    computes on the host: vision_embeddings (the patch embedding), Qwen3-VL's vision_embeddings_pos
    (the learned grid's rows at four cells per patch, weighted and summed here, then added in the
    patches' merge-block order), and vision_embeddings_merger over the block-diagonal attention
    mask (0 or -inf), the 2-D RoPE angles and, for Qwen2.5-VL, the window order and window mask."""

    def __init__(self, manifest: ExportManifest, **options):
        self.embeddings = _component_graph(manifest, VISION_EMBEDDINGS, options)
        self.merger = _component_graph(manifest, VISION_EMBEDDINGS_MERGER, options)
        has_pos = manifest.has_component(VISION_EMBEDDINGS_POS)
        self.positions = _component_graph(manifest, VISION_EMBEDDINGS_POS, options) if has_pos else None
        inputs = {i["name"]: i for i in manifest.component(VISION_EMBEDDINGS_MERGER)["inputs"]}
        self.rotary_dim = int(inputs["rotary_pos_emb"]["shape"][-1])
        self.windows = "window_index" in inputs
        config = json.loads((manifest.directory / "config.json").read_text())
        vision = config.get("vision_config") or {}
        self.merge = int(manifest.data[IMAGE_TOKENS].get("spatial_merge_size", 2))
        self.theta = float((vision.get("rope_parameters") or {}).get("rope_theta", 10000.0))
        self.side = int(round(float(vision.get("num_position_embeddings", 2304)) ** 0.5))
        self.window = int(vision.get("window_size", 112)) // self.merge // int(vision.get("patch_size", 14))

    def __call__(self, feeds: dict) -> dict:
        grids = [tuple(int(v) for v in g) for g in np.asarray(feeds["image_grid_thw"]).reshape(-1, 3)]
        hidden = np.array(self.embeddings({"hidden_states": feeds["pixel_values"]})["last_hidden_state"], np.float32)
        if self.positions is not None:
            hidden += self._learned_positions(grids)
        frames = [h * w for t, h, w in grids for _ in range(t)]  # attention stays within a frame
        inputs = {"hidden_states": hidden, "attention_mask": _block_mask(frames), "rotary_pos_emb": self._rotary(grids)}
        if self.windows:
            inputs["window_index"], inputs["window_attention_mask"] = self._window_order(grids)
        out = self.merger(inputs)
        result = {"image_features": out["last_hidden_state"]}
        if "deepstack_feature_lists" in out:
            result["deepstack_features"] = out["deepstack_feature_lists"]
        return result

    def _block_order(self, h: int, w: int) -> np.ndarray:
        """The raster index (row * w + column) of each patch of a frame, in the processor's
        merge-block order (block row, block column, row in block, column in block)."""
        m = self.merge
        return np.arange(h * w).reshape(h // m, m, w // m, m).transpose(0, 2, 1, 3).ravel()

    def _rotary(self, grids) -> np.ndarray:
        inv_freq = 1.0 / self.theta ** (np.arange(0, self.rotary_dim, 2, dtype=np.float32) / self.rotary_dim)
        parts = []
        for t, h, w in grids:
            rows, cols = np.divmod(np.tile(self._block_order(h, w), t), w)
            parts.append(np.concatenate([np.outer(rows, inv_freq), np.outer(cols, inv_freq)], axis=1))
        return np.ascontiguousarray(np.concatenate(parts).astype(np.float32))

    def _learned_positions(self, grids) -> np.ndarray:
        """transformers' bilinear (align_corners) resampling of the square grid to each image's grid,
        in the patches' merge-block order."""
        g, parts = self.side, []
        for t, h, w in grids:
            def taps(n):
                src = np.arange(n, dtype=np.float32) * np.float32(g - 1) / np.float32(max(n - 1, 1))
                low = np.floor(src).astype(np.int64)
                return low, np.minimum(low + 1, g - 1), src - low.astype(np.float32)
            hl, hh, dh = (a[:, None] for a in taps(h))
            wl, wh, dw = (a[None, :] for a in taps(w))
            cells = np.stack([hl * g + wl, hl * g + wh, hh * g + wl, hh * g + wh]).reshape(4, -1)
            weights = np.stack([(1 - dh) * (1 - dw), (1 - dh) * dw, dh * (1 - dw), dh * dw]).reshape(4, -1)
            rows = np.asarray(self.positions({"input": np.ascontiguousarray(cells)})["last_hidden_state"], np.float32)
            raster = (rows * weights[..., None].astype(np.float32)).sum(0)
            parts.append(np.tile(raster[self._block_order(h, w)], (t, 1)))
        return np.concatenate(parts)

    def _window_order(self, grids) -> tuple[np.ndarray, np.ndarray]:
        """Qwen2.5-VL's window order of the merged patches (windows of `window` merged patches a
        side, row-major per frame) and the window mask over the patches in that order."""
        index, sizes, offset, m2 = [], [], 0, self.merge * self.merge
        for t, h, w in grids:
            gh, gw, win = h // self.merge, w // self.merge, self.window
            cells = np.arange(t * gh * gw).reshape(t, gh, gw)
            for frame in cells:
                for r in range(0, gh, win):
                    for c in range(0, gw, win):
                        chunk = frame[r:r + win, c:c + win].ravel()
                        index.append(chunk + offset)
                        sizes.append(len(chunk) * m2)
            offset += t * gh * gw
        return np.concatenate(index).astype(np.int64), _block_mask(sizes)


def _block_mask(blocks: list[int]) -> np.ndarray:
    """[1, n, n] float32: 0 within each consecutive block of rows, -inf elsewhere."""
    total = sum(blocks)
    mask = np.full((1, total, total), -np.inf, np.float32)
    start = 0
    for size in blocks:
        mask[0, start:start + size, start:start + size] = 0.0
        start += size
    return mask


def real_images(pixel_values: np.ndarray, pixel_attention_mask=None) -> np.ndarray:
    """A processor's 5-D pixel_values [batch, images, channels, height, width] (SmolVLM's tiles,
    padded with all-zero images where rows have fewer) as the vision encoder's [images, ...]: the
    real images in order, as get_image_features keeps them. Others pass through."""
    pixels = np.asarray(pixel_values)
    if pixels.ndim != 5:
        return pixels
    flat = pixels.reshape(-1, *pixels.shape[2:])
    real = (flat != 0).any(axis=(1, 2, 3))
    real[0] |= not real.any()
    if pixel_attention_mask is not None:
        mask = np.asarray(pixel_attention_mask).reshape(len(flat), -1)
        if not mask[real].all():
            raise ValueError("pixel_attention_mask marks padding inside an image: only whole images (the processor's "
                             "tiles at the tower's size) are supported")
    return flat[real]


def qwen2_vl_rope_index(ids: np.ndarray, positions: np.ndarray, grids: np.ndarray | None, image_token_id: int,
                        merge: int) -> tuple[np.ndarray, np.ndarray]:
    """Qwen2-VL's get_rope_index for a left-padded prompt (`positions`: its text positions, so a
    row's real tokens are its last positions[:, -1] + 1): text tokens count on in all three rows;
    an image's tokens take (start, start + row, start + column) over its merged grid, and the text
    after it goes on from start + max(rows, columns). Returns [3, batch, seq] and each row's offset
    of later positions (max + 1 - real length); padding gets position 0."""
    batch, length = ids.shape
    out = np.zeros((3, batch, length), np.int64)
    deltas = np.zeros(batch, np.int64)
    grid_list = [] if grids is None else [tuple(int(v) for v in g) for g in grids]
    next_grid = 0
    for b in range(batch):
        real = int(positions[b, -1]) + 1
        row = ids[b, length - real:]
        parts, current, i = [], 0, 0
        while i < real:
            if row[i] == image_token_id:
                if next_grid >= len(grid_list):
                    raise GenerationError("the prompt has more images (runs of image tokens) than image_grid_thw rows")
                t, h, w = grid_list[next_grid]
                next_grid += 1
                tt, hh, ww = np.meshgrid(np.arange(t), np.arange(h // merge), np.arange(w // merge), indexing="ij")
                parts.append(np.stack([tt.ravel(), hh.ravel(), ww.ravel()]) + current)
                current += max(h, w) // merge
                i += tt.size
            else:
                end = i
                while end < real and row[end] != image_token_id:
                    end += 1
                parts.append(np.broadcast_to(np.arange(end - i) + current, (3, end - i)))
                current += end - i
                i = end
        rows = np.concatenate(parts, axis=1)
        out[:, b, length - real:] = rows
        deltas[b] = rows.max() + 1 - real
    return out, deltas


class ImagePrompt(NamedTuple):
    """How a model's processor writes images into a prompt: the placeholder the text carries per
    image, what is put before a prompt that lacks one, and the text image i of n features becomes."""

    placeholder: str
    missing: str
    expand: Callable[[int, int], str]


def _llava_prompt(directory: Path, codec, spec: dict, images: dict) -> ImagePrompt:
    """LlavaProcessor: each image token of the text becomes one per feature."""
    path = directory / "processor_config.json"
    settings = json.loads(path.read_text()) if path.is_file() else {}
    token = settings.get("image_token") or codec.token(int(spec["image_token_id"]))
    return ImagePrompt(token, token, lambda i, n: token * n)


def _gemma3_prompt(directory: Path, codec, spec: dict, images: dict) -> ImagePrompt:
    """Gemma3Processor: each <start_of_image> becomes "\n\n<start_of_image>", the image tokens,
    "<end_of_image>\n\n"; an image with pan-and-scan crops, that for the image and for each crop in
    the processor's sentence."""
    config = json.loads((directory / "config.json").read_text())
    boi, eoi = codec.token(int(config.get("boi_token_index", 255999))), codec.token(int(config.get("eoi_token_index", 256000)))
    full = f"\n\n{boi}{codec.token(int(spec['image_token_id'])) * int(spec['features_per_image'])}{eoi}\n\n"
    crops = images.get("num_crops") or []

    def expand(i: int, n: int) -> str:  # with pan-and-scan crops: the image, then its crops
        if not crops or not crops[i]:
            return full
        return (f"Here is the original image {full} and here are some crops to help you see better "
                + " ".join([full] * crops[i]))
    return ImagePrompt(boi, boi, expand)


def _qwen2_vl_prompt(directory: Path, codec, spec: dict, images: dict) -> ImagePrompt:
    """Qwen2VLProcessor: each <|image_pad|> becomes one per merged patch of its image; the chat
    template puts <|vision_start|><|image_pad|><|vision_end|> where an image goes."""
    config = json.loads((directory / "config.json").read_text())
    start = int(spec.get("vision_start_token_id", 151652))
    pad = codec.token(int(spec["image_token_id"]))
    missing = codec.token(start) + pad + codec.token(int(config.get("vision_end_token_id", start + 1)))
    return ImagePrompt(pad, missing, lambda i, n: pad * n)


def _smolvlm_prompt(directory: Path, codec, spec: dict, images: dict) -> ImagePrompt:
    """SmolVLMProcessor: each <image> becomes, per tile, <fake_token_around_image><row_r_col_c> and
    the tile's image tokens (a newline after each row), then "\n<fake_token_around_image><global-img>",
    the whole image's tokens and <fake_token_around_image>; an image not split, just the last part."""
    image = codec.token(int(spec["image_token_id"]))
    fake, glob = "<fake_token_around_image>", "<global-img>"
    per_tile = int(spec["features_per_image"])
    rows, cols = images.get("rows", []), images.get("cols", [])

    def expand(i: int, n: int) -> str:
        tiles = ""
        for r in range(rows[i]):
            tiles += "".join(f"{fake}<row_{r + 1}_col_{c + 1}>{image * per_tile}" for c in range(cols[i])) + "\n"
        return (tiles + "\n" if tiles else "") + f"{fake}{glob}{image * per_tile}{fake}"
    return ImagePrompt(image, image, expand)


# model_type -> (directory, codec, export.json's image_tokens, the images' inputs) -> its processor's ImagePrompt.
IMAGE_PROMPTS = {"llava": _llava_prompt, "gemma3": _gemma3_prompt, "qwen2_vl": _qwen2_vl_prompt,
                 "qwen2_5_vl": _qwen2_vl_prompt, "qwen3_vl": _qwen2_vl_prompt, "qwen3_vl_moe": _qwen2_vl_prompt, "smolvlm": _smolvlm_prompt}


def features_per_image(manifest: ExportManifest, image_inputs: dict) -> list[int]:
    """How many image tokens each image of the vision encoder's inputs fills (SmolVLM: each image's
    tiles and its global view; Gemma 3: each image and its crops)."""
    spec = manifest.data[IMAGE_TOKENS]
    if "image_grid_thw" in image_inputs:
        merge = int(spec.get("spatial_merge_size", 1))
        return [int(np.prod(grid)) // merge**2 for grid in np.asarray(image_inputs["image_grid_thw"])]
    if "num_crops" in image_inputs:  # Gemma 3's pan-and-scan: an image's tokens, then its crops'
        return [(1 + int(c)) * int(spec["features_per_image"]) for c in image_inputs["num_crops"]]
    if "rows" in image_inputs:
        return [(r * c + 1) * int(spec["features_per_image"]) for r, c in zip(image_inputs["rows"], image_inputs["cols"])]
    return [int(spec["features_per_image"])] * len(image_inputs["pixel_values"])


def encode_image_prompt(manifest: ExportManifest, codec, prompt: str, image_inputs: dict, chat: bool = False,
                        system: str | None = None) -> list[int]:
    """A prompt's ids as the model's processor makes them for the images of `image_inputs` (what
    hfexport.vision.image_inputs returns; {} for none): the prompt (through the chat template with
    chat=True, the images as {"type": "image"} entries), each image's placeholder replaced by its
    expansion. Without chat, placeholders missing from the prompt are put before it."""
    model_type = manifest.data.get("source", {}).get("model_type", "")
    if model_type not in IMAGE_PROMPTS:
        raise GenerationError(f"no prompt format for images of model type '{model_type}' "
                              f"(known: {', '.join(IMAGE_PROMPTS)}); pass the processor's input_ids")
    form = IMAGE_PROMPTS[model_type](manifest.directory, codec, manifest.data[IMAGE_TOKENS], image_inputs)
    features = features_per_image(manifest, image_inputs) if image_inputs else []
    images = len(features)
    if not chat:
        prompt = form.missing * max(images - prompt.count(form.placeholder), 0) + prompt
    text, special_tokens = codec.prompt_text(prompt, chat=chat, system=system, images=images)
    pieces = text.split(form.placeholder)
    if len(pieces) - 1 != images:
        raise GenerationError(f"the prompt has {len(pieces) - 1} image placeholders ({form.placeholder}) "
                              f"for {images} images")
    expanded = pieces[0] + "".join(form.expand(i, n) + piece for i, (n, piece) in enumerate(zip(features, pieces[1:])))
    return codec.encode(expanded, add_special_tokens=special_tokens)


def _component_graph(manifest: ExportManifest, name: str, options: dict):
    entry = manifest.component(name)
    program = {"program": entry["program"]} if "program" in entry else {}
    return open_graph(manifest.format, manifest.directory / entry["file"], manifest.data, **program, **options)


def open_vision_language_runner(manifest: ExportManifest, **options) -> DecodeRunner:
    declaration = declared(manifest.format)
    if declaration is None or declaration.runner is None:
        raise GenerationError(f"{manifest.directory}: no vision-language runner for format '{manifest.format}'")
    base = runner_class(declaration.runner, manifest)  # the text decoder's decode loop
    runner = type(f"VisionLanguage{base.__name__}", (VisionLanguage, base), {})
    return runner(manifest, **options)
