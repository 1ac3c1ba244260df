"""hfexport's Python side: decode-loop runners for exported models (the exporter itself is the
C++ `hfexport` program)."""

from .manifest import ExportManifest, load_manifest
from .runner import DecodeRunner, GenerationError, generate, open_runner, register_runner
from .sampling import Sampler

__all__ = ["DecodeRunner", "ExportManifest", "GenerationError", "Sampler", "generate", "load_manifest", "open_runner",
           "register_runner"]
