"""`hfexport generate OUT_DIR --input-ids 1,2,3 [...]`: greedy (or sampled) generation on an
export; prints the new token ids, space-separated, on one line. With `--prompt TEXT` (and
`--chat`, `--system TEXT`) the prompt is tokenized with the export's own tokenizer (through its
chat template with --chat) and the new text is streamed as it is generated, up to eos. A
vision-language export (LLaVA, Gemma 3) takes `--image FILE` (repeatable): each image's placeholder
in the prompt (<image>, <start_of_image>) is expanded as the model's processor does (placeholders are
added before the text where the prompt has fewer than images; with --chat, as {"type": "image"}
entries of the message); with --input-ids, each image token id stands for one image. The C++
`hfexport` program hands this subcommand to `python -m hfexport.generate` (text mode always)."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from .manifest import ManifestError
from .runner import GenerationError, generate, open_runner
from .sampling import Sampler


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, like every other hfexport error
        print(f"hfexport: error: generate: {message}", file=sys.stderr)
        sys.exit(2)


def parse_ids(text: str) -> np.ndarray:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise GenerationError(f"--input-ids: '{text}' is not a comma-separated list of integers") from None
    if not ids:
        raise GenerationError("--input-ids: no token ids given")
    return np.array([ids], dtype=np.int64)


def image_options(pairs: list[str]) -> dict:
    """--image-option KEY=VALUE pairs: each VALUE read as JSON (true, 8, [1, 2]), else as a string."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise GenerationError(f"--image-option: '{pair}' is not KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="hfexport generate", description=__doc__)
    p.add_argument("out_dir")
    prompt = p.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--input-ids", help="comma-separated prompt token ids")
    prompt.add_argument("--prompt", help="prompt text, tokenized with the export's tokenizer")
    p.add_argument("--chat", action="store_true", help="render --prompt through the tokenizer's chat template")
    p.add_argument("--system", help="a system message before the prompt (with --chat)")
    p.add_argument("--image", action="append", default=[], help="an image file for a vision-language export (repeatable)")
    p.add_argument("--image-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an image processor setting for this call, as the processor takes it (images_kwargs; "
                        "VALUE as JSON, else a string), e.g. do_pan_and_scan=true (Gemma 3's crops; repeatable)")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--ignore-eos", action="store_true", help="do not stop at eos tokens")
    p.add_argument("--do-sample", action="store_true")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stats", action="store_true", help="print prefill and decode times to stderr")
    args = p.parse_args(argv)
    if args.input_ids is not None and (args.chat or args.system is not None):
        p.error("--chat and --system apply to --prompt")
    try:
        sampler = Sampler(args.do_sample, args.temperature, args.top_k, args.top_p, args.seed)
        runner = open_runner(args.out_dir)
        if hasattr(runner, "encode"):
            return generate_text2text(runner, args, sampler)
        if args.image_option and not args.image:
            raise GenerationError("--image-option applies to the --image files")
        if args.image and not hasattr(runner, "set_images"):
            raise GenerationError(f"--image: {args.out_dir} has no vision encoder")
        images: dict = {}  # the vision encoder's inputs for --image (and what the prompt's expansion needs)
        if hasattr(runner, "set_images"):
            from .vision import image_inputs

            images = image_inputs(args.out_dir, args.image, image_options(args.image_option)) if args.image else {}
            runner.set_images(images.get("pixel_values"), images.get("image_grid_thw"))
        clock = StepClock()
        if args.prompt is not None:
            status = generate_text(runner, args, sampler, clock, images)
            if args.stats:
                print(f"hfexport: {clock.summary()}", file=sys.stderr)
            return status
        ids = expand_image_tokens(runner, parse_ids(args.input_ids), images)
        logits = next(o for o in runner.manifest.component(runner.STEP)["outputs"] if o["name"] == "logits")
        vocab_limit = logits["shape"][-1]
        if ids.min() < 0 or ids.max() >= vocab_limit:
            raise GenerationError(f"--input-ids: token ids must be in [0, {vocab_limit})")
        clock.start(ids.shape[1])
        tokens = generate(runner, ids, max_new_tokens=args.max_new_tokens, sampler=sampler,
                          ignore_eos=args.ignore_eos, on_tokens=clock.tick)
    except (GenerationError, ManifestError, ValueError) as e:
        print(f"hfexport: error: {e}", file=sys.stderr)
        return 1
    print(" ".join(str(int(t)) for t in tokens[0]))
    if args.stats:
        print(f"hfexport: {clock.summary()}", file=sys.stderr)
    return 0


def expand_image_tokens(runner, ids: np.ndarray, images: dict) -> np.ndarray:
    """--input-ids: the i-th image token id -> as many image tokens as image i has features (as the
    processor expands its placeholder); one image token per image."""
    if not hasattr(runner, "image_token_id"):
        return ids
    from .vlm import features_per_image

    if "rows" in images or any(images.get("num_crops") or []):
        raise GenerationError("--input-ids with --image: this model's processor writes text around each image tile "
                              "or crop; give --prompt (or the processor's input_ids without --image)")
    features = features_per_image(runner.manifest, images) if images else []
    row = ids[0]
    slots = np.flatnonzero(row == runner.image_token_id)
    if len(slots) != len(features):
        raise GenerationError(f"the prompt has {len(slots)} image placeholders for {len(features)} images")
    pieces = np.split(row, slots)
    expanded = [pieces[0]] + [np.concatenate([np.full(n, runner.image_token_id), piece[1:]])
                              for n, piece in zip(features, pieces[1:])]
    return np.concatenate(expanded).astype(np.int64)[None]


class StepClock:
    """--stats: the prompt's call (to its first token) and every step after it, as the C++
    runners report them."""

    def start(self, prompt_tokens: int) -> None:
        self.prompt_tokens, self.stamps = prompt_tokens, [time.perf_counter()]

    def tick(self, _tokens=None) -> None:
        self.stamps.append(time.perf_counter())

    def summary(self) -> str:
        prefill = self.stamps[1] - self.stamps[0] if len(self.stamps) > 1 else 0.0
        steps = max(len(self.stamps) - 2, 0)
        decode = self.stamps[-1] - self.stamps[1] if steps else 0.0
        rate = steps / decode if decode > 0 else 0.0
        return (f"prefill {self.prompt_tokens} tokens in {prefill * 1e3:.1f} ms; decode {steps} steps in "
                f"{decode:.3f} s, {rate:.2f} tok/s")


def generate_text2text(runner, args, sampler: Sampler) -> int:
    """An encoder-decoder's generation (T5): the prompt (text or ids) is the encoder's input; the
    decoder's new tokens are printed (their text with --prompt)."""
    import json
    from pathlib import Path

    from .seq2seq import text2text_generate
    from .text import TextCodec

    if runner.manifest.data.get("task") != "text2text-generation":
        raise GenerationError(f"{args.out_dir}: a speech recognition export: `hfexport transcribe OUT_DIR AUDIO` runs it")
    if args.chat or args.system is not None:
        raise GenerationError("--chat and --system apply to decoder-only chat models")
    codec = TextCodec(args.out_dir) if args.prompt is not None else None
    ids = np.array([codec.encode(args.prompt)], np.int64) if codec else parse_ids(args.input_ids)
    gen_path = Path(args.out_dir) / "generation_config.json"
    gen = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
    out = text2text_generate(runner, ids, None, gen, args.max_new_tokens, sampler=sampler,
                             eos_token_ids=[] if args.ignore_eos else None)
    print(codec.decode(out[0]) if codec else " ".join(str(int(t)) for t in out[0, 1:]))
    return 0


def generate_text(runner, args, sampler: Sampler, clock: StepClock, images: dict) -> int:
    """Streams the text of the new tokens to stdout as each becomes final; a newline at the end."""
    from .text import TextCodec, TextStream

    codec = TextCodec(args.out_dir)
    if hasattr(runner, "set_images"):  # a vision-language export: the processor's prompt format
        from .vlm import encode_image_prompt

        row = encode_image_prompt(runner.manifest, codec, args.prompt, images, args.chat, args.system)
    else:
        row = codec.encode_prompt(args.prompt, chat=args.chat, system=args.system)
    ids = np.array([row], dtype=np.int64)
    if ids.shape[1] == 0:
        raise GenerationError("--prompt: the text tokenizes to no tokens")
    stream = TextStream(codec)
    clock.start(ids.shape[1])

    def show(tokens: np.ndarray) -> None:
        clock.tick()
        text = stream.feed(int(tokens[0]))
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()

    generate(runner, ids, max_new_tokens=args.max_new_tokens, sampler=sampler, ignore_eos=args.ignore_eos,
             on_tokens=show)
    rest = stream.text()[stream.emitted:]  # an incomplete character at the very end
    sys.stdout.write(rest + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
