"""A reference of Pillow 13.0.0's 8-bit resize (src/libImaging/Resample.c, read from its sdist),
for porting image preprocessing to C++ (docs/notes/image-preprocessing-cpp.md). Not part of the
package: `python docs/notes/pillow_resample_reference.py` checks it against the installed Pillow."""
import math, numpy as np
from PIL import Image
def bilinear(x): x = abs(x); return 1.0 - x if x < 1.0 else 0.0
def bicubic(x):
    a = -0.5; x = abs(x)
    if x < 1.0: return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0: return (((x - 5) * x + 8) * x - 4) * a
    return 0.0
def sinc(x): return 1.0 if x == 0.0 else math.sin(x * math.pi) / (x * math.pi)
def lanczos(x): return sinc(x) * sinc(x / 3) if -3.0 <= x < 3.0 else 0.0
FILTERS = {2: (bilinear, 1.0), 3: (bicubic, 2.0), 1: (lanczos, 3.0)}
def coeffs(insize, outsize, filt):
    f, sup = FILTERS[filt]
    scale = insize / outsize; fs = max(scale, 1.0); support = sup * fs
    out = []
    for xx in range(outsize):
        center = (xx + 0.5) * scale
        xmin = max(0, int(center - support + 0.5)); xmax = min(insize, int(center + support + 0.5)) - xmin
        w = [f((x + xmin - center + 0.5) / fs) for x in range(xmax)]
        s = sum(w); w = [v / s for v in w] if s != 0 else w
        k = [int(-0.5 + v * (1 << 22)) if v < 0 else int(0.5 + v * (1 << 22)) for v in w]
        out.append((xmin, np.array(k, np.int64)))
    return out
def apass(img, cs):  # resample axis 1 of [rows, cols, ch] uint8
    out = np.empty((img.shape[0], len(cs), img.shape[2]), np.uint8)
    for xx, (xmin, k) in enumerate(cs):
        s = (1 << 21) + np.tensordot(img[:, xmin:xmin + len(k)].astype(np.int64), k, axes=([1], [0]))
        out[:, xx] = np.clip(s >> 22, 0, 255)
    return out
def resize(img, w, h, filt):
    """[H, W, 3] uint8 -> [h, w, 3], as Image.resize((w, h), filt): 13.0's pass order, each pass
    rounding to uint8."""
    H, W = img.shape[:2]
    vertical = lambda im: apass(im.transpose(1, 0, 2), coeffs(H, h, filt)).transpose(1, 0, 2)
    if (H - h) > 0 and (H - h) > 2 * (W - w):  # height shrinks more than twice the width
        img = vertical(img) if H != h else img
        return apass(img, coeffs(W, w, filt)) if W != w else img
    img = apass(img, coeffs(W, w, filt)) if W != w else img
    return vertical(img) if H != h else img


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    for _ in range(200):
        H, W, h, w = (int(v) for v in rng.integers(4, 120, 4))
        img = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
        for filt in (1, 2, 3):
            ref = np.array(Image.fromarray(img).resize((w, h), resample=filt))
            assert np.array_equal(ref, resize(img, w, h, filt)), ((H, W), (h, w), filt)
    print("identical to Pillow", Image.__version__ if hasattr(Image, "__version__") else "")
