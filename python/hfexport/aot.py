"""`python -m hfexport.aot ARCHIVE PROGRAM PACKAGE`: compiles one program of a .pt2 archive with
AOTInductor (torch._inductor, CPU) into the package PACKAGE, for `hfexport export --format pt2
--aot` (the C++ exporter runs it before the export is committed; runners then load the package).
Errors are one line on stderr and exit status 1."""

from __future__ import annotations

import sys
from pathlib import Path


def hinted_inputs(program):
    """(args, kwargs) of zero tensors whose symbolic dims take their hints (the values the
    program's own shape metadata gives them), for AOTInductor, which wants example inputs."""
    import torch
    import torch.utils._pytree as pytree

    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    leaves = []
    for name in program.graph_signature.user_inputs:
        value = placeholders[name].meta["val"]
        shape = [d if isinstance(d, int) else int(d.node.hint) for d in value.shape]
        leaves.append(torch.zeros(shape, dtype=value.dtype))
    return pytree.tree_unflatten(leaves, program.call_spec.in_spec)


def compile_program(archive: Path, program_name: str, package: Path) -> None:
    import torch

    from .torch_runner import load_programs, register_cache_pytrees

    register_cache_pytrees()
    program = load_programs(archive)[program_name]
    if program.example_inputs is None:
        program.example_inputs = hinted_inputs(program)
    torch._inductor.aoti_compile_and_package(program, package_path=str(package))


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m hfexport.aot ARCHIVE PROGRAM PACKAGE", file=sys.stderr)
        return 2
    try:
        compile_program(Path(argv[0]), argv[1], Path(argv[2]))
    except Exception as e:  # noqa: BLE001 - one line for the exporter's error
        text = str(e).strip().splitlines()
        print(f"{type(e).__name__}: {text[0] if text else ''}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
