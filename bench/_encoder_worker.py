"""bench_encoders.py's inference worker: one graph, one runtime, one batch size, in a fresh process.

  RUNTIME MODEL_FILE BATCH SEQUENCE REPEATS [THREADS]

RUNTIME: onnxruntime (an InferenceSession with its default options: ORT_ENABLE_ALL graph
optimizations, the CPU provider) or openvino (core.compile_model on CPU with
INFERENCE_PRECISION_HINT f32). Inputs are random token ids in the vocabulary, every token
attended, token types 0; whatever the graph declares of input_ids / attention_mask /
token_type_ids is fed. Prints JSON on its last line: the median seconds per call of REPEATS
timed calls after two warm-up calls, and the session's load time.
"""
import json
import statistics
import sys
import time

import numpy as np


def feeds(names, batch: int, sequence: int, vocab: int = 30522) -> dict:
    rng = np.random.default_rng(0)
    ids = rng.integers(5, vocab, (batch, sequence), dtype=np.int64)
    all_inputs = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    unknown = [n for n in names if n not in all_inputs]
    if unknown:
        raise SystemExit(f"the graph takes inputs this worker does not make: {unknown}")
    return {n: all_inputs[n] for n in names}


def onnxruntime_call(path: str, batch: int, sequence: int, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    inputs = feeds([i.name for i in session.get_inputs()], batch, sequence)
    return lambda: session.run(None, inputs)


def openvino_call(path: str, batch: int, sequence: int, threads: int):
    import openvino as ov

    config = {"INFERENCE_PRECISION_HINT": "f32"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = threads
    compiled = ov.Core().compile_model(path, "CPU", config)
    request = compiled.create_infer_request()
    inputs = feeds([i.get_any_name() for i in compiled.inputs], batch, sequence)
    return lambda: request.infer(inputs)


def main() -> None:
    runtime, path, batch, sequence, repeats = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    threads = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    start = time.perf_counter()
    call = {"onnxruntime": onnxruntime_call, "openvino": openvino_call}[runtime](path, batch, sequence, threads)
    load_s = time.perf_counter() - start
    for _ in range(2):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    print(json.dumps({"seconds": statistics.median(times), "load_s": load_s}))


if __name__ == "__main__":
    main()
