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
