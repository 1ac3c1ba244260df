"""Hand-built graphs (tests/tools/test_graphs.cpp) written in every format, and a caller for a
written component in its own runtime."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "unit"
TOOL = BUILD / "hfx_test_graphs"
FORMATS = ["onnx", "openvino", "executorch", "pt2"]


def build_tool() -> Path:
    """The fixture writer, built with the C++ unit tests (scripts/test.sh builds it first)."""
    python = ROOT / ".venv" / "bin" / "python"
    if not (BUILD / "build.ninja").exists():
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(BUILD), "-G", "Ninja", "-DHFX_BUILD_TESTS=ON",
                        "-DHFX_PYTHON_EXTENSION=OFF", f"-DPython3_EXECUTABLE={python}"], check=True,
                       capture_output=True)
    subprocess.run(["ninja", "-C", str(BUILD), "-j", str(os.cpu_count() or 1), "hfx_test_graphs"], check=True,
                   capture_output=True)
    return TOOL


def write_graphs(out: Path) -> dict:
    """{case: {format: {dir, batch, components: {role: entry}}}} of every hand-built graph."""
    proc = subprocess.run([str(build_tool()), str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


class Component:
    """One written component, callable with {name: array} -> {name: array} in its runtime. State the
    runtime keeps (a variable, a method buffer) persists between calls; state passed in and out
    appears in the feeds and results under the names the component declares."""

    def __init__(self, fmt: str, case: dict, name: str):
        self.fmt, self.entry = fmt, case["components"][name]
        path = Path(case["dir"]) / self.entry["file"]
        self.inputs = [i["name"] for i in self.entry["inputs"]]
        self.outputs = [o["name"] for o in self.entry["outputs"]]
        if fmt == "onnx":
            import onnxruntime as ort

            self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        elif fmt == "openvino":
            import openvino as ov

            from hfexport.openvino_runner import F32_INFERENCE

            # float32 as exported (the CPU plugin computes convolutions in bf16 where it can otherwise)
            self.request = ov.Core().compile_model(str(path), "CPU", F32_INFERENCE).create_infer_request()
            self.request.reset_state()
        elif fmt == "executorch":
            from hfexport.executorch_runner import load_program

            self.method = load_program(path).load_method(self.entry["program"])
        else:
            from hfexport.torch_runner import load_programs

            self.module = load_programs(path)[self.entry["program"]].module()
            self.arguments = {}  # the caller's tensors, kept: the program mutates them in place

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.fmt == "onnx":
            return dict(zip(self.outputs, self.session.run(None, {n: feeds[n] for n in self.inputs})))
        if self.fmt == "openvino":
            batch = next(iter(feeds.values())).shape[0]
            given = {n: feeds[n] for n in self.inputs if n != "beam_idx"}
            if "beam_idx" in self.inputs:
                given["beam_idx"] = np.arange(batch, dtype=np.int32)
            result = self.request.infer(given)
            return {n: np.array(result[n]) for n in self.outputs}
        import torch

        if self.fmt == "executorch":
            values = self.method.execute([torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in self.inputs])
            return {n: v.numpy().copy() for n, v in zip(self.outputs, values)}
        for n in self.inputs:
            if n in feeds:
                self.arguments[n] = torch.from_numpy(np.ascontiguousarray(feeds[n])).clone()
        values = self.module(**self.arguments)
        return {n: v.detach().numpy().copy() for n, v in zip(self.outputs, values)}

    def state_input(self, state: str) -> str | None:
        """The input the caller feeds this state through, when the runtime does not keep it."""
        entry = next(s for s in self.entry["states"] if s["name"] == state)
        if self.entry["stateful"] or not entry["input"]:
            return None
        return entry["input"] if entry["input"] in self.inputs else _keyword(self.inputs, entry["input"])

    def state_output(self, state: str) -> str | None:
        entry = next(s for s in self.entry["states"] if s["name"] == state)
        if self.entry["stateful"] or not entry["output"] or entry["carried"] and self.fmt == "pt2":
            return None
        return entry["output"] if entry["output"] in self.outputs else _keyword(self.outputs, entry["output"])


def feed_state(component: "Component", feeds: dict, state: str, value: np.ndarray, first_call: bool) -> dict:
    """`feeds` with the state the caller carries: on every call when the component returns it, on the
    first only when the runtime updates the caller's tensor in place (.pt2); never when the runtime
    keeps it."""
    name = component.state_input(state)
    if name and (component.state_output(state) or first_call):
        feeds[name] = value
    return feeds


def _keyword(names: list[str], ir_name: str) -> str:
    """A .pt2 program's keyword for an IR name (dots become underscores)."""
    wanted = ir_name.replace(".", "_")
    assert wanted in names, (ir_name, names)
    return wanted
