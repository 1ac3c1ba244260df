"""Decode loop over an ExecuTorch export (.pte), with ExecuTorch's Python runtime. The static KV
cache is a mutable buffer of the `forward` method, written in place at the positions of each
call and kept by the loaded method between calls: each call passes the tokens, a 4-D boolean mask
over the cache's slots and their positions, never the cache."""

from __future__ import annotations

import numpy as np

from .manifest import CACHE_STATEFUL, DECODE, ExportManifest
from .runner import DecodeRunner, GenerationError
from .versions import check_runtime_versions


def load_program(path):
    """The program, verified as ExecuTorch's runtime loads it (each load has fresh method state)."""
    from executorch.runtime import Runtime, Verification

    return Runtime.get().load_program(str(path), verification=Verification.InternalConsistency)


class ExecutorchGraph:
    """One method of a .pte for ExportedModel(**inputs): numpy in, numpy out, by name. A method
    with a static cache is loaded afresh for each call (its buffers start zeroed)."""

    def __init__(self, path, manifest_data: dict, program: str = "forward", **options):
        check_runtime_versions(manifest_data, ["executorch"])
        self.path, self.method_name = path, program
        component = next(c for c in manifest_data["components"].values() if c.get("program") == program)
        self.input_names = [i["name"] for i in component["inputs"]]
        self.output_names = [o["name"] for o in component["outputs"]]
        self.stateful = bool((manifest_data.get("generation") or {}).get("cache_pairs"))
        self.method = None

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        if self.method is None or self.stateful:
            self.method = load_program(self.path).load_method(self.method_name)
        outputs = self.method.execute([torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in self.input_names])
        return {name: value.numpy() for name, value in zip(self.output_names, outputs)}


class ExecutorchRunner(DecodeRunner):
    def __init__(self, manifest: ExportManifest, **options):
        self.manifest = manifest
        check_runtime_versions(manifest.data, ["executorch"])
        gen = manifest.generation
        if manifest.cache != CACHE_STATEFUL or not gen.get("max_cache_len"):
            raise GenerationError(f"{manifest.directory}: not an ExecuTorch export with a static cache")
        self.max_cache_len = int(gen["max_cache_len"])
        self.path = manifest.file_of(DECODE)
        self.method_name = manifest.component(DECODE).get("program", "forward")
        self.method = None

    def _run(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        import torch

        slots = np.arange(self.max_cache_len)
        mask = (slots[None, None, :] <= positions[:, :, None])[:, None]
        (logits,) = self.method.execute([torch.from_numpy(np.ascontiguousarray(ids)), torch.from_numpy(mask),
                                         torch.from_numpy(np.ascontiguousarray(positions))])
        return logits[:, -1].float().numpy()

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray, max_new_tokens: int) -> np.ndarray:
        batch, length = input_ids.shape
        if batch != 1:
            raise GenerationError(f"batch of {batch} but a .pte's in-place cache serves batch 1")
        if not attention_mask.all():
            raise GenerationError("a batch of 1 has no padding: the attention mask must be all ones")
        if length + max_new_tokens - 1 > self.max_cache_len:
            raise GenerationError(
                f"prompt of {length} tokens + {max_new_tokens} new tokens exceeds max_cache_len {self.max_cache_len}")
        # Slots past the prompt may hold an earlier request's rows: the mask never reaches them
        # before this request writes them, so the loaded method is reused.
        if self.method is None:
            self.method = load_program(self.path).load_method(self.method_name)
        self.next_position = length
        return self._run(input_ids.astype(np.int64), np.arange(length, dtype=np.int64)[None])

    def step(self, tokens: np.ndarray) -> np.ndarray:
        if self.next_position >= self.max_cache_len:
            raise GenerationError(f"generation reached the cache length {self.max_cache_len}")
        positions = np.array([[self.next_position]], dtype=np.int64)
        self.next_position += 1
        return self._run(tokens.astype(np.int64)[:, None], positions)
