"""Reads OUT_DIR/export.json, the contract between the exporter and every runner. Component
names, keys and cache kinds mirror src/io/manifest.h (spelled once there and once here)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FILE_NAME = "export.json"
SCHEMA_VERSION = 1

# Components.
MODEL = "model"  # the plain forward
PREFILL = "prefill"  # prompt -> last logits + cache
DECODE = "decode"  # the step a decode loop repeats
ENCODER = "encoder"  # an encoder-decoder's encoder
DECODER = "decoder"  # an encoder-decoder's decoder step
TEXT_DECODER = "text_decoder"  # a decoder over inputs_embeds
TOKEN_EMBEDDING = "token_embedding"  # token ids -> inputs_embeds
VISION_ENCODER = "vision_encoder"  # pixel values -> image embeddings
# OpenVINO GenAI's split of a Qwen-VL vision encoder (hfexport.vlm.OpenVinoGenaiTower runs it)
VISION_EMBEDDINGS = "vision_embeddings"
VISION_EMBEDDINGS_POS = "vision_embeddings_pos"
VISION_EMBEDDINGS_MERGER = "vision_embeddings_merger"
AUDIO_ENCODER = "audio_encoder"  # audio features -> audio embeddings

# generation.cache
CACHE_DYNAMIC = "dynamic"  # past_key_values.* -> present.*
CACHE_STATIC = "static"  # input.<name> / output.<name>, updated in place
CACHE_STATEFUL = "stateful"  # the cache lives in the runtime

# A component's states: [{name, kind, policy, window (ring), input / output, or variable}].
STATES = "states"

# generation keys
SHARES_BUFFER = "past_present_share_buffer"  # bind each decode past/present pair to one full-length buffer
REBUILD_CACHE_AT = "rebuild_cache_at_length"  # run the whole sequence again when it first reaches this length
MULTI_TOKEN_DECODE = "multi_token_decode"  # the step graph takes several tokens per call
PREFILL_CHUNK = "prefill_chunk"  # feed a longer prompt in calls of at most this many tokens (recurrent models)
CACHE_KEY_POSITIONS = "cache_key_positions"  # "slots": keys rotated by cache slot (the attention's own RoPE)
LOGITS = "logits"  # "all" query positions' logits, or the "last" one's only


class ManifestError(ValueError):
    pass


@dataclass
class ExportManifest:
    directory: Path
    data: dict[str, Any]
    generation: dict[str, Any] = field(default_factory=dict)

    @property
    def format(self) -> str:
        return self.data["format"]

    @property
    def cache(self) -> str:
        return self.generation.get("cache", "")

    def has_component(self, name: str) -> bool:
        return name in self.data["components"]

    def component(self, name: str) -> dict[str, Any]:
        try:
            return self.data["components"][name]
        except KeyError:
            raise ManifestError(f"{self.directory}: export has no '{name}' component") from None

    def replaced_states(self, name: str) -> set[str]:
        """The inputs of component `name`'s states that each call replaces whole (convolution,
        recurrent): fixed shapes, not caches that grow."""
        return {s["input"] for s in self.component(name).get("states", [])
                if s.get("policy") == "replace" and "input" in s}

    def file_of(self, name: str) -> Path:
        return self.directory / self.component(name)["file"]

    def dim_bounds(self, name: str) -> tuple[int, int]:
        d = self.data.get("dims", {}).get(name, {})
        return int(d.get("min", 0)), int(d.get("max", 2**62))

    @property
    def eos_token_ids(self) -> list[int]:
        return [int(i) for i in self.generation.get("eos_token_id", [])]


def load_manifest(directory: str | Path) -> ExportManifest:
    directory = Path(directory)
    path = directory / FILE_NAME
    if not path.is_file():
        raise ManifestError(f"{directory}: not an hfexport output (no {FILE_NAME})")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("components"), dict) or "format" not in data:
        raise ManifestError(f"{path}: missing 'format' or 'components'")
    return ExportManifest(directory, data, data.get("generation") or {})
