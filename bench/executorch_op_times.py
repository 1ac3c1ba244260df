"""Where a decode step of a static-cache `.pte` spends its time, op by op, from ExecuTorch's own
event tracer (ETDump): the runtime's kernels and, inside XNNPACK delegates, XNNPACK's operators.

  .venv/bin/python bench/executorch_op_times.py hfexport OUT_DIR      # our --static-cache export
  bench/.venv-optimum/bin/python bench/executorch_op_times.py optimum OUT_DIR   # optimum-executorch's

Runs bench_executorch.py's prompt and greedy steps and prints, per op name, the
per-step time summed over its occurrences (medians over the steps). The tracer adds its own cost
to every event: compare programs with this script, not with bench_executorch's tok/s. A tool for
reading profiles, not a test.
"""

from __future__ import annotations

import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_executorch import MAX_CACHE_LEN, PROMPT, STEPS  # noqa: E402 - the benchmark's own loop


def run_steps(kind: str, program: Path, etdump: Path) -> float:
    import torch
    from executorch.extension.pybindings import portable_lib

    if kind == "optimum":
        from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401 - llama::custom_sdpa
        from executorch.kernels import quantized  # noqa: F401
    # The loop's own torch ops (the mask, argmax) would otherwise wake OpenMP threads that spin on
    # the cores XNNPACK's threads need: whole blocks of layers then read 40 % slower in the trace.
    torch.set_num_threads(1)
    if kind == "hfexport":
        from hfexport.executorch_runner import load_hfexport_kernels

        load_hfexport_kernels()  # for programs exported with --executorch-kernels hfexport
    module = portable_lib._load_for_executorch(str(program), enable_etdump=True, debug_buffer_size=0)
    torch.manual_seed(0)
    prompt = torch.randint(0, 1000, (1, PROMPT))
    slots = torch.arange(MAX_CACHE_LEN)

    def step(ids, positions):
        if kind == "optimum":  # forward(input_ids, cache_position)
            return module.forward([ids, positions])[0]
        mask = (slots[None, :] <= positions[:, None])[None, None]  # forward(input_ids, attention_mask, position_ids)
        return module.forward([ids, mask, positions[None]])[0]

    if kind == "hfexport":  # as our runners do at load: one call at the last slot sizes XNNPACK's buffers
        step(torch.tensor([[0]]), torch.tensor([MAX_CACHE_LEN - 1]))
    token = int(step(prompt, torch.arange(PROMPT))[0, -1].argmax())
    start = time.perf_counter()
    for i in range(STEPS):
        token = int(step(torch.tensor([[token]]), torch.tensor([PROMPT + i]))[0, -1].argmax())
    seconds = time.perf_counter() - start
    module.write_etdump_result_to_file(str(etdump))
    return STEPS / seconds


def per_step_ms(etdump: Path) -> dict[str, float]:
    import numpy as np
    from executorch.devtools import Inspector

    totals: dict[str, float] = collections.defaultdict(float)
    for block in Inspector(etdump_path=str(etdump)).event_blocks:
        if block.name != "Execute":
            continue
        for event in block.events:
            if event.perf_data is not None and len(event.perf_data.raw) >= STEPS:
                totals[event.name] += float(np.median(event.perf_data.raw[-STEPS:]))
    return totals


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in ("hfexport", "optimum"):
        print(__doc__)
        return 2
    kind, out = sys.argv[1], Path(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        etdump = Path(tmp) / "run.etdp"
        tok_s = run_steps(kind, out / "model.pte", etdump)
        totals = per_step_ms(etdump)
    print(f"{kind}: {tok_s:.1f} tok/s under the tracer; ms per decode step:")
    for name, ms in sorted(totals.items(), key=lambda kv: -kv[1]):
        if ms >= 0.01:
            print(f"  {ms:8.3f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
