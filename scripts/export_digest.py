"""Exports every tiny test model in every mode and format and prints (or compares) a digest of
each written file: the before/after check for refactors that must keep the exports identical.

    python scripts/export_digest.py --out before.json            # with the old binary
    python scripts/export_digest.py --compare before.json        # with the new one

Models come from the tests' config registry (tests/parity/tiny_configs.py) and, for the text
encoders, the encoder tests' tiny configs (tests/parity/test_encoders.py) saved as a base model and
as a masked-LM head class, built seeded in a cache folder; the binary is $HFEXPORT_BIN or the
venv's hfexport.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "parity"))

from conftest import build_tiny_model  # noqa: E402
from tiny_configs import TINY_CONFIG, cases  # noqa: E402

CACHE = "--static-cache --max-cache-len 48"
# (mode name, CLI args): every generation mode and weight option, per format.
ONNX_MODES = [
    (f"{mode}-{profile}", f"{args} --onnx-ops {profile}".split())
    for profile in ("standard", "ort", "ort-gqa")
    for mode, args in (("plain", ""), ("dynamic", "--for-generation"),
                       ("multi", "--for-generation --multi-token-decode"), ("static", f"--for-generation {CACHE}"))
] + [
    ("fp16", "--dtype float16".split()),
    ("fp16-dynamic-ort", "--dtype float16 --for-generation --onnx-ops ort".split()),
    ("int4-ort", "--quantize int4 --onnx-ops ort".split()),
    ("int4-dynamic-ort", "--quantize int4 --for-generation --onnx-ops ort".split()),
    ("int8-standard", "--quantize int8 --onnx-ops standard".split()),
    ("int8-static-ort", f"--quantize int8 --for-generation {CACHE} --onnx-ops ort".split()),
]
OPENVINO_MODES = [
    ("plain", []),
    ("generation", ["--for-generation"]),
    ("fp16", ["--dtype", "float16"]),
    ("fp16-generation", ["--dtype", "float16", "--for-generation"]),
    ("int4", ["--quantize", "int4"]),
    ("int8-generation", ["--quantize", "int8", "--for-generation"]),
]

EXECUTORCH_MODES = [
    ("plain", []),
    ("dynamic", ["--for-generation"]),
    ("multi", ["--for-generation", "--multi-token-decode"]),
    ("static", ["--for-generation", *CACHE.split()]),
    ("static-positions", ["--for-generation", *CACHE.split(), "--inputs", "input_ids,cache_position"]),
    ("static-portable", ["--for-generation", *CACHE.split(), "--executorch-backend", "portable"]),
    ("static-kernels", ["--for-generation", *CACHE.split(), "--executorch-kernels", "hfexport"]),
    ("static-no-alloc", ["--for-generation", *CACHE.split(), "--no-alloc-graph-io"]),
    ("int4-static", ["--quantize", "int4", "--for-generation", *CACHE.split()]),
]
PT2_MODES = [
    ("plain", []),
    ("dynamic", ["--for-generation"]),
    ("multi", ["--for-generation", "--multi-token-decode"]),
    ("static", ["--for-generation", *CACHE.split()]),
    ("int8", ["--quantize", "int8"]),
]


def binary() -> str:
    return os.environ.get("HFEXPORT_BIN") or str(ROOT / ".venv" / "bin" / "hfexport")


def digest_dir(d: Path) -> dict[str, str]:
    out = {}
    for p in sorted(d.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(d))] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return out


def canonical_onnx(d: Path) -> dict[str, str]:
    """Digests of the ONNX graphs with value and node names replaced by their order of appearance:
    equal when two exports compute the same graph under other intermediate names."""
    import onnx

    out = {}
    for p in sorted(d.glob("*.onnx")):
        m = onnx.load(str(p), load_external_data=False)
        g = m.graph
        keep = {v.name for v in [*g.input, *g.output]} | {t.name for t in g.initializer if t.data_location == 1}
        names: dict[str, str] = {}
        rename = lambda n: n if (not n or n in keep) else names.setdefault(n, f"t{len(names)}")  # noqa: E731
        for t in g.initializer:
            t.name = rename(t.name)
        for n in g.node:
            n.name = ""
            n.input[:] = [rename(i) for i in n.input]
            n.output[:] = [rename(o) for o in n.output]
        del g.value_info[:]
        out[p.name + " (canonical)"] = hashlib.sha256(m.SerializeToString()).hexdigest()[:16]
    return out


# Encoder exports: the base model's feature extraction in every format, and the masked-LM
# checkpoint's fill-mask head.
ENCODER_MODES = [(fmt, "plain", []) for fmt in ("onnx", "openvino", "executorch", "pt2")] + [
    ("onnx", "fill-mask", ["--task", "fill-mask"]), ("onnx", "fp16", ["--dtype", "float16"])]


def encoder_cases(models: Path):
    """(name, model folder, head) per encoder family, built with the encoder tests' builder."""
    from test_encoders import BERT, FAMILIES, build_encoder

    for model_type in FAMILIES:
        for head in ("Model", "ForMaskedLM"):
            folder = models / f"encoder-{model_type}-{head}"
            if not (folder / "config.json").exists():
                build_encoder(folder, BERT, head=head, model_type=model_type)
            yield f"encoder-{model_type}-{head}", folder, head


def export_digest(model_dir: Path, out: Path, fmt: str, args: list[str], args_canonical: bool) -> dict:
    proc = subprocess.run([binary(), "export", str(model_dir), "-o", str(out), "--format", fmt, *args],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()}
    return digest_dir(out) | (canonical_onnx(out) if args_canonical else {})


def run(models: Path, work: Path, args_canonical: bool = False, model_types: set[str] | None = None) -> dict[str, dict]:
    result = {}
    for name, model_dir, head in encoder_cases(models) if not model_types else []:
        for fmt, mode, args in ENCODER_MODES:
            if (head == "ForMaskedLM") != (mode == "fill-mask"):
                continue
            result[f"{name} {fmt} {mode}"] = export_digest(model_dir, work / f"{name}-{fmt}-{mode}", fmt, args,
                                                           args_canonical)
    for case in cases():
        if model_types and case.model_type not in model_types:
            continue
        model_dir = models / case.name
        if not (model_dir / "config.json").exists():
            build_tiny_model(model_dir, case.model_type, {**TINY_CONFIG, **case.overrides})
        full = "generation" in case.suites or "quantized" in case.suites
        modes = ([("onnx", m, a) for m, a in ONNX_MODES] + [("openvino", m, a) for m, a in OPENVINO_MODES]
                 + [("executorch", m, a) for m, a in EXECUTORCH_MODES] + [("pt2", m, a) for m, a in PT2_MODES])
        if not full:  # forward-only cases: the plain graphs
            modes = [m for m in modes if m[1].startswith("plain")]
        for fmt, mode, args in modes:
            result[f"{case.name} {fmt} {mode}"] = export_digest(model_dir, work / f"{case.name}-{fmt}-{mode}", fmt,
                                                                args, args_canonical)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="write the digest here")
    p.add_argument("--compare", type=Path, help="compare against this digest")
    p.add_argument("--models", type=Path, default=Path(tempfile.gettempdir()) / "hfexport-digest-models")
    p.add_argument("--canonical", action="store_true",
                   help="also digest each .onnx with intermediate names canonicalised (compare with --ignore-raw)")
    p.add_argument("--ignore-raw", action="store_true", help="compare only the canonical ONNX digests and the data files")
    p.add_argument("--model-types", help="only these decoder model types (comma-separated; no encoders)")
    args = p.parse_args()
    model_types = set(args.model_types.split(",")) if args.model_types else None
    with tempfile.TemporaryDirectory() as work:
        result = run(args.models, Path(work), args.canonical, model_types)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    if not args.compare:
        return 0
    before = json.loads(args.compare.read_text())
    changed = 0
    for key in sorted(set(before) | set(result)):
        old, new = before.get(key), result.get(key)
        if old == new:
            continue
        if old is None or new is None:
            changed += 1
            print(f"{key}: {'new' if old is None else 'gone'}")
            continue
        differing = [f for f in sorted(set(old) | set(new)) if old.get(f) != new.get(f)
                     and not (args.ignore_raw and (f.endswith((".onnx", ".xml")) or f == "export.json"))]
        changed += bool(differing)
        for f in sorted(set(old) | set(new)):
            if args.ignore_raw and (f.endswith(".onnx") or f.endswith(".xml") or f == "export.json"):
                continue
            if old.get(f) != new.get(f):
                print(f"{key}: {f}: {old.get(f)} -> {new.get(f)}")
    print(f"{len(result)} exports, {changed} differ")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
