"""hfexport's native image resize (hfexport._core.resize_image, src/image/resample.cpp) against
Pillow's Image.resize, which transformers' image processors call: byte for byte for every filter it
implements, up and down on each axis, one axis kept, the pass order Pillow 13.0 picks either way,
RGB and grayscale; hfexport.vision's resize takes that path; bad input is refused in one line."""

from __future__ import annotations

import numpy as np
import PIL
import pytest
from PIL import Image

pytestmark = pytest.mark.skipif(PIL.__version__.split(".")[:2] != ["13", "0"],
                                reason="the native resize follows Pillow 13.0's rules (hfexport.vision uses "
                                       "Pillow's own resize with another version)")

# (height, width) -> (height, width): each axis up, down or kept; the height shrinking by more and
# by less than twice the width's shrink (Pillow 13.0 runs the vertical pass first in the former).
SIZES = [((45, 70), (32, 32)), ((30, 80), (64, 24)), ((33, 33), (224, 224)), ((100, 37), (37, 100)),
         ((64, 40), (64, 19)), ((64, 40), (20, 40)), ((68, 71), (59, 68)), ((62, 82), (41, 69)),
         ((1, 9), (5, 2)), ((448, 300), (224, 224))]


@pytest.mark.parametrize("resample", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_resize_matches_pillow(resample, mode):
    from hfexport import _core

    rng = np.random.default_rng(resample)
    for (h, w), (out_h, out_w) in SIZES:
        pixels = rng.integers(0, 256, (h, w, 3) if mode == "RGB" else (h, w), dtype=np.uint8)
        expected = np.asarray(Image.fromarray(pixels, mode).resize((out_w, out_h), resample=resample))
        got = _core.resize_image(pixels if mode == "RGB" else pixels[:, :, None], out_h, out_w, resample)
        np.testing.assert_array_equal(got if mode == "RGB" else got[:, :, 0], expected,
                                      err_msg=f"{(h, w)} -> {(out_h, out_w)}, filter {resample}")


def test_vision_resize_takes_the_native_path(monkeypatch):
    """hfexport.vision.resize (every processor's resize) calls the core for RGB / L images."""
    from hfexport import _core, vision

    calls = []
    native = _core.resize_image
    monkeypatch.setattr(_core, "resize_image", lambda *a: calls.append(a[1:]) or native(*a))
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 50, 3), dtype=np.uint8))
    out = vision.resize(image, 20, 12, 3)
    assert calls == [(12, 20, 3)]
    np.testing.assert_array_equal(np.asarray(out), np.asarray(image.resize((20, 12), resample=3)))


def test_refusals():
    from hfexport import ExportError, _core

    image = np.zeros((4, 4, 3), np.uint8)
    for args, what in (((image, 0, 4, 2), "sides"), ((image, 4, 4, 0), "resample 0"),
                       ((image[:, :, 0], 4, 4, 2), "[height, width, channels]")):
        with pytest.raises(ExportError, match=what):
            _core.resize_image(*args)
