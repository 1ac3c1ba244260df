"""transformers.exporters.auto's names, for code that imports them from there."""

from .configs import AutoExportConfig  # noqa: F401
from .exporters import AutoHfExporter  # noqa: F401

__all__ = ["AutoExportConfig", "AutoHfExporter"]
