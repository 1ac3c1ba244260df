"""Each state update policy beyond the decoder caches (replace, ring, write-once), lowered by each
backend and run in its own runtime: tiny hand-built graphs (tests/tools/test_graphs.cpp)
written through every backend's passes and writer, called twice, against NumPy.

- replace: h' = 0.5 h + x, y = 2 h' (recurrent state: the runtime's variable / buffer, or the
  caller's past/present pair);
- ring: rows written at position_ids mod 4 into a 4-slot ring, y = the ring (the second call wraps);
- write-once: an encoder computes the state (2 e), a decoder step reads it (y = x * state).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hand_built import FORMATS, Component, feed_state, write_graphs


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    return write_graphs(tmp_path_factory.mktemp("state-policies"))


def rng_array(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("fmt", FORMATS)
def test_replace(written, fmt):
    case = written["replace"][fmt]
    step = Component(fmt, case, "decode")
    batch = case["batch"]
    state_in, state_out = step.state_input("past_ssm.0"), step.state_output("past_ssm.0")
    state = np.zeros((batch, 3), np.float32)
    h = np.zeros((batch, 3), np.float32)
    for call in range(3):
        x = rng_array(call, batch, 3)
        result = step(feed_state(step, {"x": x}, "past_ssm.0", state, call == 0))
        h = 0.5 * h + x
        np.testing.assert_allclose(result["y"], 2 * h, rtol=1e-6, atol=1e-6, err_msg=f"call {call}")
        np.testing.assert_allclose(result["h"], h, rtol=1e-6, atol=1e-6, err_msg=f"call {call}")
        if state_out:
            state = result[state_out]
            np.testing.assert_allclose(state, h, rtol=1e-6, atol=1e-6)
        elif state_in:  # the caller's tensor, replaced in place (.pt2)
            np.testing.assert_allclose(step.arguments[state_in].numpy(), h, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fmt", FORMATS)
def test_ring(written, fmt):
    case = written["ring"][fmt]
    step = Component(fmt, case, "decode")
    batch = case["batch"]
    state_out = step.state_output("past_key_values.0.key")
    ring = np.zeros((batch, 1, 4, 2), np.float32)
    state = ring.copy()
    # 3 rows at positions 0..2, then 3 at 3..5 (slots 3, 0, 1: the ring wraps), then one at 6.
    for call, positions in enumerate([[0, 1, 2], [3, 4, 5], [6]]):
        x = rng_array(10 + call, batch, len(positions), 2)
        feeds = {"x": x, "position_ids": np.tile(np.array(positions, np.int64), (batch, 1))}
        result = step(feed_state(step, feeds, "past_key_values.0.key", state, call == 0))
        for i, p in enumerate(positions):
            ring[:, 0, p % 4] = x[:, i]
        np.testing.assert_array_equal(result["y"], ring, err_msg=f"call {call}")
        if state_out:
            state = result[state_out]
            np.testing.assert_array_equal(state, ring)


@pytest.mark.parametrize("fmt", FORMATS)
def test_write_once(written, fmt):
    case = written["write_once"][fmt]
    encoder, decoder = Component(fmt, case, "encoder"), Component(fmt, case, "decoder")
    name = "past_key_values.0.encoder.key"
    batch = case["batch"]
    assert encoder.state_input(name) is None and decoder.state_output(name) is None
    e = rng_array(20, batch, 3)
    encoded = encoder({"encoder_input": e})
    np.testing.assert_allclose(encoded["last_hidden_state"], e + 1, rtol=1e-6)
    cross = encoded[encoder.state_output(name)]
    np.testing.assert_allclose(cross, 2 * e, rtol=1e-6)
    for call in range(2):  # read unchanged by every step
        x = rng_array(21 + call, batch, 3)
        result = decoder({"x": x, decoder.state_input(name): cross})
        np.testing.assert_allclose(result["y"], x * 2 * e, rtol=1e-6, atol=1e-6)


STATIC = ["--for-generation", "--static-cache", "--max-cache-len", "32"]


@pytest.mark.parametrize("fmt,args", [
    ("onnx", ["--for-generation"]),
    ("onnx", STATIC),
    ("openvino", ["--for-generation"]),
    ("executorch", ["--for-generation"]),
    ("executorch", STATIC),
    ("pt2", STATIC),
], ids=["onnx-dynamic", "onnx-static", "openvino", "executorch-dynamic", "executorch-static", "pt2-static"])
def test_manifest_lists_each_components_states(tmp_path, make_tiny_model, export_model, fmt, args):
    """export.json lists every state of every component: kind, policy, and the input / output (or
    the runtime's variable) it travels through, which are the component's own."""
    from tiny_configs import TINY_CONFIG

    model_dir, _ = make_tiny_model(tmp_path / "model", "llama", dict(TINY_CONFIG))
    out = export_model(model_dir, tmp_path / "out", "--format", fmt, *args)
    manifest = json.loads((out / "export.json").read_text())
    layers = TINY_CONFIG["num_hidden_layers"]
    static = "--static-cache" in args
    for name, component in manifest["components"].items():
        states = component["states"]
        expected = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
        assert [s["name"] for s in states] == expected, name
        inputs = {t["name"] for t in component["inputs"]}
        outputs = {t["name"] for t in component["outputs"]}
        for s in states:
            assert s["kind"] == "key_value" and s["policy"] == ("slots" if static else "append"), s
            if "variable" in s:  # kept by the runtime (a variable, a method buffer): not an input or output
                assert fmt in ("openvino", "executorch") and not {s["name"], s["variable"]} & (inputs | outputs)
                assert "input" not in s and "output" not in s
                continue
            if name != "prefill":  # prefill starts the cache: no input for it
                assert s["input"] in inputs, s
            if fmt == "pt2" and static:  # the caller's tensor, updated in place: no output
                assert s.get("in_place") is True and "output" not in s, s
            else:
                assert s["output"] in outputs, s
