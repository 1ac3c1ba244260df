"""transformers.exporters.utils's names, for code that imports them from there."""

from .exporters import decompose_for_generation  # noqa: F401

__all__ = ["decompose_for_generation"]
