"""ViT (issue 32): pixel_values through the patch-embedding convolution, the [CLS] token, learned
positions and pre-norm layers, against transformers on every backend: ViTForImageClassification's
logits (image-classification) and ViTModel's last_hidden_state and pooler_output
(feature-extraction), for configs with and without qkv biases, non-square channel counts and
another activation; a batch of two images. Bad inputs get one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_clean_error

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
            patch_size=8)
VARIANTS = {
    "base": dict(),
    "no-qkv-bias-4-channels-gelu-tanh": dict(qkv_bias=False, num_channels=4, hidden_act="gelu_pytorch_tanh",
                                             layer_norm_eps=1e-6),
}


def build(folder, variant: str, head: str):
    import transformers

    torch.manual_seed(0)
    config = transformers.ViTConfig(**TINY, **VARIANTS[variant], num_labels=5)
    config._attn_implementation = "eager"
    model = getattr(transformers, "ViT" + head)(config)
    with torch.no_grad():  # norms and the tokens' embeddings away from their identity defaults
        for name, p in model.named_parameters():
            if "layernorm" in name:
                p.uniform_(0.5, 1.5) if name.endswith("weight") else p.normal_(0.0, 0.1)
            else:
                p.normal_(0.0, 0.3 if "embeddings" in name else 0.1)
    model.eval().save_pretrained(folder)
    return model


def images(model, batch: int = 2) -> np.ndarray:
    c = model.config
    return np.random.default_rng(4).standard_normal((batch, c.num_channels, c.image_size, c.image_size)).astype(np.float32)


def check(out, model, pixels, outputs) -> float:
    from hfexport import ExportedModel

    got = ExportedModel(out)(pixel_values=pixels)
    with torch.no_grad():
        result = model(pixel_values=torch.from_numpy(pixels))
    err = 0.0
    for name in outputs:
        expected = getattr(result, name).numpy()
        value = np.asarray(got[name], np.float32)
        assert value.shape == expected.shape, name
        np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-4, err_msg=name)
        err = max(err, float(np.abs(value - expected).max()))
    return err


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_image_classification_matches_transformers(tmp_path, export_model, support_matrix, fmt, variant):
    model = build(tmp_path / "model", variant, "ForImageClassification")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "image-classification"
    err = check(out, model, images(model, 1 if fmt == "executorch" else 2), ["logits"])
    support_matrix.record("vit", f"image-classification ({variant})", True, err, backend=fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_base_model_with_pooler(tmp_path, export_model, support_matrix, fmt):
    model = build(tmp_path / "model", "base", "Model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    assert json.loads((out / "export.json").read_text())["task"] == "feature-extraction"
    err = check(out, model, images(model, 1 if fmt == "executorch" else 2), ["last_hidden_state", "pooler_output"])
    support_matrix.record("vit", "feature-extraction", True, err, backend=fmt)


def test_classifier_checkpoint_as_feature_extractor(tmp_path, export_model):
    """--task feature-extraction over a classifier checkpoint: ViTModel's output, the head unread."""
    model = build(tmp_path / "model", "base", "ForImageClassification")
    out = export_model(tmp_path / "model", tmp_path / "out", "--task", "feature-extraction")
    pixels = images(model)
    from hfexport import ExportedModel

    got = ExportedModel(out)(pixel_values=pixels)
    assert "pooler_output" not in got
    with torch.no_grad():
        expected = model.vit(pixel_values=torch.from_numpy(pixels)).last_hidden_state.numpy()
    np.testing.assert_allclose(got["last_hidden_state"], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("args,edit,mentions", [
    (["--task", "text-generation"], None, ["vit", "image-classification"]),
    (["--for-generation"], None, ["decode loop"]),
    ([], {"patch_size": 7}, ["patch_size", "image_size"]),
    ([], {"num_attention_heads": 5}, ["num_attention_heads"]),
    ([], {"hidden_act": "swish-ish"}, ["hidden_act"]),
])
def test_refusals(tmp_path, run_hfexport, args, edit, mentions):
    build(tmp_path / "model", "base", "ForImageClassification")
    if edit:
        config = json.loads((tmp_path / "model" / "config.json").read_text())
        config.update(edit)
        (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out, *args), out, *mentions)


def test_missing_patch_embedding(tmp_path, run_hfexport):
    import safetensors.torch as st

    build(tmp_path / "model", "base", "ForImageClassification")
    tensors = st.load_file(tmp_path / "model" / "model.safetensors")
    del tensors["vit.embeddings.patch_embeddings.projection.weight"]
    st.save_file(tensors, tmp_path / "model" / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out), out,
                       "vit.embeddings.patch_embeddings.projection.weight")


# -- images in ---------------------------------------------------------------------------------

def image_files(folder, rng_seed: int = 8) -> list:
    """A non-square RGB PNG, a grayscale one and an RGBA one (transparency: composited onto white)."""
    from PIL import Image

    rng = np.random.default_rng(rng_seed)
    paths = []
    for i, (mode, shape) in enumerate((("RGB", (45, 70, 3)), ("L", (64, 40)), ("RGBA", (33, 33, 4)))):
        path = folder / f"image{i}.png"
        Image.fromarray((rng.random(shape) * 255).astype(np.uint8), mode).save(path)
        paths.append(path)
    return paths


PROCESSORS = {
    "vit": ("ViTImageProcessor", dict(size={"height": 32, "width": 32})),
    "clip": ("CLIPImageProcessor", dict(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})),
    "siglip": ("SiglipImageProcessor", dict(size={"height": 32, "width": 32})),
}


@pytest.mark.parametrize("kind", list(PROCESSORS))
def test_pixel_values_match_the_image_processor(tmp_path, kind):
    """hfexport.vision's preprocessing (Pillow decode and resize, then crop, rescale, normalize)
    against the transformers image processor (its Pillow backend) saved beside the checkpoint."""
    import transformers
    from PIL import Image

    from hfexport.vision import pixel_values

    cls, kwargs = PROCESSORS[kind]
    processor = getattr(transformers, cls)(**kwargs)
    processor.save_pretrained(tmp_path)
    for path in image_files(tmp_path):
        image = Image.open(path)
        if image.mode != "RGB" and not processor.do_convert_rgb:
            continue  # ViT's processor does not convert: it refuses grayscale and RGBA (ours converts them)
        expected = processor(image, return_tensors="np").pixel_values
        np.testing.assert_allclose(pixel_values(tmp_path, [path]), expected, rtol=0, atol=1e-5)


def test_run_classifies_image_files(tmp_path, export_model, run_hfexport):
    """`hfexport run OUT --image FILE`: the labels and scores transformers gives for the same file."""
    import transformers
    from PIL import Image

    model = build(tmp_path / "model", "base", "ForImageClassification")
    processor = transformers.ViTImageProcessor(size={"height": 32, "width": 32})
    processor.save_pretrained(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out")
    paths = image_files(tmp_path)[:1] * 2  # RGB (ViT's processor converts nothing)
    proc = run_hfexport("run", out, *[a for p in paths for a in ("--image", p)], "--top-k", "3")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(lines) == len(paths)
    for path, line in zip(paths, lines):
        pixels = processor(Image.open(path), return_tensors="pt").pixel_values
        with torch.no_grad():
            probs = torch.softmax(model(pixel_values=pixels).logits[0], -1).numpy()
        top = np.argsort(-probs, kind="stable")[:3]
        assert [entry["label"] for entry in line["labels"]] == [model.config.id2label[int(i)] for i in top]
        np.testing.assert_allclose([entry["score"] for entry in line["labels"]], probs[top], atol=1e-5)
    assert_clean_error(run_hfexport("run", out, "--image", tmp_path / "missing.png"), None, "missing.png")
    (tmp_path / "junk.png").write_bytes(b"not an image")
    assert_clean_error(run_hfexport("run", out, "--image", tmp_path / "junk.png"), None, "junk.png")
