"""Qwen2-VL and Qwen2.5-VL (issue 32), against transformers on every backend. vision_encoder
(pixel_values as flattened patches + image_grid_thw) against get_image_features for two images of
different grids (2.5: window attention with a partial window, one full-attention block);
token_embedding against the input embeddings; text_decoder over inputs_embeds with the M-RoPE
position_ids transformers' get_rope_index gives, against the model's forward. Generation through
ExportedModel.generate(**processor-shaped inputs) (hfexport's own get_rope_index): greedy tokens
identical to generate with one image, two images, no image, and a left-padded batch. Checkpoint
layouts: what transformers 5 saves (the 4.x names), the 5.x module names, and a 4.x config with the
text keys at its top level."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_clean_error
from test_llava import assert_generates_like, assert_missing_tensor_refused, check_text_decoder, component, left_padded

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
IMAGE, VIDEO, START, END = 290, 291, 292, 293
PATCH, TEMPORAL, MERGE = 4, 2, 2
PATCH_DIM = 3 * TEMPORAL * PATCH * PATCH
TEXT = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, eos_token_id=2, pad_token_id=0,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0})
VISION = {
    "qwen2_vl": dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=PATCH,
                     temporal_patch_size=TEMPORAL, spatial_merge_size=MERGE),
    # windows of 2 x 2 merged patches (16 pixels): a 4 x 6 patch grid has a full and a partial one
    "qwen2_5_vl": dict(depth=3, hidden_size=32, intermediate_size=48, out_hidden_size=64, num_heads=2,
                       patch_size=PATCH, temporal_patch_size=TEMPORAL, spatial_merge_size=MERGE, window_size=16,
                       fullatt_block_indexes=[1]),
}
GRIDS = np.array([[1, 4, 4], [1, 4, 6]], np.int64)


def build(folder, model_type: str = "qwen2_vl", vocab: int = 300, image: int = IMAGE, video: int = VIDEO,
          start: int = START, end: int = END, eos: int = 2):
    import transformers

    torch.manual_seed(0)
    classes = {"qwen2_vl": (transformers.Qwen2VLConfig, transformers.Qwen2VLForConditionalGeneration),
               "qwen2_5_vl": (transformers.Qwen2_5_VLConfig, transformers.Qwen2_5_VLForConditionalGeneration)}
    config_class, model_class = classes[model_type]
    config = config_class(text_config={**TEXT, "vocab_size": vocab, "eos_token_id": eos},
                          vision_config=dict(VISION[model_type]), image_token_id=image, video_token_id=video,
                          vision_start_token_id=start, vision_end_token_id=end)
    config._attn_implementation = "eager"
    model = model_class(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "ln_q" in name:
                p.uniform_(0.5, 1.5) if name.endswith("weight") else p.normal_(0.0, 0.1)
            else:
                p.normal_(0.0, 0.3 if "embed" in name else 0.1)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = 0
    model.save_pretrained(folder)
    return model


def vision_encoder(out):
    """The export's vision encoder as one call: the graph, or (OpenVINO) GenAI's split run with the
    host's RoPE table, masks and window order (hfexport.vlm.OpenVinoGenaiTower)."""
    from hfexport.manifest import load_manifest
    from hfexport.vlm import open_vision_encoder

    return open_vision_encoder(load_manifest(out))


def pixels(grids: np.ndarray, seed: int = 7) -> np.ndarray:
    patches = int(sum(t * h * w for t, h, w in grids))
    return np.random.default_rng(seed).standard_normal((patches, PATCH_DIM)).astype(np.float32)


def image_tokens(grid) -> list[int]:
    t, h, w = (int(v) for v in grid)
    return [START] + [IMAGE] * (t * h * w // MERGE**2) + [END]


def inputs_for(rows: list[list[int]], grids: np.ndarray | None) -> dict:
    ids, mask = left_padded(rows)
    inputs = {"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": (ids == IMAGE).astype(np.int64)}
    if grids is not None and len(grids):
        inputs.update(pixel_values=pixels(grids), image_grid_thw=grids)
    return inputs


def torch_inputs(inputs: dict) -> dict:
    return {k: torch.from_numpy(v) for k, v in inputs.items()}


@pytest.mark.parametrize("model_type", list(VISION))
@pytest.mark.parametrize("fmt", FORMATS)
def test_components_match_transformers(tmp_path, export_model, support_matrix, fmt, model_type):
    model = build(tmp_path / "model", model_type)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "image-text-to-text"
    tower = ({"vision_embeddings", "vision_embeddings_merger"} if fmt == "openvino"  # OpenVINO GenAI's split
             else {"vision_encoder"})
    assert set(manifest["components"]) == {*tower, "token_embedding", "text_decoder"}
    assert manifest["image_tokens"] == {"image_token_id": IMAGE, "features_per_image": 0, "rope_index": "qwen2_vl",
                                        "spatial_merge_size": MERGE, "vision_start_token_id": START}
    grids = GRIDS if fmt != "executorch" else GRIDS[1:]
    inputs = inputs_for([[5, *image_tokens(grids[0]), 6, 7], [8, *image_tokens(grids[-1]), 9]][:len(grids)], grids)
    with torch.no_grad():
        expected = torch.cat(list(model.get_image_features(pixel_values=torch.from_numpy(inputs["pixel_values"]),
                                                          image_grid_thw=torch.from_numpy(grids)).pooler_output))
    got = vision_encoder(out)({"pixel_values": inputs["pixel_values"], "image_grid_thw": grids})["image_features"]
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-4)
    err = float(np.abs(got - expected.numpy()).max())

    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    with torch.no_grad():
        positions, _ = model.model.get_rope_index(torch.from_numpy(ids), torch.from_numpy(inputs["mm_token_type_ids"]),
                                                  image_grid_thw=torch.from_numpy(grids),
                                                  attention_mask=torch.from_numpy(mask))
    # Against the model's whole forward (its own image features and M-RoPE positions).
    embeds, decoder_err = check_text_decoder(out, model, ids, mask, expected, IMAGE, positions.numpy(), reference=inputs)
    # token_embedding merges the features at the image tokens (onnxruntime-genai's embedding
    # model); without features (a decode step) every token keeps its embedding. OpenVINO GenAI's
    # text embeddings model takes the ids alone (its pipeline merges the features).
    embed = component(out, "token_embedding")
    plain = model.get_input_embeddings()(torch.from_numpy(ids)).detach().numpy()
    if fmt == "openvino":
        np.testing.assert_array_equal(embed({"input_ids": ids})["inputs_embeds"], plain)
    else:
        np.testing.assert_array_equal(embed({"input_ids": ids, "image_features": expected.numpy()})["inputs_embeds"], embeds)
        np.testing.assert_array_equal(embed({"input_ids": ids, "image_features": np.zeros((0, 64), np.float32)})["inputs_embeds"],
                                      plain)
    err = max(err, decoder_err)
    support_matrix.record(model_type, "image-text-to-text components", True, err, backend=fmt)


GENERATIONS = {
    "one-image": ([[5, *image_tokens(GRIDS[1]), 6, 7]], GRIDS[1:]),
    "two-images": ([[5, *image_tokens(GRIDS[0]), 6, *image_tokens(GRIDS[1]), 7]], GRIDS),
    "no-image": ([[5, 6, 7, 11]], None),
    "left-padded-batch": ([[5, *image_tokens(GRIDS[0]), 6, 7, 8, 9], [*image_tokens(GRIDS[1]), 12]], GRIDS),
}


@pytest.mark.parametrize("case", list(GENERATIONS))
@pytest.mark.parametrize("model_type", list(VISION))
@pytest.mark.parametrize("fmt", FORMATS)
def test_generation_matches_transformers(tmp_path, export_model, support_matrix, fmt, model_type, case):
    rows, grids = GENERATIONS[case]
    if fmt == "executorch" and len(rows) > 1:
        pytest.skip("covered on the other formats; the .pte's batch is exercised by its dynamic cache elsewhere")
    model = build(tmp_path / "model", model_type)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt, "--for-generation")
    assert_generates_like(model, out, inputs_for(rows, grids))
    support_matrix.record(model_type, f"generate ({case})", True, 0.0, backend=fmt)


def rename(folder, rule):
    import safetensors.torch as st

    tensors = st.load_file(folder / "model.safetensors")
    st.save_file({rule(k): v for k, v in tensors.items()}, folder / "model.safetensors", metadata={"format": "pt"})


def flatten_text_config(folder):
    """A 4.x config as the Hub's Qwen2-VL checkpoints carry it: the text keys at the top level,
    rope_scaling {"type": "mrope"}, the tower's in_chans."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    text = config.pop("text_config")
    rope = text.pop("rope_parameters")
    text.pop("model_type")
    config.update(text)
    config["rope_theta"] = rope["rope_theta"]
    config["rope_scaling"] = {"type": "mrope", "mrope_section": rope["mrope_section"]}
    config["vision_config"]["in_chans"] = config["vision_config"].pop("in_channels")
    path.write_text(json.dumps(config))


LAYOUTS = {
    "modules-5.x": lambda folder: rename(folder, lambda k: ("model.language_model." + k[len("model."):]
                                                            if k.startswith("model.") else
                                                            "model." + k if k.startswith("visual.") else k)),
    "hub-4.x-config": flatten_text_config,
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_checkpoint_layouts(tmp_path, export_model, layout):
    model = build(tmp_path / "model", "qwen2_5_vl")
    LAYOUTS[layout](tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx", "--for-generation")
    assert_generates_like(model, out, inputs_for(GENERATIONS["one-image"][0], GENERATIONS["one-image"][1]))


REFUSALS = {
    "static-cache": (["--for-generation", "--static-cache", "--max-cache-len", "64"], None,
                     ["--static-cache is not supported with multimodal RoPE"]),
    "cache-position": (["--for-generation", "--static-cache", "--max-cache-len", "64", "--inputs",
                        "inputs_embeds,cache_position"], None, ["--static-cache is not supported with multimodal RoPE"]),
    "mrope-section": ([], lambda c: c["text_config"]["rope_parameters"].update(mrope_section=[2, 2, 2]),
                      ["mrope_section", "8"]),
    "merger-width": ([], lambda c: c["vision_config"].update(hidden_size=48), ["vision_config", "hidden_size (64)"]),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals(tmp_path, run_hfexport, case):
    args, edit, mentions = REFUSALS[case]
    build(tmp_path / "model")
    if edit:
        path = tmp_path / "model" / "config.json"
        config = json.loads(path.read_text())
        edit(config)
        path.write_text(json.dumps(config))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out, *args), out, *mentions)


def test_missing_vision_weight(tmp_path, run_hfexport):
    build(tmp_path / "model")
    assert_missing_tensor_refused(tmp_path / "model", run_hfexport, "visual.merger.mlp.2.weight")


CORPUS = ["a cat sat on the mat. the quick brown fox jumps over the lazy dog 0123456789"] * 20
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for c in message['content'] %}{% if c['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def save_processor(folder):
    """A Qwen2VLProcessor: Qwen2VLImageProcessor at the tower's 4-pixel patches (up to 32 x 32
    pixels: a few merged patches per image), a byte-level BPE tokenizer with Qwen's special tokens
    and a chat template that writes <|vision_start|><|image_pad|><|vision_end|> per image.
    The image and tokenizer parts are saved on their own (the processor's save wants a video
    processor, which needs torchvision); the processor object is built without its class check."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=100, show_progress=False,
                                                        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"]))
    tok.add_special_tokens(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"])
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                                     pad_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    images = transformers.Qwen2VLImageProcessorPil(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=TEMPORAL,
                                                   size={"shortest_edge": 8 * 8, "longest_edge": 32 * 32})
    images.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    check = transformers.ProcessorMixin.check_argument_for_proper_class
    transformers.ProcessorMixin.check_argument_for_proper_class = lambda self, *args: None
    try:
        processor = transformers.Qwen2VLProcessor(image_processor=images, tokenizer=tokenizer, video_processor=None,
                                                  chat_template=CHAT_TEMPLATE)
    finally:
        transformers.ProcessorMixin.check_argument_for_proper_class = check
    return processor


def with_processor(folder, model_type: str = "qwen2_5_vl"):
    """The model (its special token ids the tokenizer's, its vocabulary the tokenizer's) and its processor."""
    processor = save_processor(folder)
    ids = processor.tokenizer.convert_tokens_to_ids
    model = build(folder, model_type, vocab=len(processor.tokenizer), image=ids("<|image_pad|>"),
                  video=ids("<|video_pad|>"), start=ids("<|vision_start|>"), end=ids("<|vision_end|>"),
                  eos=ids("<|im_end|>"))
    processor.image_processor.save_pretrained(folder)
    processor.tokenizer.save_pretrained(folder)
    return model, processor


def reference_text(model, processor, inputs, new: int) -> str:
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=new, min_new_tokens=new, do_sample=False)
    return processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)


def test_image_preprocessing_matches_the_processor(tmp_path):
    """hfexport.vision.image_inputs: the processor's flattened patches (within 1e-5) and grids, for
    a non-square RGB image, a grayscale one and an RGBA one (each resized to its own grid)."""
    from PIL import Image
    from hfexport.vision import image_inputs
    from test_vit import image_files

    processor = save_processor(tmp_path)
    files = image_files(tmp_path)
    got = image_inputs(tmp_path, files)
    expected = processor.image_processor([Image.open(f) for f in files], return_tensors="np")
    np.testing.assert_array_equal(got["image_grid_thw"], expected["image_grid_thw"])
    np.testing.assert_allclose(got["pixel_values"], expected["pixel_values"], rtol=0, atol=1e-5)
    assert len({tuple(g) for g in got["image_grid_thw"]}) == 3


def test_cli_and_api_generate_with_image_files(tmp_path, export_model, run_hfexport):
    """`hfexport generate OUT --image F --prompt T`, `--input-ids` with one image token per image,
    and ExportedModel.generate(text, images=[...], chat=True): the placeholders expanded per image
    grid, the M-RoPE positions from the grids, transformers' text."""
    from PIL import Image
    from hfexport import ExportedModel
    from test_vit import image_files

    model, processor = with_processor(tmp_path / "model")
    files = image_files(tmp_path)[:2]
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx", "--for-generation")
    proc = run_hfexport("generate", out, "--image", files[0], "--prompt", "the cat", "--max-new-tokens", "6",
                        "--ignore-eos")
    assert proc.returncode == 0, proc.stderr
    inputs = processor(text="<|vision_start|><|image_pad|><|vision_end|>the cat", images=[Image.open(files[0])],
                       return_tensors="pt")
    assert proc.stdout.rstrip("\n") == reference_text(model, processor, inputs, 6)

    start, pad, end = (processor.tokenizer.convert_tokens_to_ids(t) for t in
                       ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>"))
    ids = [5, start, pad, end, 6, start, pad, end, 7]
    proc = run_hfexport("generate", out, "--image", files[0], "--image", files[1], "--input-ids",
                        ",".join(map(str, ids)), "--max-new-tokens", "6", "--ignore-eos")
    assert proc.returncode == 0, proc.stderr
    inputs = processor(text=processor.tokenizer.decode(ids), images=[Image.open(f) for f in files], return_tensors="pt")
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert [int(t) for t in proc.stdout.split()] == expected[0, inputs["input_ids"].shape[1]:].tolist()

    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "the cat"}]}]
    text = processor.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=text, images=[Image.open(files[1])], return_tensors="pt")
    got = ExportedModel(out).generate("the cat", images=[files[1]], chat=True, max_new_tokens=6, ignore_eos=True)
    assert got == reference_text(model, processor, inputs, 6)


@pytest.mark.parametrize("model_type", list(VISION))
@pytest.mark.parametrize("with_image", [True, False], ids=["one-image", "no-image"])
def test_onnxruntime_genai_multimodal(tmp_path, export_model, model_type, with_image):
    """onnxruntime-genai's qwen2_5_vl model type runs the ONNX export as it is (genai_config.json:
    vision_encoder, token_embedding as its embedding model, text_decoder; its processor config for
    onnxruntime-extensions): its multimodal processor gives the processor's ids and pixels (1e-5),
    and og.Generator's greedy tokens are transformers' for those inputs (its own M-RoPE positions)."""
    og = pytest.importorskip("onnxruntime_genai")
    from PIL import Image
    from test_vit import image_files

    model, processor = with_processor(tmp_path / "model", model_type)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx", "--for-generation")
    genai = og.Model(str(out))
    prompt = ("<|vision_start|><|image_pad|><|vision_end|>" if with_image else "") + "the cat"
    file = image_files(tmp_path)[0]
    inputs = genai.create_multimodal_processor()(prompt, images=og.Images.open(str(file)) if with_image else None)
    ids = inputs["input_ids"].as_numpy().astype(np.int64).reshape(1, -1)
    expected = processor(text=prompt, images=[Image.open(file)] if with_image else None, return_tensors="np")
    np.testing.assert_array_equal(ids, expected["input_ids"])
    reference = {"input_ids": ids, "attention_mask": np.ones_like(ids), "mm_token_type_ids": expected["mm_token_type_ids"]}
    if with_image:
        pixels = inputs["pixel_values"].as_numpy()
        np.testing.assert_allclose(pixels, expected["pixel_values"], rtol=0, atol=1e-5)
        reference.update(pixel_values=pixels, image_grid_thw=inputs["image_grid_thw"].as_numpy().reshape(-1, 3))
    params = og.GeneratorParams(genai)
    params.set_search_options(max_length=ids.shape[1] + 6, min_length=ids.shape[1] + 6, do_sample=False)
    generator = og.Generator(genai, params)
    generator.set_inputs(inputs)
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    with torch.no_grad():
        want = model.generate(**torch_inputs(reference), max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert tokens == want[0, ids.shape[1]:].tolist()


def genai_image():
    """A 24 x 32 image: a size the processor keeps (multiples of 8 pixels within its bounds), so
    VLMPipeline's own resize (OpenVINO's bicubic, not Pillow's) leaves the pixels as they are."""
    from PIL import Image

    return Image.fromarray(np.random.default_rng(3).integers(0, 256, (24, 32, 3), np.uint8))


@pytest.mark.parametrize("model_type", list(VISION))
def test_openvino_genai_vlm_pipeline(tmp_path, export_model, model_type):
    """OpenVINO GenAI's VLMPipeline loads the OpenVINO export as it is: the tower as its split
    (openvino_vision_embeddings_model, openvino_vision_embeddings_merger_model, which it feeds the
    RoPE table, block masks and 2.5's window order it computes), the text embeddings model over the
    ids alone, the language model with M-RoPE positions; it preprocesses the image itself and gives
    transformers' text for it and a prompt."""
    pytest.importorskip("openvino_genai")
    from test_llava import vlm_pipeline_text

    model, processor = with_processor(tmp_path / "model", model_type)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "openvino", "--for-generation")
    prompt = "<|vision_start|><|image_pad|><|vision_end|>the cat"
    inputs = processor(text=prompt, images=[genai_image()], return_tensors="pt")
    assert vlm_pipeline_text(out, processor.tokenizer, genai_image(), prompt, 6) == reference_text(model, processor, inputs, 6)
