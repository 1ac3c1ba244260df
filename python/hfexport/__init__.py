"""hfexport's Python side: the transformers.exporters-shaped API over the C++ export core
(`OnnxExporter`, `OpenVINOExporter`, `DynamoExporter`, `ExecutorchExporter`, `AutoHfExporter`, `ExportedModel`, ...) and the decode-loop
runners for exported models (the same core is the `hfexport` command-line program)."""

from .configs import (AutoExportConfig, ConfigError, Dim, DynamoConfig, ExecutorchConfig, ExportConfigMixin,
                      OnnxConfig, OpenVINOConfig, WeightQuantizer)
from .exporters import (AutoHfExporter, DynamoExporter, ExecutorchExporter, ExportedComponent, ExportedModel,
                        HfExporter, ModelOutput, OnnxExporter, OpenVINOExporter, decompose_for_generation)
from .manifest import ExportManifest, load_manifest
from .runner import DecodeRunner, GenerationError, generate, open_runner, register_runner
from .sampling import Sampler

__all__ = ["AutoExportConfig", "AutoHfExporter", "ConfigError", "DecodeRunner", "Dim", "DynamoConfig",
           "DynamoExporter", "ExecutorchConfig", "ExecutorchExporter", "ExportConfigMixin",
           "ExportError", "ExportManifest", "ExportedComponent", "ExportedModel", "GenerationError", "HfExporter",
           "ModelOutput", "OnnxConfig", "OnnxExporter", "OpenVINOConfig", "OpenVINOExporter", "Sampler",
           "WeightQuantizer", "decompose_for_generation", "generate", "load_manifest", "open_runner",
           "register_runner"]


def __getattr__(name: str):
    if name == "ExportError":  # the core's error type: importing it needs the compiled extension
        from .exporters import core

        return core().ExportError
    raise AttributeError(f"module 'hfexport' has no attribute {name!r}")
