"""`hfexport generate OUT_DIR --input-ids 1,2,3 [...]`: greedy (or sampled) generation on an
export; prints the new token ids, space-separated, on one line. The C++ `hfexport` program hands
this subcommand to `python -m hfexport.generate`."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from .manifest import DECODE, ManifestError
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


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="hfexport generate", description=__doc__)
    p.add_argument("out_dir")
    p.add_argument("--input-ids", required=True, help="comma-separated prompt token ids")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--ignore-eos", action="store_true", help="do not stop at eos tokens")
    p.add_argument("--do-sample", action="store_true")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args(argv)
    try:
        sampler = Sampler(args.do_sample, args.temperature, args.top_k, args.top_p, args.seed)
        runner = open_runner(args.out_dir)
        ids = parse_ids(args.input_ids)
        vocab_limit = runner.manifest.component(DECODE)["outputs"][0]["shape"][-1]
        if ids.min() < 0 or ids.max() >= vocab_limit:
            raise GenerationError(f"--input-ids: token ids must be in [0, {vocab_limit})")
        tokens = generate(runner, ids, max_new_tokens=args.max_new_tokens, sampler=sampler,
                          ignore_eos=args.ignore_eos)
    except (GenerationError, ManifestError, ValueError) as e:
        print(f"hfexport: error: {e}", file=sys.stderr)
        return 1
    print(" ".join(str(int(t)) for t in tokens[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
