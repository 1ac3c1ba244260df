"""IR ops no model family uses yet (the next kinds' building blocks), lowered by every backend and
run in its runtime against torch: tiny hand-built graphs y = op(x) over x [2, sequence, 3]
(tests/tools/test_graphs.cpp). `softplus_decomposed` exports the reference decomposition."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hand_built import FORMATS, Component, write_graphs


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    return write_graphs(tmp_path_factory.mktemp("ir-ops"))


def inputs(case: str, sequence: int) -> np.ndarray:
    rng = np.random.default_rng(sequence)
    if case == "mod":  # negative and positive integers: the result takes the divisor's sign
        return rng.integers(-12, 12, (2, sequence, 3)).astype(np.int64)
    x = rng.standard_normal((2, sequence, 3)).astype(np.float32) * 4
    if case == "log":
        return np.abs(x) + 0.1
    if case.startswith("softplus"):  # far past torch's threshold (20) and exp's float32 range
        x[0, 0] = [-100.0, 25.0, 100.0]
    return x


REFERENCE = {
    "softplus": lambda x: torch.nn.functional.softplus(x),
    "softplus_decomposed": lambda x: torch.nn.functional.softplus(x),
    "log": torch.log,
    "cumsum": lambda x: torch.cumsum(x, 1),
    "mod": lambda x: torch.remainder(x, 5),
}


def sine_weights(*shape: int) -> torch.Tensor:
    """The tool's weights: sin(i) / 2 over the flat index."""
    return torch.from_numpy((np.sin(np.arange(np.prod(shape), dtype=np.float64)) / 2).astype(np.float32).reshape(shape))


def ramp(n: int) -> torch.Tensor:
    return torch.from_numpy((np.float32(0.1) * np.arange(n, dtype=np.float32)))


def causal_conv(x):
    y = torch.nn.functional.conv1d(torch.nn.functional.pad(x, (2, 0)), sine_weights(4, 1, 3), ramp(4), groups=4)
    return y * x


CONVS = {
    "causal_conv": ((4,), causal_conv),
    "strided_conv": ((3,), lambda x: torch.nn.functional.conv1d(x, sine_weights(5, 3, 3), ramp(5), stride=2, padding=1)),
    "patch_conv": ((3, 8, 8), lambda x: torch.nn.functional.conv2d(x, sine_weights(4, 3, 4, 4), ramp(4), stride=4)),
}
REFERENCE["pad"] = lambda x: torch.nn.functional.pad(x, (1, 0, 2, 1), value=0.5)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(CONVS))
def test_convolution_matches_torch(written, case, fmt):
    model = Component(fmt, written[case][fmt], "model")
    dims, reference = CONVS[case]
    lengths = [None] if len(dims) > 1 else [4, 9, 16]  # the 1-D ones over a symbolic length
    for length in lengths:
        shape = (2, *dims) if length is None else (2, *dims, length)
        x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
        y = model({"x": x})["y"]
        expected = reference(torch.from_numpy(x)).numpy()
        assert y.shape == expected.shape, (y.shape, expected.shape)
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5, err_msg=f"{case} length {length}")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(REFERENCE))
def test_op_matches_torch(written, case, fmt):
    model = Component(fmt, written[case][fmt], "model")
    for sequence in (1, 5):
        x = inputs(case, sequence)
        y = model({"x": x})["y"]
        expected = REFERENCE[case](torch.from_numpy(x)).numpy()
        assert y.shape == expected.shape and y.dtype == expected.dtype
        np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6, err_msg=f"{case} sequence {sequence}")


@pytest.mark.parametrize("fmt", FORMATS)
def test_attention_with_additive_bias(written, fmt):
    """Grouped attention (4 query heads, 2 kv heads), a mask and a bias added to the scores."""
    model = Component(fmt, written["attention_bias"][fmt], "model")
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 4, 3, 8), (1, 2, 5, 8), (1, 2, 5, 8)))
    mask = np.tril(np.ones((3, 5), bool), k=2)[None, None]
    bias = rng.standard_normal((1, 4, 3, 5)).astype(np.float32) * 3
    y = model({"q": q, "k": k, "v": v, "mask": mask, "bias": bias})["y"]
    kk, vv = (torch.from_numpy(t).repeat_interleave(2, dim=1) for t in (k, v))
    scores = torch.from_numpy(q) @ kk.transpose(-1, -2) / np.sqrt(8.0) + torch.from_numpy(bias)
    scores = scores.masked_fill(~torch.from_numpy(mask), torch.finfo(torch.float32).min)
    expected = (torch.softmax(scores, -1) @ vv).numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
