"""Seed corpora for the fuzz targets, all real-shaped: what transformers writes (configs of every
family the tests cover, generation configs, safetensors shards and a sharded index of tiny random
models) and what hfexport writes (export.json of each format and mode). Also the checkpoint the
config and index targets build on.

  python tests/fuzz/make_seeds.py WORK_DIR HFEXPORT_BIN
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "parity"))

from conftest import TINY_CONFIG, build_tiny_model  # noqa: E402
from tiny_configs import cases  # noqa: E402

SMALL = dict(TINY_CONFIG, vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
             num_attention_heads=2, num_key_value_heads=1)
# (flags) of the exports whose export.json seed the manifest target.
EXPORTS = {"onnx": [], "onnx-generation": ["--for-generation"], "onnx-static": ["--for-generation", "--static-cache",
           "--max-cache-len", "32"], "openvino": ["--format", "openvino", "--for-generation"],
           "pt2": ["--format", "pt2", "--for-generation"], "executorch": ["--format", "executorch", "--for-generation",
                                                                          "--static-cache", "--max-cache-len", "32"]}


def main() -> int:
    work, hfexport = Path(sys.argv[1]), sys.argv[2]
    seeds = {t: work / "seeds" / t for t in ("safetensors", "sharded_index", "config", "generation_config",
                                             "manifest")}
    for d in seeds.values():
        d.mkdir(parents=True, exist_ok=True)
    ckpt, _ = build_tiny_model(work / "checkpoint", "llama", SMALL, max_shard_size="4KB")
    shutil.copy(ckpt / "model.safetensors.index.json", seeds["sharded_index"] / "index.json")
    shutil.copy(ckpt / "generation_config.json", seeds["generation_config"] / "llama.json")
    shutil.copy(ckpt / "config.json", seeds["config"] / "checkpoint.json")  # the one that exports
    for i, shard in enumerate(sorted(ckpt.glob("*.safetensors"))[:4]):
        shutil.copy(shard, seeds["safetensors"] / f"llama-{i}.safetensors")
    from transformers import AutoConfig

    for case in cases("forward"):  # every family and variant the parity tests cover, as transformers writes it
        AutoConfig.for_model(case.model_type, **{**TINY_CONFIG, **case.overrides}).save_pretrained(work / "config")
        shutil.copy(work / "config" / "config.json", seeds["config"] / f"{case.model_type}-{case.variant}.json")
    for name, eos in (("eos-list", [2, 7]), ("eos-none", None)):
        gen = json.loads((ckpt / "generation_config.json").read_text())
        gen["eos_token_id"] = eos
        (seeds["generation_config"] / f"{name}.json").write_text(json.dumps(gen, indent=2))
    for name, flags in EXPORTS.items():
        out = work / "exports" / name
        proc = subprocess.run([hfexport, "export", str(ckpt), "-o", str(out), *flags], capture_output=True, text=True)
        if proc.returncode == 0:  # a format whose runtime is absent here gives no seed
            shutil.copy(out / "export.json", seeds["manifest"] / f"{name}.json")
    shutil.rmtree(work / "exports", ignore_errors=True)
    print({t: len(list(d.iterdir())) for t, d in seeds.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
