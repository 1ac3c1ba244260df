"""Audio front ends computed natively by hfexport's C++ core (no torch, no numpy FFT): Whisper's
log-mel input features, the numbers transformers' WhisperFeatureExtractor gives."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# WhisperFeatureExtractor's preprocessor_config.json keys the features depend on, with its defaults.
_KEYS = {"feature_size": 80, "sampling_rate": 16000, "hop_length": 160, "n_fft": 400, "chunk_length": 30}


def whisper_features(samples, *, pad_to_chunk: bool = True, preprocessor_config: dict | str | Path | None = None,
                     **overrides) -> np.ndarray:
    """Log-mel features [feature_size, frames] (float32) of mono `samples` at the config's sampling
    rate: WhisperFeatureExtractor(...)(samples).input_features[0]. `pad_to_chunk` False keeps the
    audio's own length (the extractor's padding="longest", truncation=False). The config comes from
    a preprocessor_config.json (a dict or its path), else the extractor's defaults, and keyword
    overrides (feature_size=128 for large-v3)."""
    from hfexport import _core

    config = dict(_KEYS)
    if preprocessor_config is not None:
        given = (preprocessor_config if isinstance(preprocessor_config, dict)
                 else json.loads(Path(preprocessor_config).read_text()))
        if given.get("dither", 0.0):
            raise ValueError(f"preprocessor_config: dither {given['dither']} adds random noise to the audio: "
                             "features with it cannot be reproduced (set it to 0.0)")
        config.update({k: given[k] for k in _KEYS if given.get(k) is not None})
    unknown = set(overrides) - set(_KEYS)
    if unknown:
        raise TypeError(f"whisper_features: unknown option(s) {sorted(unknown)} (known: {sorted(_KEYS)})")
    config.update(overrides)
    native = _core.LogMelConfig()
    for key, value in config.items():
        setattr(native, key, int(value))
    native.pad_to_chunk = pad_to_chunk
    return _core.whisper_log_mel(np.ascontiguousarray(samples, dtype=np.float32), native)
