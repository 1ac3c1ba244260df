"""transformers.exporters.exporter_onnx's names, for code that imports them from there."""

from .exporters import OnnxExporter  # noqa: F401

__all__ = ["OnnxExporter"]
