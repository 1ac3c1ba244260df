"""Next-token selection: greedy, or sampling with temperature, top-k and top-p from a seeded
generator (numpy), so that a run is reproducible."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Sampler:
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0        # 0 = no limit
    top_p: float = 1.0    # 1.0 = no nucleus cut
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be positive, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        self._rng = np.random.default_rng(self.seed)

    def __call__(self, logits: np.ndarray) -> np.ndarray:
        """logits [batch, vocab] -> token ids [batch]."""
        if not self.do_sample:
            return logits.argmax(-1)
        scores = logits.astype(np.float64) / self.temperature
        if self.top_k:
            kth = np.sort(scores, axis=-1)[:, -min(self.top_k, scores.shape[-1])][:, None]
            scores = np.where(scores < kth, -np.inf, scores)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        if self.top_p < 1:
            order = np.argsort(-probs, axis=-1)
            sorted_probs = np.take_along_axis(probs, order, -1)
            # Keep the smallest prefix whose mass reaches top_p (always at least one token).
            drop = np.cumsum(sorted_probs, -1) - sorted_probs >= self.top_p
            sorted_probs[drop] = 0
            probs = np.zeros_like(probs)
            np.put_along_axis(probs, order, sorted_probs, -1)
            probs /= probs.sum(-1, keepdims=True)
        return np.array([self._rng.choice(probs.shape[-1], p=row) for row in probs])
