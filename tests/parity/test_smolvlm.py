"""SmolVLM (issue 32), against transformers on every backend. vision_encoder (the SigLIP-style
tower with its bucketed positions, post_layernorm, pixel shuffle, modality projection) against
get_image_features for two images; token_embedding against the input embeddings; text_decoder over
inputs_embeds against the model's forward. Generation through ExportedModel.generate(**processor(...)):
greedy tokens identical to generate for an image split into tiles plus its global view (the
processor's 5-D pixel_values and its padding images), two images, and no image. The tower's
position ids for patch grids where torch's bucketing is not the identity (27 patches a side)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from test_llava import (CORPUS, assert_generates_like, assert_missing_tensor_refused, check_text_decoder, component,
                        left_padded)

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
TEXT = dict(model_type="llama", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0)
VISION = dict(model_type="smolvlm_vision", hidden_size=24, intermediate_size=40, num_hidden_layers=2,
              num_attention_heads=2, image_size=32, patch_size=4)
TOKENS_PER_IMAGE = (32 // 4) ** 2 // 4


def save_processor(folder):
    """A SmolVLMProcessor (tiles of 32 pixels, images up to 64; a byte-level BPE tokenizer with
    <image>, <fake_token_around_image>, <global-img> and <end_of_utterance>), built without its
    class check (its video processor needs torchvision) and saved in parts."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=120, show_progress=False,
                                                        special_tokens=["<pad>", "<|im_start|>", "<end_of_utterance>"]))
    tok.add_special_tokens(["<fake_token_around_image>", "<global-img>", "<image>"])
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<end_of_utterance>")
    images = transformers.SmolVLMImageProcessorPil(size={"longest_edge": 64}, max_image_size={"longest_edge": 32})
    images.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    check = transformers.ProcessorMixin.check_argument_for_proper_class
    transformers.ProcessorMixin.check_argument_for_proper_class = lambda self, *args: None
    try:
        return transformers.SmolVLMProcessor(image_processor=images, tokenizer=tokenizer, video_processor=None,
                                             image_seq_len=TOKENS_PER_IMAGE)
    finally:
        transformers.ProcessorMixin.check_argument_for_proper_class = check


def build(folder, vocab: int = 130, image_token: int = 129, vision: dict | None = None, scale: int = 2):
    import transformers

    torch.manual_seed(0)
    config = transformers.SmolVLMConfig(text_config={**TEXT, "vocab_size": vocab}, vision_config=vision or VISION,
                                        image_token_id=image_token, scale_factor=scale)
    config._attn_implementation = "eager"
    model = transformers.SmolVLMForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5) if name.endswith("weight") else p.normal_(0.0, 0.1)
            else:
                p.normal_(0.0, 0.3 if "embed" in name else 0.1)
    model.generation_config.eos_token_id = 2
    model.save_pretrained(folder)
    return model


def images(count: int, size: int = 32, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 3, size, size)).astype(np.float32)


@pytest.mark.parametrize("fmt", FORMATS)
def test_components_match_transformers(tmp_path, export_model, support_matrix, fmt):
    model = build(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "image-text-to-text"
    assert manifest["image_tokens"] == {"image_token_id": 129, "features_per_image": TOKENS_PER_IMAGE}
    pixels = images(1 if fmt == "executorch" else 2)  # the .pte's vision batch: as llava's test
    with torch.no_grad():
        expected = model.model.get_image_features(pixel_values=torch.from_numpy(pixels)[None]).pooler_output[0]
    got = component(out, "vision_encoder")({"pixel_values": pixels})["image_features"]
    np.testing.assert_allclose(got.reshape(-1, got.shape[-1]), expected.numpy(), rtol=1e-4, atol=1e-4)
    err = float(np.abs(got.reshape(-1, got.shape[-1]) - expected.numpy()).max())
    ids, mask = left_padded([[5] + [129] * TOKENS_PER_IMAGE + [6, 7], [8, 9]][: len(pixels)])
    np.testing.assert_array_equal(component(out, "token_embedding")({"input_ids": ids})["inputs_embeds"],
                                  model.get_input_embeddings()(torch.from_numpy(ids)).detach().numpy())
    err = max(err, check_text_decoder(out, model, ids, mask, expected, 129)[1])
    support_matrix.record("smolvlm", "image-text-to-text components", True, err, backend=fmt)


def test_bucketed_positions(tmp_path, export_model):
    """A 27-patch side (image 108, patch 4, scale factor 3): torch's arange(1/27, 1, 1/27) has 27
    entries, so the positions are not the patches' indices; the tower still matches."""
    model = build(tmp_path / "model", vision={**VISION, "image_size": 108}, scale=3)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx")
    pixels = images(1, 108)
    with torch.no_grad():
        expected = model.model.get_image_features(pixel_values=torch.from_numpy(pixels)[None]).pooler_output[0]
    got = component(out, "vision_encoder")({"pixel_values": pixels})["image_features"]
    np.testing.assert_allclose(got.reshape(-1, got.shape[-1]), expected.numpy(), rtol=1e-4, atol=1e-4)


def processor_inputs(processor, text: str, image_list) -> dict:
    inputs = processor(text=text, images=image_list, return_tensors="np")
    return {k: np.asarray(v) for k, v in inputs.items()}


@pytest.mark.parametrize("case", ["one-image-tiled", "two-images", "no-image"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_generation_matches_transformers(tmp_path, export_model, support_matrix, fmt, case):
    """The processor's inputs (5-D pixel_values, padding images among them when the images split
    into different tile counts, pixel_attention_mask) straight into ExportedModel.generate."""
    from PIL import Image
    from test_vit import image_files

    if fmt == "executorch" and case == "two-images":
        pytest.skip("the .pte's default sequence bound (128) is below the two tiled images' 233 tokens; "
                    "one tiled image covers it")
    processor = save_processor(tmp_path / "model")
    model = build(tmp_path / "model", vocab=len(processor.tokenizer),
                  image_token=processor.tokenizer.convert_tokens_to_ids("<image>"))
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt, "--for-generation")
    files = [Image.open(f).convert("RGB") for f in image_files(tmp_path)]
    if case == "one-image-tiled":
        inputs = processor_inputs(processor, "<image>the cat", [[files[0]]])
    elif case == "two-images":
        inputs = processor_inputs(processor, "the cat<image>sat<image>", [[files[0], files[2]]])
    else:
        inputs = processor_inputs(processor, "the cat sat", None)
    assert_generates_like(model, out, inputs)
    support_matrix.record("smolvlm", f"generate ({case})", True, 0.0, backend=fmt)


def test_missing_connector_weight(tmp_path, run_hfexport):
    build(tmp_path / "model")
    assert_missing_tensor_refused(tmp_path / "model", run_hfexport, "model.connector.modality_projection.proj.weight")


def test_image_preprocessing_and_prompts(tmp_path, export_model, run_hfexport):
    """hfexport.vision.image_inputs cuts images into the processor's tiles (within 1e-5, its rows
    and cols), and `hfexport generate OUT --image F --prompt T` / generate(text, images=[...]) write
    each <image> as the processor does (tiles, rows, the global view): transformers' text."""
    from PIL import Image
    from hfexport import ExportedModel
    from hfexport.vision import image_inputs
    from test_vit import image_files

    processor = save_processor(tmp_path / "model")
    model = build(tmp_path / "model", vocab=len(processor.tokenizer),
                  image_token=processor.tokenizer.convert_tokens_to_ids("<image>"))
    files = image_files(tmp_path)
    got = image_inputs(tmp_path / "model", files)
    expected = processor.image_processor([[Image.open(f)] for f in files], return_row_col_info=True, return_tensors="np")
    pixels = np.asarray(expected["pixel_values"]).reshape(-1, 3, 32, 32)
    pixels = pixels[(pixels != 0).any(axis=(1, 2, 3))]
    np.testing.assert_allclose(got["pixel_values"], pixels, rtol=0, atol=1e-5)
    assert got["rows"] == [r[0] for r in expected["rows"]] and got["cols"] == [c[0] for c in expected["cols"]]

    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx", "--for-generation")
    proc = run_hfexport("generate", out, "--image", files[0], "--prompt", "<image>the cat", "--max-new-tokens", "6",
                        "--ignore-eos")
    assert proc.returncode == 0, proc.stderr
    inputs = processor(text="<image>the cat", images=[[Image.open(files[0])]], return_tensors="pt")
    with torch.no_grad():
        new = model.generate(**inputs, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    expected_text = processor.tokenizer.decode(new[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert proc.stdout.rstrip("\n") == expected_text
    text = "the cat<image>sat<image>"
    inputs = processor(text=text, images=[[Image.open(files[1]), Image.open(files[2])]], return_tensors="pt")
    with torch.no_grad():
        new = model.generate(**inputs, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    got_text = ExportedModel(out).generate(text, images=files[1:], max_new_tokens=6, ignore_eos=True)
    assert got_text == processor.tokenizer.decode(new[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
