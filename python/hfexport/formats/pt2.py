"""PyTorch programs: one .pt2 archive holding every component's program (transformers.exporters'
"dynamo" format), run by torch.export (hfexport.torch_runner)."""

from __future__ import annotations

from pathlib import Path

from ..manifest import MODEL
from .registry import ExportFormat, register_format, save_whole_file


class Pt2Saver:
    """A .pt2 archive holds every component's program: `save` copies it whole (torch.export.load
    returns the program named `model`; `program` gives a component's own)."""

    @staticmethod
    def load(path: Path, entry: dict | None = None):
        from ..torch_runner import load_programs

        return load_programs(path)[(entry or {}).get("program", MODEL)]

    @staticmethod
    def save(src: Path, entry: dict, dst: Path) -> None:
        save_whole_file(src, dst, "a PyTorch program")


register_format(ExportFormat(
    name="pt2", config_name="dynamo", config="hfexport.configs:DynamoConfig", exporter="hfexport.exporters:DynamoExporter",
    saver=Pt2Saver, graph="hfexport.torch_runner:TorchProgramGraph",
    runner="hfexport.torch_runner:runner_class"))
