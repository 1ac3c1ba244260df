"""One call of one exported graph on its runtime, for `ExportedModel(**inputs)`: feeds by input name,
outputs by output name, as numpy arrays. Each format declares its graph call (hfexport.formats)."""

from __future__ import annotations

from pathlib import Path

from .formats import declarations, declared, resolve


def open_graph(export_format: str, path: Path, manifest_data: dict, **options):
    declaration = declared(export_format)
    if declaration is None or declaration.graph is None:
        known = ", ".join(f.name for f in declarations() if f.graph)
        raise ValueError(f"no runner for export format '{export_format}' (runners: {known})")
    return resolve(declaration.graph)(path, manifest_data, **options)
