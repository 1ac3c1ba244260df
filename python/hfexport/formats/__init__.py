"""The export formats the Python side knows, one module each: its declaration (ExportFormat: config
and exporter classes, saver, graph call, runners) beside the code that is its own and imports no
runtime until used. A new format is a module here and a line below."""

from .registry import (ExportFormat, by_config_name, declarations, declared, register_format, replace_file, resolve,
                       runner_class, set_runner)

# Each registers its declaration; this order is the order error messages list the formats in.
from . import onnx  # noqa: E402,F401,I001
from . import openvino  # noqa: E402,F401
from . import pt2  # noqa: E402,F401
from . import executorch  # noqa: E402,F401

__all__ = ["ExportFormat", "by_config_name", "declarations", "declared", "register_format", "replace_file", "resolve",
           "runner_class", "set_runner"]
