"""ExecuTorch: one .pte holding every component as a method, run by ExecuTorch's Python runtime
(hfexport.executorch_runner: one runner class per cache mechanic)."""

from __future__ import annotations

from pathlib import Path

from .registry import ExportFormat, register_format, save_whole_file


class ExecutorchSaver:
    """A .pte holds every method (and the weights they share): `save` copies it whole;
    `program` is ExecuTorch's loaded Program (its methods by name)."""

    @staticmethod
    def load(path: Path, entry: dict | None = None):
        from ..executorch_runner import load_program

        return load_program(path)

    @staticmethod
    def save(src: Path, entry: dict, dst: Path) -> None:
        save_whole_file(src, dst, "an ExecuTorch program")


register_format(ExportFormat(
    name="executorch", config_name="executorch", config="hfexport.configs:ExecutorchConfig",
    exporter="hfexport.exporters:ExecutorchExporter", saver=ExecutorchSaver,
    graph="hfexport.executorch_runner:ExecutorchGraph", runner="hfexport.executorch_runner:runner_class"))
