"""What one export format brings to the Python side, declared once per format (hfexport.formats.onnx,
.openvino, .pt2, .executorch) and looked up here by name. Runtimes are imported only when an export
of their format is opened: a declaration names its runners as "module:attribute" strings."""

from __future__ import annotations

import dataclasses
import importlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ExportFormat:
    name: str  # export.json's "format"
    config_name: str | None = None  # transformers.exporters' export_format ("dynamo" writes .pt2)
    config: str | None = None  # its ExportConfig class
    exporter: str | None = None  # its HfExporter class
    saver: Any = None  # load / save of one component's file
    graph: str | None = None  # one call of one graph: (path, manifest_data, **options) -> callable
    # The decode-loop runner: a DecodeRunner class taking (manifest, **options), or a function of
    # the manifest that picks one (a format with one class per cache mechanic).
    runner: str | None = None


_FORMATS: dict[str, ExportFormat] = {}


def register_format(declaration: ExportFormat) -> None:
    """Adds (or replaces) the declaration of the format named `declaration.name`."""
    _FORMATS[declaration.name] = declaration


def declared(name: str) -> ExportFormat | None:
    """The declaration of the format export.json names `name`, if any."""
    return _FORMATS.get(name)


def declarations() -> list[ExportFormat]:
    return list(_FORMATS.values())


def by_config_name(config_name: str) -> ExportFormat | None:
    """The format transformers.exporters calls `config_name` ("onnx", "dynamo", ...)."""
    return next((f for f in _FORMATS.values() if f.config_name == config_name and f.config), None)


def set_runner(name: str, target: str) -> None:
    """Replaces (or, for a format not declared, declares) the decode-loop runner of `name`."""
    current = _FORMATS.get(name) or ExportFormat(name)
    _FORMATS[name] = dataclasses.replace(current, runner=target)


def resolve(target: str) -> Any:
    """The attribute a "module:attribute" string names, its module imported now."""
    module, attribute = target.split(":")
    return getattr(importlib.import_module(module), attribute)


def runner_class(target: str, manifest) -> type:
    """The DecodeRunner class a declaration's runner names for this export."""
    found = resolve(target)
    return found if isinstance(found, type) else found(manifest)


def replace_file(src: Path, dst: Path) -> None:
    """Copies src over dst through a temporary sibling (a reader of the old dst keeps its file)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.hfexport-tmp")
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def save_whole_file(src: Path, dst: Path, what: str) -> None:
    """Saves a component whose file holds everything it needs (a .pt2 archive, a .pte) by copying
    it to `dst`, which must have the same suffix."""
    if dst.suffix != src.suffix:
        raise ValueError(f"{dst}: {what} is saved as a {src.suffix} file")
    replace_file(src, dst)
