"""Shared fixtures for the parity and bad-input tests.

- ``hfexport_bin``: the CLI under test (env HFEXPORT_BIN, else ``<repo>/.venv/bin/hfexport``, else
  ``<repo>/build/hfexport``).
- ``make_tiny_model``: builds a seeded random-weight HF causal LM from a config dict and saves it.
- ``run_hfexport`` / ``export_model``: run the CLI (raw, or asserting success).
- ``assert_clean_error`` / ``leftovers``: the one-line error contract of every failing CLI call.
- ``support_matrix``: session recorder; ``support_matrix.md`` / ``.json`` are written at the repo
  root when the session ends (only if something was recorded).
- ``hfexport`` (the Python runner package) is made importable (``<repo>/python`` unless installed),
  and every CLI call gets ``HFEXPORT_PYTHON`` (this interpreter, unless already set) and that
  package's directory on ``PYTHONPATH``, so that ``hfexport generate`` (which execs
  ``python -m hfexport.generate``) runs the runner under test.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest


from tiny_configs import TINY_CONFIG  # noqa: E402,F401 - re-exported for the suites

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO_ROOT / "python"

try:
    import hfexport
except ImportError:
    sys.path.insert(0, str(PYTHON_DIR))
    import hfexport

# The directory holding the hfexport package these tests import; CLI calls get the same one.
HFEXPORT_PY_ROOT = Path(hfexport.__file__).resolve().parents[1]


def cli_env() -> dict:
    """Environment for CLI calls: `hfexport generate` (which execs `python -m hfexport.generate`)
    runs this interpreter on the same hfexport package the tests import."""
    env = dict(os.environ)
    env.setdefault("HFEXPORT_PYTHON", sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HFEXPORT_PY_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


# --------------------------------------------------------------------------------------------
# The binary


def _find_binary() -> Path | None:
    env = os.environ.get("HFEXPORT_BIN")
    if env:
        return Path(env)
    candidates = [
        REPO_ROOT / ".venv" / "bin" / "hfexport",
        REPO_ROOT / "build" / "hfexport",
    ]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    return None


@pytest.fixture(scope="session")
def hfexport_bin() -> Path:
    path = _find_binary()
    if path is None or not path.is_file():
        pytest.fail(
            "hfexport binary not found: set HFEXPORT_BIN, install the package into the venv, "
            f"or build it at {REPO_ROOT / 'build' / 'hfexport'}",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def run_hfexport(hfexport_bin):
    """run_hfexport(*args, timeout=120) -> CompletedProcess (text mode, never raises on rc)."""

    def run(*args, timeout: float = 120.0) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(hfexport_bin), *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env=cli_env(),
        )

    return run


@pytest.fixture(scope="session")
def export_model(run_hfexport):
    """export_model(model_dir, out_dir, *extra_args) -> out_dir; fails the test on a non-zero exit."""

    def export(model_dir, out_dir, *extra) -> Path:
        proc = run_hfexport("export", model_dir, "-o", out_dir, *extra)
        if proc.returncode != 0:
            raise ExportFailed(proc)
        return Path(out_dir)

    return export


class ExportFailed(AssertionError):
    def __init__(self, proc: subprocess.CompletedProcess):
        self.proc = proc
        super().__init__(
            f"hfexport exited with {proc.returncode}\nargs: {proc.args}\nstderr: {proc.stderr.strip()}"
        )


# --------------------------------------------------------------------------------------------
# Clean CLI errors (shared by the bad-input and generation tests)


def leftovers(out_dir: Path) -> list[str]:
    parent = out_dir.parent
    if not parent.is_dir():
        return []
    prefixes = (f".{out_dir.name}.tmp-", f".{out_dir.name}.old-")
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(prefixes))


def assert_clean_error(proc, out_dir: Path | None, *mentions: str) -> str:
    """Returns the error line after checking the contract."""
    err = proc.stderr
    assert proc.returncode != 0, f"expected failure, got exit 0\nstdout: {proc.stdout}\nstderr: {err}"
    assert proc.returncode > 0 and proc.returncode not in (134, 136, 139), (
        f"crashed (exit {proc.returncode})\nstderr: {err}"
    )
    for bad in ("Traceback", "terminate called", "AddressSanitizer", "runtime error:", "Segmentation"):
        assert bad not in err, f"stderr holds {bad!r}:\n{err}"
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].strip(), f"stderr is not exactly one line:\n{err!r}"
    line = lines[0]
    assert line.startswith("hfexport: error: "), f"bad prefix: {line!r}"
    assert len(line) > len("hfexport: error: "), "empty message"
    for m in mentions:
        assert m in line, f"error does not mention {m!r}: {line!r}"
    if out_dir is not None:
        assert not out_dir.exists(), f"{out_dir} was left behind"
        assert not leftovers(out_dir), f"staging dirs left behind: {leftovers(out_dir)}"
    print(line)  # shown with pytest -rP
    return line


# --------------------------------------------------------------------------------------------
# Tiny random HF models


def build_tiny_model(
    out_dir,
    model_type: str,
    config: dict,
    *,
    seed: int = 0,
    dtype: str | None = None,
    max_shard_size=None,
    weight_std: float = 0.08,
    causal_lm: bool = True,
):
    """Builds a random-weight causal LM, saves it to ``out_dir`` and returns (out_dir, model).

    The returned model is the float32 eager model the checkpoint was saved from (before any
    dtype conversion), in eval mode. ``weight_std`` is the std of the re-initialised matrices.
    ``causal_lm`` False: the model_type's image-text-to-text class instead (a vision-language
    checkpoint).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(model_type, **config)
    auto = AutoModelForCausalLM if causal_lm else AutoModelForImageTextToText
    model = auto.from_config(cfg, attn_implementation="eager")
    # Gemma's, Qwen3.5's and Qwen3-Next's RMSNorms scale by 1 + w: the same [0.5, 1.5] scales as
    # the others' w.
    norm_offset = 1.0 if model_type.startswith(("gemma", "qwen3_5", "qwen3_next")) else 0.0
    # Default init (std 0.02) gives near-constant logits; widen the weights a little so that
    # differences in rope, masks or biases show up in the logits.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
            elif "norm" in name:
                p.uniform_(0.5 - norm_offset, 1.5 - norm_offset)
            else:
                p.normal_(0.0, weight_std)
        # LFM2-MoE's expert-selection bias is a zero buffer: offset it so it changes which experts win.
        for name, buf in model.named_buffers():
            if name.endswith("expert_bias"):
                buf.normal_(0.0, 0.5)
    model.eval()
    out_dir = Path(out_dir)
    save_kwargs = {}
    if max_shard_size is not None:
        save_kwargs["max_shard_size"] = max_shard_size
    if dtype is not None:
        copy.deepcopy(model).to(getattr(torch, dtype)).save_pretrained(out_dir, **save_kwargs)
    else:
        model.save_pretrained(out_dir, **save_kwargs)
    return out_dir, model


@pytest.fixture(scope="session")
def make_tiny_model():
    return build_tiny_model


# --------------------------------------------------------------------------------------------
# Support matrix


@dataclass
class SupportMatrix:
    rows: list = field(default_factory=list)

    def record(self, model_type: str, variant: str, passed: bool, max_abs_err=None, note: str = "",
               backend: str = "onnx") -> None:
        self.rows.append(
            {
                "model_type": model_type,
                "variant": variant,
                "format": backend,
                "result": "pass" if passed else "fail",
                "max_abs_err": None if max_abs_err is None else float(max_abs_err),
                "note": note,
            }
        )

    def write(self, root: Path) -> None:
        if not self.rows:
            return
        rows = sorted(self.rows, key=lambda r: (r["model_type"], r["format"], r["variant"]))
        (root / "support_matrix.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n")
        lines = [
            "# hfexport support matrix",
            "",
            "Generated by `pytest tests/parity` (onnxruntime / OpenVINO CPU vs transformers eager).",
            "",
            "| model_type | format | variant | result | max abs err | note |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            err = "" if r["max_abs_err"] is None else f"{r['max_abs_err']:.2e}"
            note = r["note"].replace("|", "\\|").replace("\n", " ")
            if len(note) > 160:
                note = note[:157] + "..."
            lines.append(f"| {r['model_type']} | {r['format']} | {r['variant']} | {r['result']} | {err} | {note} |")
        passed = sum(r["result"] == "pass" for r in rows)
        lines += ["", f"{passed}/{len(rows)} pass", ""]
        (root / "support_matrix.md").write_text("\n".join(lines))


_MATRIX = SupportMatrix()


@pytest.fixture(scope="session")
def support_matrix() -> SupportMatrix:
    return _MATRIX


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # each xdist worker would clobber the others' rows
    _MATRIX.write(REPO_ROOT)
