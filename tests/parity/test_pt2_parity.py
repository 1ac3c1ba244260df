"""PyTorch program parity: the tiny random models of the ONNX parity suite exported with
``--format pt2`` (written without torch), loaded with ``torch.export.load`` and run as
``ep.module()(**inputs)``, against transformers eager on the same left-padded batch."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from test_onnx_parity import BASE, CASES, hf_logits, make_inputs, masked_max_abs_diff

torch = pytest.importorskip("torch")

PT2_FP32_TOL = 1e-5
INPUT_NAMES = ("input_ids", "attention_mask", "position_ids")


def load_program(path: Path):
    """torch.export.load, failing with the deserializer's own error (load() hides it behind a
    generic one and retries a legacy format)."""
    from torch.export.pt2_archive._package import load_pt2

    load_pt2(str(path))
    logging.getLogger("torch.export").setLevel(logging.ERROR)
    return torch.export.load(str(path))


def pt2_logits(program, inputs) -> np.ndarray:
    feeds = {name: torch.from_numpy(a) for name, a in zip(INPUT_NAMES, inputs)}
    with torch.no_grad():
        logits = program.module()(**feeds).logits
    return logits.numpy()


def check_pt2_export(out: Path, vocab: int) -> None:
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["format"] == "pt2"
    comp = manifest["components"]["model"]
    assert comp["file"] == "model.pt2" and (out / "model.pt2").is_file()
    assert [i["name"] for i in comp["inputs"]] == list(INPUT_NAMES)
    assert comp["outputs"] == [{"name": "logits", "dtype": "float32", "shape": ["batch", "sequence", vocab]}]
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "export.json", "generation_config.json",
                                                      "model.pt2"]
    check_archive(out / "model.pt2")


def check_archive(path: Path) -> None:
    """A valid zip for an independent reader (CRCs included), records under one root folder,
    every record's data 64-byte aligned as torch's own writer lays it out."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None
        infos = z.infolist()
        assert {i.filename.split("/")[0] for i in infos} == {"model"}
        assert all(i.compress_type == zipfile.ZIP_STORED for i in infos)
        with open(path, "rb") as f:
            for i in infos:
                f.seek(i.header_offset)
                header = f.read(30)
                name_len, extra_len = struct.unpack("<HH", header[26:30])
                assert (i.header_offset + 30 + name_len + extra_len) % 64 == 0, i.filename


def run_case(model_type, variant, model_dir, model, out, export_model, support_matrix, *extra, tol=PT2_FP32_TOL):
    try:
        export_model(model_dir, out, "--format", "pt2", *extra)
        vocab = model.config.vocab_size
        check_pt2_export(out, vocab)
        inputs = make_inputs(vocab)
        program = load_program(out / "model.pt2")
        diff = masked_max_abs_diff(pt2_logits(program, inputs), hf_logits(model, inputs), inputs[1])
        assert diff <= tol, f"{model_type}/{variant} as .pt2: max abs diff {diff:.3e} > {tol:.0e}"
    except Exception as e:
        support_matrix.record(model_type, variant, False, None, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}",
                              backend="pt2")
        raise
    support_matrix.record(model_type, variant, True, diff, backend="pt2")
    return program, inputs


@pytest.mark.parametrize("model_type,variant,overrides", CASES, ids=[f"{m}-{v}" for m, v, _ in CASES])
def test_pt2_parity_fp32(model_type, variant, overrides, tmp_path, make_tiny_model, export_model, support_matrix):
    model_dir, model = make_tiny_model(tmp_path / "hf", model_type, {**BASE, **overrides})
    run_case(model_type, variant, model_dir, model, tmp_path / "out", export_model, support_matrix)


@pytest.mark.parametrize("model_type", ["llama", "gemma3_text", "gpt_oss", "qwen3_moe"])
def test_pt2_program_decomposes_and_round_trips(model_type, tmp_path, make_tiny_model, export_model,
                                                support_matrix):
    """The program is a real ExportedProgram: ``run_decompositions()`` retraces it to core ATen
    (every node's schema, kinds and symbolic shapes checked by torch), and torch's own
    ``torch.export.save`` / ``load`` round trip of it gives the same logits."""
    model_dir, model = make_tiny_model(tmp_path / "hf", model_type, dict(BASE))
    program, inputs = run_case(model_type, "round-trip", model_dir, model, tmp_path / "out", export_model,
                               support_matrix)
    expected = pt2_logits(program, inputs)
    core = program.run_decompositions()
    assert masked_max_abs_diff(pt2_logits(core, inputs), expected, inputs[1]) <= PT2_FP32_TOL
    saved = tmp_path / "resaved.pt2"
    torch.export.save(program, str(saved))
    assert masked_max_abs_diff(pt2_logits(load_program(saved), inputs), expected, inputs[1]) == 0.0


def test_pt2_bf16_checkpoint(tmp_path, make_tiny_model, export_model, support_matrix):
    from transformers import AutoModelForCausalLM

    model_dir, _ = make_tiny_model(tmp_path / "hf", "qwen3", dict(BASE), dtype="bfloat16")
    reference = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager",
                                                     dtype=torch.float32).eval()
    run_case("qwen3", "bf16-checkpoint-to-fp32", model_dir, reference, tmp_path / "out", export_model,
             support_matrix)


@pytest.mark.parametrize("mode_args", [["--for-generation"], ["--for-generation", "--multi-token-decode"],
                                       ["--for-generation", "--static-cache", "--max-cache-len", "32"]],
                         ids=["dynamic", "multi-token", "static"])
def test_pt2_generation_programs_decompose(mode_args, tmp_path, make_tiny_model, export_model):
    """Every program of a generation archive retraces to core ATen: the derived total length of a
    dynamic cache (past + query) and the in-place static-cache writes (a user-input mutation once
    functionalized) are consistent to torch's shape checks."""
    from torch.export.pt2_archive._package import load_pt2
    from transformers import DynamicCache
    from transformers.exporters.exporter_dynamo import register_pytree_node

    register_pytree_node(DynamicCache)  # a dynamic cache's presents come back as one, as transformers' do
    model_dir, _ = make_tiny_model(tmp_path / "hf", "qwen3", dict(BASE))
    out = export_model(model_dir, tmp_path / "out", "--format", "pt2", *mode_args)
    programs = load_pt2(str(out / "decode.pt2")).exported_programs
    assert set(programs) == ({"model", "prefill"} if mode_args == ["--for-generation"] else {"model"})
    for name, program in programs.items():
        specs = program.run_decompositions().graph_signature.output_specs
        mutated = [s for s in specs if s.kind.name == "USER_INPUT_MUTATION"]
        assert len(mutated) == (2 * BASE["num_hidden_layers"] if "--static-cache" in mode_args else 0), name


def test_pt2_float16(tmp_path, make_tiny_model, export_model, support_matrix):
    """--dtype float16: weights and compute in float16, against the float32 reference."""
    model_dir, model = make_tiny_model(tmp_path / "hf", "llama", dict(BASE))
    run_case("llama", "float16", model_dir, model, tmp_path / "out", export_model, support_matrix, "--dtype", "float16",
             tol=2e-2)
