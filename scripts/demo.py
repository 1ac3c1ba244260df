"""The main job end to end: build a tiny random Qwen3 checkpoint with transformers, export it with
hfexport, run the ONNX model in onnxruntime and print the largest logit difference from
transformers eager on a left-padded batch."""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from transformers import AutoConfig, AutoModelForCausalLM


def build_checkpoint(path: Path) -> AutoModelForCausalLM:
    torch.manual_seed(0)
    config = AutoConfig.for_model(
        "qwen3", vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=128,
        tie_word_embeddings=True)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    model.save_pretrained(path)
    return model


def left_padded_batch(lengths, vocab, seed=1):
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(0, vocab, (len(lengths), width), generator=g)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, width - n:] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hfexport", default=shutil.which("hfexport") or "hfexport")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, out = Path(tmp) / "tiny-qwen3", Path(tmp) / "tiny-qwen3-onnx"
        model = build_checkpoint(ckpt)
        subprocess.run([args.hfexport, "export", str(ckpt), "-o", str(out)], check=True)
        print(subprocess.run([args.hfexport, "inspect", str(out)], check=True, capture_output=True, text=True).stdout)
        ids, mask, positions = left_padded_batch([12, 9, 5], model.config.vocab_size)
        with torch.no_grad():
            expected = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.numpy()
        session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
        (logits,) = session.run(["logits"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                                             "position_ids": positions.numpy()})
        diff = float(np.abs(logits - expected)[mask.numpy().astype(bool)].max())
        print(f"max |onnxruntime - transformers| over real tokens: {diff:.3e}")
        return 0 if diff <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
