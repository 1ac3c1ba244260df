"""DINOv2 (issue 32), against transformers on every backend: Dinov2Model (last_hidden_state,
pooler_output) and Dinov2ForImageClassification (logits over [CLS] ++ the patches' mean), at the
config's image size and at the image processor's crop size, where the learned positions are
resampled (bicubic, down and up, non-square); layer scale, the GELU MLP or SwiGLU."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_clean_error

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=28, patch_size=7,
            layerscale_value=0.5)
# crop size given to the image processor (None: no preprocessor_config.json, the config's size)
SIZES = {"config-size": None, "smaller": (14, 14), "larger-non-square": (42, 35)}


def build(folder, head: str, swiglu: bool = False, crop=None):
    import transformers

    torch.manual_seed(0)
    config = transformers.Dinov2Config(**TINY, use_swiglu_ffn=swiglu, num_labels=3)
    config._attn_implementation = "eager"
    model = getattr(transformers, "Dinov2" + head)(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and "layernorm" not in name or name.endswith("layernorm.weight"):
                p.uniform_(0.5, 1.5) if name.endswith("weight") else p.normal_(0.0, 0.1)
            elif "lambda1" in name:
                p.uniform_(0.2, 1.0)
            else:
                p.normal_(0.0, 0.3 if "embeddings" in name else 0.1)
    model.eval().save_pretrained(folder)
    if crop is not None:
        transformers.BitImageProcessor(size={"shortest_edge": max(crop)}, crop_size={"height": crop[0], "width": crop[1]},
                                       do_center_crop=True).save_pretrained(folder)
    return model


def check(out, model, pixels, names) -> float:
    from hfexport import ExportedModel

    got = ExportedModel(out)(pixel_values=pixels)
    with torch.no_grad():
        result = model(pixel_values=torch.from_numpy(pixels))
    err = 0.0
    for name in names:
        expected = getattr(result, name).numpy()
        value = np.asarray(got[name], np.float32)
        assert value.shape == expected.shape, name
        np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-4, err_msg=name)
        err = max(err, float(np.abs(value - expected).max()))
    return err


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("fmt", FORMATS)
def test_base_model_matches_transformers(tmp_path, export_model, support_matrix, fmt, size):
    crop = SIZES[size]
    model = build(tmp_path / "model", "Model", crop=crop)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    height, width = crop or (TINY["image_size"],) * 2
    spec = json.loads((out / "export.json").read_text())["components"]["model"]["inputs"][0]
    assert spec["name"] == "pixel_values" and spec["shape"][2:] == [height, width]
    pixels = np.random.default_rng(3).standard_normal((1 if fmt == "executorch" else 2, 3, height, width)).astype(np.float32)
    err = check(out, model, pixels, ["last_hidden_state", "pooler_output"])
    support_matrix.record("dinov2", f"feature-extraction ({size})", True, err, backend=fmt)


@pytest.mark.parametrize("swiglu", [False, True], ids=["mlp", "swiglu"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_classifier_matches_transformers(tmp_path, export_model, support_matrix, fmt, swiglu):
    model = build(tmp_path / "model", "ForImageClassification", swiglu=swiglu, crop=(21, 21))
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    assert json.loads((out / "export.json").read_text())["task"] == "image-classification"
    pixels = np.random.default_rng(4).standard_normal((1 if fmt == "executorch" else 2, 3, 21, 21)).astype(np.float32)
    err = check(out, model, pixels, ["logits"])
    support_matrix.record("dinov2", f"image-classification ({'swiglu' if swiglu else 'mlp'})", True, err, backend=fmt)


def test_refusals(tmp_path, run_hfexport):
    build(tmp_path / "model", "Model", crop=(20, 20))  # not whole patches of 7
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out), out, "preprocessor_config.json", "7")
    build(tmp_path / "good", "Model")
    assert_clean_error(run_hfexport("export", tmp_path / "good", "-o", out, "--task", "fill-mask"), out, "dinov2")
    assert_clean_error(run_hfexport("export", tmp_path / "good", "-o", out, "--for-generation"), out, "decode loop")
    config = json.loads((tmp_path / "good" / "config.json").read_text())
    (tmp_path / "good" / "config.json").write_text(json.dumps({**config, "mlp_ratio": 1e300}))  # no integer overflow
    assert_clean_error(run_hfexport("export", tmp_path / "good", "-o", out), out, "mlp_ratio")
