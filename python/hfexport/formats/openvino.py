"""OpenVINO IR: a .xml graph and its .bin weights, run by OpenVINO (hfexport.openvino_runner); a
generation model is stateful (its cache in the model's variables)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..versions import check_runtime_versions
from .registry import ExportFormat, register_format, replace_file


class OpenVinoSaver:
    @staticmethod
    def load(path: Path, entry: dict | None = None):
        import openvino as ov

        return ov.Core().read_model(str(path))

    @staticmethod
    def save(src: Path, entry: dict, dst: Path) -> None:
        if dst.suffix != ".xml":
            raise ValueError(f"{dst}: an OpenVINO program is saved as a .xml file (its weights as the .bin beside it)")
        for data in entry.get("data_files") or []:
            replace_file(src.parent / data, dst.with_suffix(".bin"))
        replace_file(src, dst)


class OpenVinoGraph:
    """A stateful (generation) model starts from an empty cache on every call."""

    def __init__(self, path: Path, manifest_data: dict, **options):
        import openvino as ov

        from ..openvino_runner import F32_INFERENCE

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


register_format(ExportFormat(
    name="openvino", config_name="openvino", config="hfexport.configs:OpenVINOConfig",
    exporter="hfexport.exporters:OpenVINOExporter", saver=OpenVinoSaver, graph="hfexport.formats.openvino:OpenVinoGraph",
    runner="hfexport.openvino_runner:OpenVinoRunner"))
