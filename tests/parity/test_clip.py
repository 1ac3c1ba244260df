"""CLIP and SigLIP (issue 32), against transformers on every backend: CLIPModel as
zero-shot-image-classification (logits_per_image, logits_per_text and the normalised text_embeds and
image_embeds, for 3 right-padded texts and 2 images); the towers alone: CLIPVisionModel /
...WithProjection (last_hidden_state, pooler_output or image_embeds) and CLIPTextModel /
...WithProjection (pooled at the eos: the largest id under the original eos_token_id 2, else the
first eos_token_id). SiglipModel the same way (its logit_bias; texts padded to max_length, as its
processor pads them, and right-padded), SiglipVisionModel with and without its attention-pooling
head, SiglipTextModel (pooled at the last position through its head). Bad inputs get one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_clean_error

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
TEXT = dict(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=16)
VISION = dict(hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=2, image_size=32,
              patch_size=8, hidden_act="gelu")
EOS = 98  # a checkpoint whose eos_token_id is its real eos (not the original 2)


def randomize(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "layrnorm" in name:
                p.uniform_(0.5, 1.5) if name.endswith("weight") else p.normal_(0.0, 0.1)
            elif name != "logit_scale":
                p.normal_(0.0, 0.3 if "embedding" in name else 0.1)
    return model.eval()


def build(folder, cls: str, text: dict | None = None):
    import transformers

    torch.manual_seed(0)
    text = {**TEXT, **(text or {})}
    if cls == "CLIPModel":
        config = transformers.CLIPConfig(text_config=text, vision_config=VISION, projection_dim=16)
    elif cls.startswith("CLIPVision"):
        config = transformers.CLIPVisionConfig(**VISION, projection_dim=16)
    else:
        config = transformers.CLIPTextConfig(**text, projection_dim=16)
    config._attn_implementation = "eager"
    model = randomize(getattr(transformers, cls)(config))
    model.save_pretrained(folder)
    return model


def texts(batch: int, eos: int | None = None):
    """Token ids right-padded (pad id 1) with their mask; each row ends with an eos when `eos` is given."""
    rng = np.random.default_rng(6)
    lengths = [9, 5, 7][:batch]
    ids = np.ones((batch, max(lengths)), np.int64)
    mask = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(3, TEXT["vocab_size"] - 2, size=n)
        if eos is not None:
            ids[row, n - 1] = eos
        mask[row, :n] = 1
    return ids, mask


def pixels(batch: int, channels: int = 3) -> np.ndarray:
    return np.random.default_rng(7).standard_normal((batch, channels, 32, 32)).astype(np.float32)


def compare(got: dict, result, names) -> float:
    err = 0.0
    for name in names:
        expected = getattr(result, name).detach().numpy()
        value = np.asarray(got[name], np.float32)
        assert value.shape == expected.shape, name
        np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-4, err_msg=name)
        err = max(err, float(np.abs(value - expected).max()))
    return err


@pytest.mark.parametrize("fmt", FORMATS)
def test_zero_shot_matches_transformers(tmp_path, export_model, support_matrix, fmt):
    from hfexport import ExportedModel

    model = build(tmp_path / "model", "CLIPModel")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    assert json.loads((out / "export.json").read_text())["task"] == "zero-shot-image-classification"
    single = fmt == "executorch"
    ids, mask = texts(1 if single else 3)
    images = pixels(1 if single else 2)
    got = ExportedModel(out)(input_ids=ids, attention_mask=mask, pixel_values=images)
    with torch.no_grad():
        result = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                       pixel_values=torch.from_numpy(images))
    err = compare(got, result, ["logits_per_image", "logits_per_text", "text_embeds", "image_embeds"])
    support_matrix.record("clip", "zero-shot-image-classification", True, err, backend=fmt)


@pytest.mark.parametrize("cls", ["CLIPVisionModel", "CLIPVisionModelWithProjection"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_vision_tower_matches_transformers(tmp_path, export_model, support_matrix, fmt, cls):
    from hfexport import ExportedModel

    model = build(tmp_path / "model", cls)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    images = pixels(1 if fmt == "executorch" else 2)
    with torch.no_grad():
        result = model(pixel_values=torch.from_numpy(images))
    names = ["last_hidden_state", "image_embeds" if cls.endswith("Projection") else "pooler_output"]
    err = compare(ExportedModel(out)(pixel_values=images), result, names)
    support_matrix.record("clip_vision_model", f"feature-extraction ({cls})", True, err, backend=fmt)


@pytest.mark.parametrize("cls,eos", [("CLIPTextModel", 2), ("CLIPTextModel", EOS), ("CLIPTextModelWithProjection", EOS)])
@pytest.mark.parametrize("fmt", FORMATS)
def test_text_tower_matches_transformers(tmp_path, export_model, support_matrix, fmt, cls, eos):
    from hfexport import ExportedModel

    model = build(tmp_path / "model", cls, {"eos_token_id": eos})
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    ids, mask = texts(1 if fmt == "executorch" else 3, eos=EOS if eos == EOS else None)
    with torch.no_grad():
        result = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    names = ["last_hidden_state", "text_embeds" if cls.endswith("Projection") else "pooler_output"]
    real = mask.astype(bool)
    got = ExportedModel(out)(input_ids=ids, attention_mask=mask)
    np.testing.assert_allclose(np.asarray(got["last_hidden_state"])[real], result.last_hidden_state.numpy()[real],
                               rtol=1e-4, atol=1e-4)
    err = compare(got, result, names[1:])
    support_matrix.record("clip_text_model", f"feature-extraction ({cls}, eos {eos})", True, err, backend=fmt)


@pytest.mark.parametrize("cls,args,edit,mentions", [
    ("CLIPModel", ["--task", "feature-extraction"], None, ["clip", "zero-shot-image-classification"]),
    ("CLIPModel", ["--for-generation"], None, ["decode loop"]),
    ("CLIPModel", [], {"vision_config": None}, ["vision_config"]),
    ("CLIPVisionModel", [], {"patch_size": 7}, ["patch_size"]),
    ("CLIPTextModel", [], {"hidden_act": "nope"}, ["hidden_act"]),
])
def test_refusals(tmp_path, run_hfexport, cls, args, edit, mentions):
    build(tmp_path / "model", cls)
    if edit:
        config = json.loads((tmp_path / "model" / "config.json").read_text())
        config.update(edit)
        (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out, *args), out, *mentions)


def test_missing_projection_weight(tmp_path, run_hfexport):
    import safetensors.torch as st

    build(tmp_path / "model", "CLIPModel")
    tensors = st.load_file(tmp_path / "model" / "model.safetensors")
    del tensors["visual_projection.weight"]
    st.save_file(tensors, tmp_path / "model" / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out), out, "visual_projection.weight")


SIGLIP_TEXT = dict(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                   max_position_embeddings=12, projection_size=24)  # = the vision width, as SiglipModel needs


def build_siglip(folder, cls: str, vision: dict | None = None):
    """A SigLIP model, or SigLIP 2's (`cls` starting with Siglip2: the NaFlex vision config)."""
    import transformers

    torch.manual_seed(0)
    family = "Siglip2" if cls.startswith("Siglip2") else "Siglip"
    base = SIGLIP2_VISION if family == "Siglip2" else {**VISION, "hidden_act": "gelu_pytorch_tanh"}
    vision = {**base, **(vision or {})}
    if cls == f"{family}Model":
        config = getattr(transformers, f"{family}Config")(text_config=SIGLIP_TEXT, vision_config=vision)
    elif cls == f"{family}VisionModel":
        config = getattr(transformers, f"{family}VisionConfig")(**vision)
    else:
        config = getattr(transformers, f"{family}TextConfig")(**SIGLIP_TEXT)
    config._attn_implementation = "eager"
    model = randomize(getattr(transformers, cls)(config))
    with torch.no_grad():
        if cls == f"{family}Model":
            model.logit_bias.fill_(-1.5)
    model.save_pretrained(folder)
    return model


def siglip_texts(batch: int, padded: bool):
    """max_length rows (the pad id filling each, as SiglipProcessor pads), or right-padded with a mask."""
    ids, mask = texts(batch)
    full = np.ones((batch, SIGLIP_TEXT["max_position_embeddings"]), np.int64)
    full[:, : ids.shape[1]] = ids
    return (full, np.ones_like(full)) if padded else (ids, mask)


@pytest.mark.parametrize("fmt", FORMATS)
def test_siglip_zero_shot_matches_transformers(tmp_path, export_model, support_matrix, fmt):
    from hfexport import ExportedModel

    model = build_siglip(tmp_path / "model", "SiglipModel")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    assert json.loads((out / "export.json").read_text())["task"] == "zero-shot-image-classification"
    single = fmt == "executorch"
    images = pixels(1 if single else 2)
    err = 0.0
    for padded in (True, False):
        ids, mask = siglip_texts(1 if single else 3, padded)
        got = ExportedModel(out)(input_ids=ids, attention_mask=mask, pixel_values=images)
        with torch.no_grad():
            result = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                           pixel_values=torch.from_numpy(images))
        err = max(err, compare(got, result, ["logits_per_image", "logits_per_text", "text_embeds", "image_embeds"]))
    support_matrix.record("siglip", "zero-shot-image-classification", True, err, backend=fmt)


def text_tower_error(tmp_path, export_model, fmt: str, cls: str) -> float:
    """A SigLIP (2) text tower against transformers on max_length texts: the largest difference."""
    from hfexport import ExportedModel

    text = build_siglip(tmp_path / "text", cls)
    out = export_model(tmp_path / "text", tmp_path / "text-out", "--format", fmt)
    ids, mask = siglip_texts(1 if fmt == "executorch" else 3, padded=True)
    with torch.no_grad():
        result = text(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    return compare(ExportedModel(out)(input_ids=ids, attention_mask=mask), result, ["last_hidden_state", "pooler_output"])


@pytest.mark.parametrize("head", [True, False], ids=["pooling-head", "no-head"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_siglip_towers_match_transformers(tmp_path, export_model, support_matrix, fmt, head):
    from hfexport import ExportedModel

    vision = build_siglip(tmp_path / "vision", "SiglipVisionModel", {"vision_use_head": head})
    out = export_model(tmp_path / "vision", tmp_path / "vision-out", "--format", fmt)
    images = pixels(1 if fmt == "executorch" else 2)
    with torch.no_grad():
        result = vision(pixel_values=torch.from_numpy(images))
    names = ["last_hidden_state"] + (["pooler_output"] if head else [])
    got = ExportedModel(out)(pixel_values=images)
    assert head or "pooler_output" not in got
    err = max(compare(got, result, names), text_tower_error(tmp_path, export_model, fmt, "SiglipTextModel"))
    support_matrix.record("siglip_vision_model", f"feature-extraction (head {head})", True, err, backend=fmt)


def test_siglip_refuses_mismatched_widths(tmp_path, run_hfexport):
    build_siglip(tmp_path / "model", "SiglipModel")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    config["text_config"]["projection_size"] = 20
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out), out, "projection_size", "hidden_size")


SIGLIP2_PROCESSOR = ("Siglip2ImageProcessorPil", dict(patch_size=4, max_num_patches=16))


@pytest.mark.parametrize("family", ["clip", "siglip", "siglip2"])
def test_run_zero_shot_on_image_files(tmp_path, export_model, run_hfexport, family):
    """`hfexport run OUT --image FILE --text LABEL ...`: each label's probability as transformers
    gives it for the same file and labels (CLIP: softmax over the labels; SigLIP and SigLIP 2:
    sigmoid; SigLIP 2's image resized to its own patch grid)."""
    import transformers
    from PIL import Image
    from tokenizers import Tokenizer, models, pre_tokenizers

    from test_vit import PROCESSORS, image_files

    builders = {"clip": lambda f: build(f, "CLIPModel"), "siglip": lambda f: build_siglip(f, "SiglipModel"),
                "siglip2": lambda f: build_siglip(f, "Siglip2Model")}
    model = builders[family](tmp_path / "model")
    cls, kwargs = SIGLIP2_PROCESSOR if family == "siglip2" else PROCESSORS[family]
    processor = getattr(transformers, cls)(**kwargs)
    processor.save_pretrained(tmp_path / "model")
    words = ["a", "cat", "dog", "photo", "of", "the", "[UNK]", "[PAD]"]
    tok = Tokenizer(models.WordLevel({w: i + 3 for i, w in enumerate(words)} | {"<pad>": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.enable_padding(pad_id=1, pad_token="<pad>")
    tok.save(str(tmp_path / "model" / "tokenizer.json"))
    (tmp_path / "model" / "tokenizer_config.json").write_text(json.dumps({"pad_token": "<pad>"}))
    out = export_model(tmp_path / "model", tmp_path / "out")
    labels = ["a photo of a cat", "a dog", "the photo of the dog"]
    path = image_files(tmp_path)[0]
    proc = run_hfexport("run", out, "--image", path, *[a for t in labels for a in ("--text", t)])
    assert proc.returncode == 0, proc.stderr
    scores = {s["text"]: s["score"] for s in json.loads(proc.stdout)["scores"]}
    sigmoid = family != "clip"
    pad_to = SIGLIP_TEXT["max_position_embeddings"] if sigmoid else None
    encoded = [tok.encode(t).ids for t in labels]
    width = pad_to or max(map(len, encoded))
    ids = np.array([e + [1] * (width - len(e)) for e in encoded], np.int64)
    mask = np.array([[1] * len(e) + [0] * (width - len(e)) for e in encoded], np.int64)
    if sigmoid:
        mask = np.ones_like(ids)  # padded to max_length, every position attended (its processor returns no mask)
    images = dict(processor(Image.open(path), return_tensors="pt"))
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                       **images).logits_per_image[0]
    expected = torch.sigmoid(logits) if sigmoid else torch.softmax(logits, -1)
    np.testing.assert_allclose([scores[t] for t in labels], expected.numpy(), atol=1e-5)
    assert_clean_error(run_hfexport("run", out, "--image", path), None, "--text")


# SigLIP 2 (NaFlex): a 4 x 4 learned position grid resized to each image's own patch grid.
SIGLIP2_VISION = dict(hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=2, patch_size=4,
                      num_patches=16, hidden_act="gelu_pytorch_tanh")


def naflex_patches(grids: list[tuple[int, int]], max_patches: int, patch_dim: int = 3 * 4 * 4) -> dict:
    """What Siglip2ImageProcessor returns for images of these patch grids: each image's patches
    (random pixels) padded to max_patches, its pixel_attention_mask (int32, as the processor's) and
    spatial_shapes."""
    rng = np.random.default_rng(8)
    values = np.zeros((len(grids), max_patches, patch_dim), np.float32)
    mask = np.zeros((len(grids), max_patches), np.int32)
    for row, (h, w) in enumerate(grids):
        values[row, : h * w] = rng.standard_normal((h * w, patch_dim))
        mask[row, : h * w] = 1
    return {"pixel_values": values, "pixel_attention_mask": mask, "spatial_shapes": np.array(grids, np.int64)}


# Grids smaller than the 4 x 4 position grid (downscaled: antialiased), larger (upscaled), mixed.
NAFLEX_CASES = {"16-patches": ([(3, 5), (2, 3)], 16), "40-patches": ([(5, 8), (6, 2)], 40)}


def torch_inputs(inputs: dict) -> dict:
    return {k: torch.from_numpy(v) for k, v in inputs.items()}


@pytest.mark.parametrize("fmt", FORMATS)
def test_siglip2_zero_shot_matches_transformers(tmp_path, export_model, support_matrix, fmt):
    from hfexport import ExportedModel

    model = build_siglip(tmp_path / "model", "Siglip2Model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    assert json.loads((out / "export.json").read_text())["task"] == "zero-shot-image-classification"
    single = fmt == "executorch"
    exported, err = ExportedModel(out), 0.0
    for grids, max_patches in NAFLEX_CASES.values():
        images = naflex_patches(grids[:1] if single else grids, max_patches)
        for padded in (True, False):
            ids, mask = siglip_texts(1 if single else 3, padded)
            got = exported(input_ids=ids, attention_mask=mask, **images)
            with torch.no_grad():
                result = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                               **torch_inputs(images))
            err = max(err, compare(got, result, ["logits_per_image", "logits_per_text", "text_embeds", "image_embeds"]))
    support_matrix.record("siglip2", "zero-shot-image-classification", True, err, backend=fmt)


@pytest.mark.parametrize("case", sorted(NAFLEX_CASES))
@pytest.mark.parametrize("head", [True, False], ids=["pooling-head", "no-head"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_siglip2_towers_match_transformers(tmp_path, export_model, support_matrix, fmt, head, case):
    """The vision tower at two patch budgets, each batch mixing a downscaled and an upscaled
    position grid (only the valid patches' states are compared: transformers' padding rows attend to
    the valid ones too, and are compared as well); the text tower as SigLIP's."""
    from hfexport import ExportedModel

    vision = build_siglip(tmp_path / "vision", "Siglip2VisionModel", {"vision_use_head": head})
    out = export_model(tmp_path / "vision", tmp_path / "vision-out", "--format", fmt)
    grids, max_patches = NAFLEX_CASES[case]
    images = naflex_patches(grids[:1] if fmt == "executorch" else grids, max_patches)
    with torch.no_grad():
        result = vision(**torch_inputs(images))
    got = ExportedModel(out)(**images)
    assert head or "pooler_output" not in got
    err = compare(got, result, ["last_hidden_state"] + (["pooler_output"] if head else []))
    if head:
        err = max(err, text_tower_error(tmp_path, export_model, fmt, "Siglip2TextModel"))
    support_matrix.record("siglip2_vision_model", f"feature-extraction (head {head}, {case})", True, err, backend=fmt)


def test_siglip2_refuses_a_position_table_that_is_not_square(tmp_path, run_hfexport):
    build_siglip(tmp_path / "model", "Siglip2VisionModel")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    config["num_patches"] = 15
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out), out, "num_patches", "square")


@pytest.mark.parametrize("cls", ["Siglip2ImageProcessorPil", "Siglip2ImageProcessor"])
@pytest.mark.parametrize("max_patches", [16, 64])
def test_siglip2_image_inputs_match_the_processor(tmp_path, cls, max_patches):
    """hfexport.vision's SigLIP 2 preprocessing (each image to the largest patch grid within
    max_num_patches that keeps its aspect ratio, patches padded, mask, grid shapes) against the
    processor, Pillow and torchvision backends, for a non-square, a grayscale and an RGBA file
    together."""
    import transformers

    from hfexport.vision import image_inputs
    from test_vit import image_files

    # do_convert_rgb: its default (None) refuses the grayscale file; hfexport converts every image.
    processor = getattr(transformers, cls)(patch_size=4, max_num_patches=max_patches, do_convert_rgb=True)
    processor.save_pretrained(tmp_path)
    paths = image_files(tmp_path)
    from PIL import Image

    expected = processor([Image.open(p) for p in paths], return_tensors="np")
    got = image_inputs(tmp_path, paths)
    np.testing.assert_array_equal(got["spatial_shapes"], expected["spatial_shapes"])
    np.testing.assert_array_equal(got["pixel_attention_mask"], expected["pixel_attention_mask"])
    assert got["pixel_attention_mask"].dtype == expected["pixel_attention_mask"].dtype
    np.testing.assert_allclose(got["pixel_values"], expected["pixel_values"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("cls", ["CLIPForImageClassification", "SiglipForImageClassification",
                                 "Siglip2ForImageClassification"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_image_classifiers_match_transformers(tmp_path, export_model, support_matrix, fmt, cls):
    """...ForImageClassification: the vision tower's states averaged over the patches (CLIP's after
    [CLS], SigLIP 2's real ones only), then the classifier: image-classification's logits."""
    import transformers
    from hfexport import ExportedModel

    torch.manual_seed(0)
    family = cls.removesuffix("ForImageClassification")
    vision = {"CLIP": VISION, "Siglip": {**VISION, "hidden_act": "gelu_pytorch_tanh"}, "Siglip2": SIGLIP2_VISION}[family]
    config = getattr(transformers, f"{family}Config")(text_config=SIGLIP_TEXT, vision_config=vision, num_labels=5)
    config._attn_implementation = "eager"
    model = randomize(getattr(transformers, cls)(config))
    model.save_pretrained(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    assert json.loads((out / "export.json").read_text())["task"] == "image-classification"
    batch = 1 if fmt == "executorch" else 2
    images = (naflex_patches([(3, 5), (2, 3)][:batch], 16) if family == "Siglip2"
              else {"pixel_values": pixels(batch)})
    with torch.no_grad():
        result = model(**torch_inputs(images))
    err = compare(ExportedModel(out)(**images), result, ["logits"])
    support_matrix.record(family.lower(), f"image-classification ({cls})", True, err, backend=fmt)
