"""transformers.exporters.base's names, for code that imports them from there."""

from .exporters import ExportedComponent, ExportedModel, HfExporter  # noqa: F401

__all__ = ["ExportedComponent", "ExportedModel", "HfExporter"]
