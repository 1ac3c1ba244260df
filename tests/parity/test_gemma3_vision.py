"""Gemma 3's image-text-to-text model (Gemma3ForConditionalGeneration, issue 32), against
transformers on every backend: vision_encoder against get_image_features (the SigLIP tower's
last_hidden_state average-pooled to mm_tokens_per_image, soft-embedding RMSNorm, projection), the
text_decoder's logits over inputs_embeds with token_type_ids (each image's tokens attend to each
other both ways, on sliding and full layers) against the model's forward, and greedy generation
token-identical to generate with one image, two images (two blocks), none, and a left-padded
batch."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from test_llava import assert_generates_like, check_text_decoder, component, left_padded

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
BOI, EOI, IMAGE = 127, 128, 129
TEXT = dict(model_type="gemma3_text", vocab_size=130, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128, sliding_window=4,
            layer_types=["sliding_attention", "full_attention"], pad_token_id=0, bos_token_id=2, eos_token_id=1)
VISION = dict(model_type="siglip_vision_model", hidden_size=24, intermediate_size=40, num_hidden_layers=2,
              num_attention_heads=2, image_size=32, patch_size=8, vision_use_head=False)
TOKENS_PER_IMAGE = 4  # the 4 x 4 patch grid pooled 2 x 2


def build(folder):
    import transformers

    torch.manual_seed(0)
    config = transformers.Gemma3Config(text_config=TEXT, vision_config=VISION, mm_tokens_per_image=TOKENS_PER_IMAGE,
                                       image_token_index=IMAGE, boi_token_index=BOI, eoi_token_index=EOI)
    config._attn_implementation = "eager"
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0.0, 0.3)
            else:
                p.normal_(0.0, 0.3 if "embed" in name else 0.1)
    model.save_pretrained(folder)
    return model


def images(count: int, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 3, 32, 32)).astype(np.float32)


def prompt(images_in_prompt: int, text: list[int]) -> list[int]:
    """bos, text, then each image as the processor writes it: <start_of_image>, its tokens, <end_of_image>."""
    image = [BOI] + [IMAGE] * TOKENS_PER_IMAGE + [EOI]
    return [2] + text[:2] + image * images_in_prompt + text[2:]


def token_types(ids: np.ndarray) -> np.ndarray:
    return (ids == IMAGE).astype(np.int64)


@pytest.mark.parametrize("fmt", FORMATS)
def test_components_match_transformers(tmp_path, export_model, support_matrix, fmt):
    model = build(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["image_tokens"] == {"image_token_id": IMAGE, "features_per_image": TOKENS_PER_IMAGE}
    assert "token_type_ids" in [i["name"] for i in manifest["components"]["text_decoder"]["inputs"]]
    batch = 1 if fmt == "executorch" else 2
    pixels = images(2 * batch)
    with torch.no_grad():
        expected = model.get_image_features(pixel_values=torch.from_numpy(pixels)).pooler_output
    got = component(out, "vision_encoder")({"pixel_values": pixels})["image_features"]
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-4)
    err = float(np.abs(got - expected.numpy()).max())

    ids, mask = left_padded([prompt(2, [5, 6, 7, 8, 9]), prompt(2, [10, 11])][:batch])
    err = max(err, check_text_decoder(out, model, ids, mask, expected, IMAGE, token_type_ids=token_types(ids))[1])
    support_matrix.record("gemma3", "image-text-to-text components", True, err, backend=fmt)


GENERATIONS = {
    "one-image": (1, [[1, [5, 6, 7]]]),
    "two-images": (2, [[2, [8, 9, 10]]]),
    "no-image": (0, [[0, [5, 6, 7, 11]]]),
    "left-padded-batch": (2, [[1, [5, 6, 7, 8, 9]], [1, [12, 13]]]),
}


@pytest.mark.parametrize("case", list(GENERATIONS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_generation_matches_transformers(tmp_path, export_model, support_matrix, fmt, case):
    model = build(tmp_path / "model")
    image_count, rows = GENERATIONS[case]
    if fmt == "executorch" and len(rows) > 1:
        pytest.skip("the .pte's batch is covered by the other formats")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt, "--for-generation")
    ids, mask = left_padded([prompt(n, text) for n, text in rows])
    pixels = images(image_count) if image_count else None
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": token_types(ids)}
    if pixels is not None:
        inputs["pixel_values"] = pixels
    assert_generates_like(model, out, inputs)
    support_matrix.record("gemma3", f"generate ({case})", True, 0.0, backend=fmt)


@pytest.mark.parametrize("fmt", ["onnx", "executorch"])
def test_static_cache_generation(tmp_path, export_model, fmt):
    model = build(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt, "--for-generation", "--static-cache",
                       "--max-cache-len", "64")
    ids, mask = left_padded([prompt(2, [5, 6, 7])])
    assert_generates_like(model, out, {"input_ids": ids, "attention_mask": mask, "token_type_ids": token_types(ids),
                                       "pixel_values": images(2)})


def test_refusals(tmp_path, run_hfexport):
    from conftest import assert_clean_error

    build(tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    config["mm_tokens_per_image"] = 5
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out), out, "mm_tokens_per_image")


def with_processor(folder, **image_settings):
    """A Gemma3Processor (a byte-level BPE tokenizer whose last ids are <start_of_image>,
    <end_of_image>, <image_soft_token>; the image processor at 32 pixels, with `image_settings`)
    and the model whose vocabulary ends there."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from test_llava import CORPUS

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=100, special_tokens=["<pad>", "<eos>", "<bos>"],
                                                        show_progress=False))
    tok.add_special_tokens(["<start_of_image>", "<end_of_image>", "<image_soft_token>"])
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
        extra_special_tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                              "image_token": "<image_soft_token>"})
    boi, eoi, image = tokenizer.convert_tokens_to_ids(["<start_of_image>", "<end_of_image>", "<image_soft_token>"])
    image_processor = transformers.Gemma3ImageProcessor(size={"height": 32, "width": 32}, **image_settings)
    processor = transformers.Gemma3Processor(image_processor=image_processor, tokenizer=tokenizer,
                                             image_seq_length=TOKENS_PER_IMAGE)
    torch.manual_seed(0)
    config = transformers.Gemma3Config(text_config={**TEXT, "vocab_size": image + 1, "bos_token_id": 2, "eos_token_id": 1},
                                       vision_config=VISION, mm_tokens_per_image=TOKENS_PER_IMAGE,
                                       image_token_index=image, boi_token_index=boi, eoi_token_index=eoi)
    config._attn_implementation = "eager"
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.normal_(0.0, 0.2)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return model, processor


def test_prompt_and_image_files(tmp_path, export_model, run_hfexport):
    """`hfexport generate OUT --image FILE --prompt TEXT` and ExportedModel.generate(text, images=[...]):
    the image preprocessed as Gemma3ImageProcessor does, <start_of_image> expanded as Gemma3Processor
    expands it, the new text as transformers generates it from the processor's inputs."""
    from PIL import Image

    from hfexport import ExportedModel
    from test_vit import image_files

    model, processor = with_processor(tmp_path / "model")
    files = image_files(tmp_path)[:2]
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx", "--for-generation")
    text = "the cat <start_of_image> sat on <start_of_image>"
    inputs = processor(text=text, images=[[Image.open(f) for f in files]], return_tensors="pt")
    with torch.no_grad():
        new = model.generate(**inputs, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    expected = processor.tokenizer.decode(new[0, inputs.input_ids.shape[1]:], skip_special_tokens=True)
    proc = run_hfexport("generate", out, "--image", files[0], "--image", files[1], "--prompt", text,
                        "--max-new-tokens", "6", "--ignore-eos")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip("\n") == expected
    exported = ExportedModel(out)
    assert exported.generate(text, images=files, max_new_tokens=6, ignore_eos=True) == expected
    got = exported.generate(**inputs, max_new_tokens=6, ignore_eos=True)
    np.testing.assert_array_equal(np.asarray(got), new.numpy())


PAN_AND_SCAN = dict(do_pan_and_scan=True, pan_and_scan_min_crop_size=8, pan_and_scan_max_num_crops=3,
                    pan_and_scan_min_ratio_to_activate=1.2)


def test_pan_and_scan(tmp_path, export_model, run_hfexport):
    """Gemma 3's pan-and-scan, asked for per call as Gemma3Processor takes it (its own defaults,
    do_pan_and_scan off, override the stored settings): each image, then its crops (a wide image
    cut in three, the last crop short at the edge; 70x45 in two; a portrait grayscale in two rows;
    a square RGBA image in none) as the processor cuts and preprocesses them (within 1e-5), the
    prompt's sentence for the crops as it writes it, and the new text and tokens as transformers
    generates them from the processor's inputs; `--image-option` and `images_kwargs`."""
    from PIL import Image

    from hfexport import ExportedModel
    from hfexport.vision import image_inputs
    from test_vit import image_files

    model, processor = with_processor(tmp_path / "model", **PAN_AND_SCAN)  # stored, and overridden
    wide = tmp_path / "wide.png"
    Image.fromarray((np.random.default_rng(3).random((30, 80, 3)) * 255).astype(np.uint8)).save(wide)
    files = [wide, *image_files(tmp_path)]
    opened = [Image.open(f) for f in files]
    inputs = processor(text="a <start_of_image> b <start_of_image> c <start_of_image> d <start_of_image>",
                       images=[opened], return_tensors="pt", **PAN_AND_SCAN)
    ours = image_inputs(tmp_path / "model", files, PAN_AND_SCAN)
    assert ours["num_crops"] == [3, 2, 2, 0]
    np.testing.assert_allclose(ours["pixel_values"], inputs["pixel_values"].numpy(), atol=1e-5, rtol=0)
    plain = processor(text="a <start_of_image>", images=[opened[:1]], return_tensors="pt")
    np.testing.assert_allclose(image_inputs(tmp_path / "model", files[:1])["pixel_values"],
                               plain["pixel_values"].numpy(), atol=1e-5, rtol=0)

    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx", "--for-generation")
    text = "the cat <start_of_image> sat on <start_of_image>"
    chosen = [1, 3]  # two crops, and none: four views in 128 tokens
    inputs = processor(text=text, images=[[opened[i] for i in chosen]], return_tensors="pt", **PAN_AND_SCAN)
    with torch.no_grad():
        new = model.generate(**inputs, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    expected = processor.tokenizer.decode(new[0, inputs.input_ids.shape[1]:], skip_special_tokens=True)
    options = [arg for key, value in PAN_AND_SCAN.items() for arg in ("--image-option", f"{key}={json.dumps(value)}")]
    proc = run_hfexport("generate", out, "--image", files[1], "--image", files[3], "--prompt", text,
                        "--max-new-tokens", "6", "--ignore-eos", *options)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip("\n") == expected
    exported = ExportedModel(out)
    assert exported.generate(text, images=[files[i] for i in chosen], images_kwargs=PAN_AND_SCAN, max_new_tokens=6,
                             ignore_eos=True) == expected
    got = exported.generate(**inputs, max_new_tokens=6, ignore_eos=True)
    np.testing.assert_array_equal(np.asarray(got), new.numpy())
    proc = run_hfexport("generate", out, "--image", files[0], "--prompt", text, "--image-option", "do_pan_and_scans=1")
    assert proc.returncode != 0 and "do_pan_and_scans" in proc.stderr
    ids = ",".join(str(i) for i in processor.tokenizer("a <start_of_image>").input_ids)
    proc = run_hfexport("generate", out, "--image", files[1], "--input-ids", ids, *options)
    assert proc.returncode != 0 and "crop" in proc.stderr  # the processor writes text around the crops


def test_openvino_genai_vlm_pipeline(tmp_path, export_model):
    """OpenVINO GenAI's VLMPipeline loads the Gemma 3 OpenVINO export as it is (the language model
    taking token_type_ids, the text and vision embeddings models, the image processor's settings)
    and generates transformers' text for an image and a prompt (it expands <start_of_image> itself)."""
    pytest.importorskip("openvino_genai")
    from PIL import Image
    from test_llava import vlm_pipeline_text
    from test_vit import image_files

    model, processor = with_processor(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "openvino", "--for-generation")
    image = Image.open(image_files(tmp_path)[0]).convert("RGB")
    prompt = "the cat <start_of_image>"
    inputs = processor(text=prompt, images=[[image]], return_tensors="pt")
    with torch.no_grad():
        new = model.generate(**inputs, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    expected = processor.tokenizer.decode(new[0, inputs.input_ids.shape[1]:], skip_special_tokens=True)
    assert vlm_pipeline_text(out, processor.tokenizer, image, prompt, 6) == expected
