"""Summarises support_matrix.json (written by `pytest tests/parity`) as the README's table: one row
per model_type, one column per backend x mode, each cell the max abs error against transformers
over every variant tested there (or how many failed).

    python scripts/support_summary.py [support_matrix.json]
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

COLUMNS = [
    ("onnx", "standard", "forward"), ("onnx", "standard", "dynamic"), ("onnx", "standard", "multi-token"),
    ("onnx", "standard", "static"), ("onnx", "ort", "forward"), ("onnx", "ort", "dynamic"),
    ("onnx", "ort", "multi-token"), ("onnx", "ort", "static"), ("onnx", "ort-gqa", "forward"),
    ("onnx", "ort-gqa", "dynamic"), ("onnx", "ort-gqa", "multi-token"), ("onnx", "ort-gqa", "static"),
    ("onnx", "any", "float16"), ("openvino", "-", "forward"), ("openvino", "-", "stateful"), ("openvino", "-", "float16"),
    ("pt2", "-", "forward"), ("pt2", "-", "dynamic"), ("pt2", "-", "multi-token"), ("pt2", "-", "static"),
    ("pt2", "-", "float16"), ("executorch", "portable", "forward"), ("executorch", "xnnpack", "forward"),
    ("executorch", "portable", "static"), ("executorch", "xnnpack", "static"),
]


def classify(row: dict) -> tuple[str, str, str]:
    variant = row["variant"]
    profile = "-"
    if row["format"] == "onnx":
        m = re.search(r"\[(ort|ort-gqa) ops\]", variant)
        profile = m.group(1) if m else "standard"
    if row["format"] == "executorch":
        m = re.search(r"\[(portable|xnnpack)\]", variant)
        profile = m.group(1) if m else "xnnpack"
    if "float16" in variant:
        return row["format"], "any" if row["format"] == "onnx" else "-", "float16"
    m = re.match(r"generate-(dynamic|multi-token|static)-", variant)
    if m:
        return row["format"], profile, m.group(1)
    if variant.startswith("generate-"):
        return row["format"], profile, "stateful"
    return row["format"], profile, "forward"


def main(path: str = "support_matrix.json") -> None:
    rows = json.loads(Path(path).read_text())["rows"]
    cells: dict = defaultdict(lambda: {"err": 0.0, "n": 0, "failed": 0})
    for r in rows:
        cell = cells[(r["model_type"], *classify(r))]
        cell["n"] += 1
        if r["result"] != "pass":
            cell["failed"] += 1
        elif r.get("max_abs_err") is not None:
            cell["err"] = max(cell["err"], r["max_abs_err"])
    types = sorted({r["model_type"] for r in rows})
    head = [f"{f if p == '-' else f + ' ' + p} {m}" for f, p, m in COLUMNS]
    print("| model_type | " + " | ".join(head) + " |")
    print("|---" * (len(head) + 1) + "|")
    for t in types:
        out = []
        for f, p, m in COLUMNS:
            c = cells.get((t, f, p, m))
            out.append("–" if not c else (f"✗ {c['failed']}/{c['n']}" if c["failed"] else f"{c['err']:.1e}"))
        print(f"| {t} | " + " | ".join(out) + " |")
    passed = sum(r["result"] == "pass" for r in rows)
    print(f"\n{passed}/{len(rows)} rows pass.")


if __name__ == "__main__":
    main(*sys.argv[1:])
