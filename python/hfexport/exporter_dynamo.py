"""transformers.exporters.exporter_dynamo's names, for code that imports them from there."""

from .exporters import DynamoExporter  # noqa: F401

__all__ = ["DynamoExporter"]
