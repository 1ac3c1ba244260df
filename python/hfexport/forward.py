"""One call of one exported graph on its runtime, by export format (the registry), for
`ExportedModel(**inputs)`: feeds by input name, outputs by output name, as numpy arrays."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from .versions import check_runtime_versions


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


class OpenVinoGraph:
    """A stateful (generation) model starts from an empty cache on every call."""

    def __init__(self, path: Path, manifest_data: dict, **options):
        import openvino as ov

        from .openvino_runner import F32_INFERENCE

        check_runtime_versions(manifest_data, ["openvino"])
        config = options.get("config") or F32_INFERENCE
        self.compiled = ov.Core().compile_model(str(path), options.get("device", "CPU"), config)
        self.request = self.compiled.create_infer_request()
        self.input_names = [i.get_any_name() for i in self.compiled.inputs]

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feeds = dict(feeds)
        if "beam_idx" in self.input_names:
            self.request.reset_state()
            feeds["beam_idx"] = np.arange(next(iter(feeds.values())).shape[0], dtype=np.int32)
        self.request.infer(feeds)
        return {o.get_any_name(): self.request.get_tensor(o).data.copy() for o in self.compiled.outputs}


def TorchProgramGraph(path: Path, manifest_data: dict, **options):
    from .torch_runner import TorchProgramGraph as graph

    return graph(path, manifest_data, **options)


def ExecutorchGraph(path: Path, manifest_data: dict, **options):
    from .executorch_runner import ExecutorchGraph as graph

    return graph(path, manifest_data, **options)


GRAPH_RUNNERS: dict[str, Callable[..., object]] = {"onnx": OnnxRuntimeGraph, "openvino": OpenVinoGraph,
                                                   "pt2": TorchProgramGraph, "executorch": ExecutorchGraph}


def open_graph(export_format: str, path: Path, manifest_data: dict, **options):
    if export_format not in GRAPH_RUNNERS:
        raise ValueError(f"no runner for export format '{export_format}' (runners: {', '.join(GRAPH_RUNNERS)})")
    return GRAPH_RUNNERS[export_format](path, manifest_data, **options)
