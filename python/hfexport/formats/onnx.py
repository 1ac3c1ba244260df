"""ONNX: a .onnx graph (its weights in a .onnx.data beside it), run by onnxruntime
(hfexport.onnxruntime_runner)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..versions import check_runtime_versions
from .registry import ExportFormat, register_format, replace_file


class OnnxSaver:
    @staticmethod
    def load(path: Path, entry: dict | None = None):
        import onnx

        return onnx.load(str(path), load_external_data=False)

    @staticmethod
    def save(src: Path, entry: dict, dst: Path) -> None:
        data_files = entry.get("data_files") or []
        if dst.suffix != ".onnx":
            raise ValueError(f"{dst}: an ONNX program is saved as a .onnx file")
        if not data_files:
            replace_file(src, dst)
            return
        # The weights go beside the graph under its own name, so programs saved to one folder keep
        # their own weights.
        import onnx

        data_name = dst.name + ".data"
        model = onnx.load(str(src), load_external_data=False)
        for tensor in model.graph.initializer:
            for kv in tensor.external_data:
                if kv.key == "location":
                    kv.value = data_name
        # data_files are relative to the export's folder; the data sits beside its graph
        replace_file(src.parent / Path(data_files[0]).name, dst.with_name(data_name))
        tmp = dst.with_name(f".{dst.name}.hfexport-tmp")
        onnx.save(model, str(tmp))
        os.replace(tmp, dst)


class OnnxRuntimeGraph:
    def __init__(self, path: Path, manifest_data: dict, **options):
        import onnxruntime as ort

        check_runtime_versions(manifest_data, ["onnxruntime"])
        self.session = ort.InferenceSession(str(path), options.get("session_options"),
                                            providers=options.get("providers") or ["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self.session.get_outputs()]
        return dict(zip(names, self.session.run(names, feeds)))


register_format(ExportFormat(
    name="onnx", config_name="onnx", config="hfexport.configs:OnnxConfig", exporter="hfexport.exporters:OnnxExporter",
    saver=OnnxSaver, graph="hfexport.formats.onnx:OnnxRuntimeGraph",
    runner="hfexport.onnxruntime_runner:runner_class"))
