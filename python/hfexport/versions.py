"""Version pinning: an export records the runtime versions hfexport's tests ran its format on
(`export.json` `tested_with`); opening it under another minor version logs one warning naming both."""

from __future__ import annotations

import importlib.metadata
import logging

logger = logging.getLogger("hfexport")
_warned: set[tuple[str, str, str]] = set()


def _minor(version: str) -> tuple[str, ...]:
    return tuple(version.split("+")[0].split(".")[:2])


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_runtime_versions(manifest_data: dict, runtimes: list[str] | None = None) -> list[str]:
    """Warns (once per pair) for each runtime in `runtimes` (default: every recorded one) whose
    installed minor version differs from the one the export was tested with; returns the warnings."""
    messages = []
    for package, tested in (manifest_data.get("tested_with") or {}).items():
        if runtimes is not None and package not in runtimes:
            continue
        installed = installed_version(package)
        if installed is None or _minor(installed) == _minor(str(tested)):
            continue
        message = (f"hfexport: this export was tested with {package} {tested}, but {package} {installed} is "
                   "installed: results may differ")
        messages.append(message)
        key = (package, str(tested), installed)
        if key not in _warned:
            _warned.add(key)
            logger.warning(message)
    return messages
