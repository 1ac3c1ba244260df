"""transformers.exporters.exporter_openvino's names, for code that imports them from there."""

from .exporters import OpenVINOExporter  # noqa: F401

__all__ = ["OpenVINOExporter"]
