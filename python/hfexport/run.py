"""`hfexport run OUT_DIR --text "..." [--text ...]` / `--image FILE [--image ...] [--text LABEL ...]`:
runs an encoder export on texts or images and prints one JSON object per input. Texts are tokenized with
the export's own tokenizer, and prints one JSON object per text, by the export's task:
sentence-similarity {"embedding"}, feature-extraction {"last_hidden_state", "pooler_output"},
text-classification {"label", "score"} (softmax, or sigmoid for one label or multi-label),
token-classification {"tokens": [{"token", "label", "score"}]} (special tokens left out),
fill-mask {"masks": [[{"token", "score"}] top --top-k per mask token]}. Images (hfexport.vision:
Pillow decodes, the preprocessor_config.json's steps as transformers' image processors apply them):
image-classification {"labels": [{"label", "score"}] top --top-k, softmax}, a vision tower's
feature-extraction {"image_embeds" or "pooler_output"}, zero-shot-image-classification with the
candidate labels as --text {"scores": [{"text", "score"}] best first: softmax over the labels for
CLIP, each label's sigmoid for SigLIP}. The C++ `hfexport`
program hands this subcommand to `python -m hfexport.run`."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from .manifest import ManifestError
from .text import TextCodec, TextError

TASKS = ("sentence-similarity", "feature-extraction", "text-classification", "token-classification", "fill-mask")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, like every other hfexport error
        print(f"hfexport: error: run: {message}", file=sys.stderr)
        sys.exit(2)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _labels(config: dict) -> dict[int, str]:
    return {int(k): v for k, v in (config.get("id2label") or {}).items()}


def _bound(model, axis: int, fallback: int | None) -> tuple[int | None, bool]:
    """The first input's size on `axis`: (its bound, whether it is fixed)."""
    size = model.manifest["components"]["model"]["inputs"][0]["shape"][axis]
    if isinstance(size, int):
        return size, True
    return model.manifest.get("dims", {}).get(size, {}).get("max", fallback), False


def _batches(model, texts: list[str]) -> list[list[str]]:
    """Texts per call: up to the batch bound; a fixed batch (a .pte's plain forward: 1) is filled
    up with copies of the last text, whose results are dropped."""
    size, fixed = _bound(model, 0, 64)
    chunks = [texts[i:i + size] for i in range(0, len(texts), size)]
    if fixed and chunks and len(chunks[-1]) < size:
        chunks[-1] = chunks[-1] + [chunks[-1][-1]] * (size - len(chunks[-1]))
    return chunks


def run_texts(model, codec: TextCodec, texts: list[str], top_k: int = 5) -> list[dict]:
    """What `hfexport run` prints, one dict per text."""
    task = model.manifest.get("task")
    if task not in TASKS:
        raise ValueError(f"the export's task is {task!r}: run takes {', '.join(TASKS)} exports")
    config = json.loads((model.directory / "config.json").read_text()) if (model.directory / "config.json").is_file() else {}
    labels = _labels(config)
    inputs = [i["name"] for i in model.manifest["components"]["model"]["inputs"]]
    results = []
    # sentence-transformers truncates at its max_seq_length and may lowercase first.
    st_file = model.directory / "sentence_bert_config.json"
    st_config = json.loads(st_file.read_text()) if st_file.is_file() else {}
    max_length, fixed = _bound(model, 1, None)
    if st_config.get("max_seq_length"):
        max_length = min(max_length, st_config["max_seq_length"]) if max_length else st_config["max_seq_length"]
    for batch in _batches(model, texts):
        if st_config.get("do_lower_case"):
            batch = [t.lower() for t in batch]
        encoded = codec.encode_batch(batch, max_length, pad_to=max_length if fixed else None)
        feeds = {k: v for k, v in encoded.items() if k in inputs}
        out = {k: np.asarray(v, np.float32) for k, v in model(**feeds).items()}
        mask = feeds["attention_mask"] if "attention_mask" in feeds else np.ones_like(feeds["input_ids"])
        for row, text in enumerate(texts[len(results):len(results) + len(batch)] or batch):
            real = mask[row].astype(bool)
            result: dict = {"text": text}
            if task == "sentence-similarity":
                result["embedding"] = out["sentence_embedding"][row].tolist()
            elif task == "feature-extraction":
                result["last_hidden_state"] = out["last_hidden_state"][row][real].tolist()
                if "pooler_output" in out:
                    result["pooler_output"] = out["pooler_output"][row].tolist()
            elif task == "text-classification":
                logits = out["logits"][row]
                multi = config.get("problem_type") == "multi_label_classification" or logits.shape[-1] == 1
                scores = _sigmoid(logits) if multi else _softmax(logits)
                best = int(scores.argmax())
                result.update(label=labels.get(best, f"LABEL_{best}"), score=float(scores[best]))
            elif task == "token-classification":
                scores = _softmax(out["logits"][row])
                special = {i for i, t in codec.tokenizer.get_added_tokens_decoder().items() if t.special}
                result["tokens"] = [
                    {"token": codec.token(t), "label": labels.get(int(s.argmax()), f"LABEL_{int(s.argmax())}"),
                     "score": float(s.max())}
                    for t, s, keep in zip(feeds["input_ids"][row], scores, real) if keep and int(t) not in special]
            else:  # fill-mask
                mask_token = codec.special_token("mask_token")
                mask_id = codec.tokenizer.token_to_id(mask_token) if mask_token else None
                if mask_id is None:
                    raise TextError(f"{model.directory}: the tokenizer has no mask token")
                positions = np.flatnonzero((feeds["input_ids"][row] == mask_id) & real)
                result["masks"] = []
                for p in positions:
                    probs = _softmax(out["logits"][row, p])
                    top = np.argsort(-probs, kind="stable")[:top_k]
                    result["masks"].append([{"token": codec.token(t), "score": float(probs[t])} for t in top])
            results.append(result)
    return results[:len(texts)]


# Zero-shot models trained with a sigmoid loss (each label scored alone; texts padded to max_length).
SIGMOID_SCORED = ("siglip", "siglip2")
IMAGE_TASKS = ("image-classification", "feature-extraction", "zero-shot-image-classification")


def run_images(model, images: list[str], texts: list[str] | None, top_k: int = 5) -> list[dict]:
    """What `hfexport run --image` prints, one dict per image."""
    from .vision import image_inputs

    task = model.manifest.get("task")
    inputs = [i["name"] for i in model.manifest["components"]["model"]["inputs"]]
    if task not in IMAGE_TASKS or "pixel_values" not in inputs:
        raise ValueError(f"the export's task is {task!r} over {inputs}: --image takes an image model's export "
                         f"({', '.join(IMAGE_TASKS)})")
    if task == "zero-shot-image-classification" and not texts:
        raise ValueError("zero-shot-image-classification scores the images against candidate labels: give them as --text")
    config = json.loads((model.directory / "config.json").read_text())
    sigmoid = config.get("model_type") in SIGMOID_SCORED
    feeds = {k: v for k, v in image_inputs(model.directory, images).items() if k in inputs}
    if task == "zero-shot-image-classification":
        codec = TextCodec(model.directory)
        longest, _ = _bound(model, 1, None)
        # SigLIP's processor pads every text to max_length and returns no mask: every position counts.
        feeds.update({k: v for k, v in codec.encode_batch(texts, longest, pad_to=longest if sigmoid else None).items()
                      if k in inputs})
        if sigmoid:
            feeds["attention_mask"] = np.ones_like(feeds["input_ids"])
    out = {k: np.asarray(v, np.float32) for k, v in model(**feeds).items()}
    results = []
    for row, image in enumerate(images):
        result: dict = {"image": str(image)}
        if task == "image-classification":
            scores = _softmax(out["logits"][row])
            labels = _labels(config)
            top = np.argsort(-scores, kind="stable")[:top_k]
            result["labels"] = [{"label": labels.get(int(i), f"LABEL_{int(i)}"), "score": float(scores[i])} for i in top]
        elif task == "feature-extraction":
            name = next(n for n in ("image_embeds", "pooler_output", "last_hidden_state") if n in out)
            result[name] = out[name][row].tolist()
        else:
            logits = out["logits_per_image"][row]
            scores = _sigmoid(logits) if sigmoid else _softmax(logits)
            order = np.argsort(-scores, kind="stable")
            result["scores"] = [{"text": texts[i], "score": float(scores[i])} for i in order]
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    from .exporters import ExportedModel
    from .vision import ImageError

    p = _Parser(prog="hfexport run", description=__doc__)
    p.add_argument("out_dir")
    p.add_argument("--text", action="append", help="a text to run, or a candidate label for --image (repeatable)")
    p.add_argument("--image", action="append", help="an image file to run (repeatable)")
    p.add_argument("--top-k", type=int, default=5,
                   help="fill-mask: candidates per mask token; image-classification: labels per image (default 5)")
    args = p.parse_args(argv)
    if not args.text and not args.image:
        p.error("give --text or --image")
    try:
        model = ExportedModel(args.out_dir)
        results = (run_images(model, args.image, args.text, args.top_k) if args.image
                   else run_texts(model, TextCodec(args.out_dir), args.text, args.top_k))
        for result in results:
            print(json.dumps(result))
    except (ManifestError, TextError, ImageError, ValueError, OSError) as e:
        print(f"hfexport: error: run: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
