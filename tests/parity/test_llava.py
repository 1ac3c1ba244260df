"""LLaVA (issue 32), against transformers on every backend. Each component on its own:
vision_encoder against get_image_features (feature layer -2 with the "default" strategy, two layers
concatenated with "full", a SigLIP tower), token_embedding against the input embeddings,
text_decoder's logits against the model's forward over inputs_embeds. Generation through
ExportedModel.generate(**processor-shaped inputs): greedy tokens identical to
LlavaForConditionalGeneration.generate with one image, two images in one prompt, no image, and a
left-padded batch of two prompts with an image each. Checkpoint layouts: what transformers 5 saves,
the Hub's 4.x names (vision_tower.vision_model.), and the 5.x module names (model.language_model.)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_clean_error

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
IMAGE_TOKEN = 119
TEXT = dict(model_type="llama", vocab_size=120, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0,
            bos_token_id=1, eos_token_id=2)
CLIP = dict(model_type="clip_vision_model", hidden_size=24, intermediate_size=40, num_hidden_layers=3,
            num_attention_heads=2, image_size=32, patch_size=8, hidden_act="quick_gelu")
SIGLIP = dict(model_type="siglip_vision_model", hidden_size=24, intermediate_size=40, num_hidden_layers=2,
              num_attention_heads=2, image_size=32, patch_size=8)
VARIANTS = {
    "clip-default": dict(vision_config=CLIP),
    "clip-full-two-layers": dict(vision_config=CLIP, vision_feature_layer=[-3, -1], vision_feature_select_strategy="full"),
    "siglip-qwen2": dict(vision_config=SIGLIP, vision_feature_layer=-1, vision_feature_select_strategy="full",
                         text_config={**TEXT, "model_type": "qwen2"}),
}


def build(folder, variant: str = "clip-default", image_token: int = IMAGE_TOKEN):
    """A seeded LlavaForConditionalGeneration whose image token is the vocabulary's last id."""
    import transformers

    torch.manual_seed(0)
    options = {"text_config": {**TEXT, "vocab_size": image_token + 1}, **VARIANTS[variant]}
    options["text_config"].update(VARIANTS[variant].get("text_config", {}))
    options["text_config"]["vocab_size"] = image_token + 1
    config = transformers.LlavaConfig(image_token_index=image_token, **options)
    config._attn_implementation = "eager"
    model = transformers.LlavaForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "layrnorm" in name:
                p.uniform_(0.5, 1.5) if name.endswith("weight") else p.normal_(0.0, 0.1)
            else:
                p.normal_(0.0, 0.3 if "embed" in name else 0.1)
    model.save_pretrained(folder)
    return model


def features_per_image(model) -> int:
    vision = model.config.vision_config
    patches = (vision.image_size // vision.patch_size) ** 2
    cls = 1 if vision.model_type == "clip_vision_model" else 0
    return patches + cls - (1 if model.config.vision_feature_select_strategy == "default" else 0)


def images(count: int, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 3, 32, 32)).astype(np.float32)


def prompt(model, images_in_prompt: int, text: list[int]) -> list[int]:
    """bos, then each image's tokens (as the processor expands <image>), then the text."""
    return [1] + [IMAGE_TOKEN] * (features_per_image(model) * images_in_prompt) + text


def left_padded(rows: list[list[int]]):
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = row
        mask[i, width - len(row):] = 1
    return ids, mask


def component(out, name: str):
    from hfexport.forward import open_graph
    from hfexport.manifest import load_manifest

    manifest = load_manifest(out)
    entry = manifest.component(name)
    program = {"program": entry["program"]} if "program" in entry else {}
    return open_graph(manifest.format, out / entry["file"], manifest.data, **program)


def check_text_decoder(out, model, ids: np.ndarray, mask: np.ndarray, features: torch.Tensor, image_token: int,
                       positions: np.ndarray | None = None, reference: dict | None = None,
                       **extra: np.ndarray) -> tuple[np.ndarray, float]:
    """text_decoder over the token embeddings with `features` at the image tokens (as the model's forward
    merges them), within 1e-4 of the model's logits at the real tokens. positions: left-padded text
    positions if None (Qwen2-VL: its M-RoPE rows [3, batch, seq]); extra: further inputs both take
    (Gemma 3's token_type_ids); reference: the model's inputs instead (e.g. the pixels, for its whole
    forward). Returns the merged embeddings and the largest difference."""
    if positions is None:
        positions = np.clip(np.cumsum(mask, -1) - 1, 0, None)
    with torch.no_grad():
        embeds = model.get_input_embeddings()(torch.from_numpy(ids))
        slots = torch.from_numpy(ids == image_token)
        embeds[slots] = features.reshape(-1, embeds.shape[-1])[: int(slots.sum())]
        inputs = {"inputs_embeds": embeds.numpy(), "attention_mask": mask, "position_ids": positions, **extra}
        logits = model(**{k: torch.from_numpy(v) for k, v in (reference or inputs).items()}).logits.numpy()
    got = component(out, "text_decoder")(inputs)["logits"]
    real = mask.astype(bool)
    np.testing.assert_allclose(got[real], logits[real], rtol=1e-4, atol=1e-4)
    return inputs["inputs_embeds"], float(np.abs(got[real] - logits[real]).max())


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_components_match_transformers(tmp_path, export_model, support_matrix, fmt, variant):
    model = build(tmp_path / "model", variant)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "image-text-to-text"
    assert set(manifest["components"]) == {"vision_encoder", "token_embedding", "text_decoder"}
    assert manifest["image_tokens"] == {"image_token_id": IMAGE_TOKEN, "features_per_image": features_per_image(model)}
    batch = 1 if fmt == "executorch" else 2
    pixels = images(batch)
    with torch.no_grad():
        expected = torch.stack(list(model.get_image_features(pixel_values=torch.from_numpy(pixels)).pooler_output))
    got = component(out, "vision_encoder")({"pixel_values": pixels})["image_features"]
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-4)
    err = float(np.abs(got - expected.numpy()).max())

    ids, mask = left_padded([prompt(model, 1, [5, 6, 7]), [1, 9, 10]][:batch])
    np.testing.assert_array_equal(component(out, "token_embedding")({"input_ids": ids})["inputs_embeds"],
                                  model.get_input_embeddings()(torch.from_numpy(ids)).detach().numpy())
    err = max(err, check_text_decoder(out, model, ids, mask, expected, IMAGE_TOKEN)[1])
    support_matrix.record("llava", f"image-text-to-text components ({variant})", True, err, backend=fmt)


def check_prefill_logits(out, model, inputs: dict) -> None:
    """The prompt's last logits from the generation export's runner, within 1e-4 of the model's
    (tokens alone can hide a mask that differs inside an image)."""
    from hfexport.runner import open_runner

    runner = open_runner(out)
    runner.set_images(inputs.get("pixel_values"), inputs.get("image_grid_thw"))
    got = runner.prefill(inputs["input_ids"], inputs["attention_mask"], 8)
    with torch.no_grad():
        expected = model(**{k: torch.from_numpy(v) for k, v in inputs.items()}).logits[:, -1].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def assert_generates_like(model, out, inputs: dict, new: int = 8) -> None:
    """ExportedModel.generate on the processor-shaped `inputs` (numpy) gives generate's greedy
    tokens, and the prompt's logits match."""
    from hfexport import ExportedModel

    with torch.no_grad():
        expected = model.generate(**{k: torch.from_numpy(v) for k, v in inputs.items()}, max_new_tokens=new,
                                  do_sample=False)
    np.testing.assert_array_equal(np.asarray(ExportedModel(out).generate(**inputs, max_new_tokens=new)), expected.numpy())
    check_prefill_logits(out, model, inputs)


GENERATIONS = {
    "one-image": (1, [[1, [5, 6, 7]]]),
    "two-images": (2, [[2, [8, 9]]]),
    "no-image": (0, [[0, [5, 6, 7, 11]]]),
    "left-padded-batch": (2, [[1, [5, 6, 7, 8, 9]], [1, [12]]]),
}


@pytest.mark.parametrize("case", list(GENERATIONS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_generation_matches_transformers(tmp_path, export_model, support_matrix, fmt, case):
    model = build(tmp_path / "model")
    image_count, rows = GENERATIONS[case]
    if fmt == "executorch" and len(rows) > 1:
        pytest.skip("covered on the other formats; the .pte's batch is exercised by its dynamic cache elsewhere")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt, "--for-generation")
    ids, mask = left_padded([prompt(model, n, text) for n, text in rows])
    inputs = {"input_ids": ids, "attention_mask": mask, **({"pixel_values": images(image_count)} if image_count else {})}
    assert_generates_like(model, out, inputs)
    support_matrix.record("llava", f"generate ({case})", True, 0.0, backend=fmt)


@pytest.mark.parametrize("fmt", ["onnx", "executorch"])
def test_static_cache_generation(tmp_path, export_model, fmt):
    model = build(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt, "--for-generation", "--static-cache",
                       "--max-cache-len", "64")
    ids, mask = left_padded([prompt(model, 1, [5, 6, 7])])
    assert_generates_like(model, out, {"input_ids": ids, "attention_mask": mask, "pixel_values": images(1)})


def rename(folder, rule):
    import safetensors.torch as st

    tensors = st.load_file(folder / "model.safetensors")
    st.save_file({rule(k): v for k, v in tensors.items()}, folder / "model.safetensors", metadata={"format": "pt"})


LAYOUTS = {
    "hub-4.x": lambda k: k.replace("vision_tower.", "vision_tower.vision_model."),
    "modules-5.x": lambda k: ("model." + k.replace("language_model.model.", "language_model.")
                              if not k.startswith("language_model.lm_head") else "lm_head.weight"),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_checkpoint_layouts(tmp_path, export_model, layout):
    model = build(tmp_path / "model")
    rename(tmp_path / "model", LAYOUTS[layout])
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx")
    pixels = images(2)
    with torch.no_grad():
        expected = torch.stack(list(model.get_image_features(pixel_values=torch.from_numpy(pixels)).pooler_output))
    np.testing.assert_allclose(component(out, "vision_encoder")({"pixel_values": pixels})["image_features"],
                               expected.numpy(), rtol=1e-4, atol=1e-4)


def test_image_tokens_without_images_is_refused(tmp_path, export_model):
    from hfexport import ExportedModel
    from hfexport.runner import GenerationError

    model = build(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx", "--for-generation")
    ids, mask = left_padded([prompt(model, 1, [5])])
    with pytest.raises(GenerationError, match="image tokens"):
        ExportedModel(out).generate(input_ids=ids, attention_mask=mask, max_new_tokens=2)


@pytest.mark.parametrize("edit,mentions", [
    ({"vision_feature_select_strategy": "middle"}, ["vision_feature_select_strategy"]),
    ({"vision_feature_layer": 7}, ["vision_feature_layer"]),
    ({"projector_hidden_act": "nope"}, ["projector_hidden_act"]),
    ({"text_config": {**TEXT, "model_type": "bert"}}, ["text_config", "bert"]),
    ({"vision_config": {**CLIP, "model_type": "vit"}}, ["vision_config", "vit"]),
    ({"text_config": None}, ["text_config"]),
])
def test_refusals(tmp_path, run_hfexport, edit, mentions):
    build(tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    config.update(edit)
    if config.get("text_config") is None:
        del config["text_config"]
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out), out, *mentions)


def assert_missing_tensor_refused(folder, run_hfexport, name: str) -> None:
    """The checkpoint at `folder` without tensor `name`: the export fails naming it, writing nothing."""
    import safetensors.torch as st

    tensors = st.load_file(folder / "model.safetensors")
    del tensors[name]
    st.save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    out = folder.parent / "out"
    assert_clean_error(run_hfexport("export", folder, "-o", out), out, name)


def test_missing_projector_weight(tmp_path, run_hfexport):
    build(tmp_path / "model")
    assert_missing_tensor_refused(tmp_path / "model", run_hfexport, "multi_modal_projector.linear_2.weight")


CORPUS = ["a cat sat on the mat. the quick brown fox jumps over the lazy dog 0123456789"] * 20


def save_processor(folder):
    """A LlavaProcessor: CLIP's image processor at the tower's 32 pixels, and a byte-level BPE
    tokenizer (what ExecuTorch's runners load too) whose last id is the image token <image>.
    Returns the processor and that id (the model's vocabulary is one larger)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=100, special_tokens=["<s>", "</s>"],
                                                        show_progress=False))
    tok.add_special_tokens(["<image>"])  # the last id
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    images = transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = transformers.LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=8,
                                            vision_feature_select_strategy="default", image_token="<image>",
                                            num_additional_image_tokens=1)
    processor.save_pretrained(folder)
    return processor, tokenizer.convert_tokens_to_ids("<image>")


def with_processor(folder):
    """The model and its processor, saved together."""
    processor, image_token = save_processor(folder)
    model = build(folder, image_token=image_token)
    processor.save_pretrained(folder)
    return model, processor


def reference_text(model, processor, inputs, new: int) -> str:
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=new, min_new_tokens=new, do_sample=False)
    return processor.tokenizer.decode(out[0, inputs.input_ids.shape[1]:], skip_special_tokens=True)


def test_cli_generate_with_an_image_file(tmp_path, export_model, run_hfexport):
    """`hfexport generate OUT --image FILE --prompt TEXT`: the image decoded and preprocessed as
    the processor does, the placeholder expanded, the new text as transformers generates it."""
    from PIL import Image
    from test_vit import image_files

    model, processor = with_processor(tmp_path / "model")
    image = image_files(tmp_path)[0]
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx", "--for-generation")
    proc = run_hfexport("generate", out, "--image", image, "--prompt", "the cat", "--max-new-tokens", "6",
                        "--ignore-eos")
    assert proc.returncode == 0, proc.stderr
    inputs = processor(text="<image>the cat", images=Image.open(image), return_tensors="pt")
    assert proc.stdout.rstrip("\n") == reference_text(model, processor, inputs, 6)


@pytest.mark.parametrize("fmt", ["openvino", "executorch"])
def test_cli_input_ids_where_a_native_runner_exists(tmp_path, export_model, run_hfexport, fmt):
    """`hfexport generate OUT --input-ids ...` with and without `--image` on the formats whose
    text-only exports run in a C++ loop (over a `decode` component): a vision-language export goes
    to the Python runner, and gives transformers' new ids (it failed on `--image` and on the
    missing `decode` before)."""
    from PIL import Image
    from test_vit import image_files

    model, processor = with_processor(tmp_path / "model")
    image = image_files(tmp_path)[0]
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt, "--for-generation")
    for text, images in (("<image>the cat", [image]), ("the cat", [])):
        ids = processor.tokenizer(text).input_ids  # the one image token stands for the image
        flags = [arg for i in images for arg in ("--image", i)]
        proc = run_hfexport("generate", out, "--input-ids", ",".join(map(str, ids)), *flags,
                            "--max-new-tokens", "6", "--ignore-eos")
        assert proc.returncode == 0, proc.stderr
        inputs = processor(text=text, images=[Image.open(i) for i in images] or None, return_tensors="pt")
        with torch.no_grad():
            new = model.generate(**inputs, max_new_tokens=6, min_new_tokens=6, do_sample=False)
        assert proc.stdout.split() == [str(t) for t in new[0, inputs.input_ids.shape[1]:].tolist()]


def test_openvino_genai_vlm_pipeline(tmp_path, export_model):
    """OpenVINO GenAI's VLMPipeline loads the OpenVINO export as it is (its language, text
    embeddings and vision embeddings models, the image processor's settings) and generates
    transformers' text for an image and a prompt."""
    pytest.importorskip("openvino_genai")
    from PIL import Image
    from test_vit import image_files

    model, processor = with_processor(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "openvino", "--for-generation")
    image = Image.open(image_files(tmp_path)[0]).convert("RGB")
    inputs = processor(text="<image>the cat", images=image, return_tensors="pt")
    assert vlm_pipeline_text(out, processor.tokenizer, image, "the cat", 6) == reference_text(model, processor, inputs, 6)


def vlm_pipeline_text(out, tokenizer, image, prompt: str, new: int) -> str:
    """OpenVINO GenAI's VLMPipeline over the export `out` (its tokenizer converted beside it): the
    greedy text for one image and the prompt, without a chat template."""
    genai = pytest.importorskip("openvino_genai")
    ov_tokenizers = pytest.importorskip("openvino_tokenizers")
    import openvino as ov

    tok, detok = ov_tokenizers.convert_tokenizer(tokenizer, with_detokenizer=True)
    ov.save_model(tok, str(out / "openvino_tokenizer.xml"))
    ov.save_model(detok, str(out / "openvino_detokenizer.xml"))
    config = genai.GenerationConfig()
    config.max_new_tokens, config.ignore_eos, config.apply_chat_template = new, True, False
    result = genai.VLMPipeline(str(out), "CPU").generate(prompt, images=[ov.Tensor(np.asarray(image)[None])],
                                                          generation_config=config)
    return result.texts[0]


def test_executorch_multimodal_runner(tmp_path, export_model):
    """ExecuTorch's MultimodalRunner (the wheel's pybindings) runs the .pte exported with a static
    cache and the text decoder it calls, text_decoder(inputs_embeds, cache_position), beside
    vision_encoder and token_embedding: transformers' text for the processor's inputs."""
    runner_module = pytest.importorskip("executorch.extension.llm.runner")
    from PIL import Image
    from test_vit import image_files

    model, processor = with_processor(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "executorch", "--for-generation",
                       "--static-cache", "--max-cache-len", "64", "--inputs", "inputs_embeds,cache_position")
    inputs = processor(text="<image>the cat", images=Image.open(image_files(tmp_path)[0]), return_tensors="pt")
    runner = runner_module.MultimodalRunner(str(out / "model.pte"), str(out / "tokenizer.json"))
    config = runner_module.GenerationConfig()
    config.max_new_tokens, config.echo, config.temperature = 6, False, 0.0
    pieces = []
    runner.generate_hf(inputs, config, token_callback=pieces.append,
                       image_token_id=processor.tokenizer.convert_tokens_to_ids("<image>"))
    assert "".join(pieces) == reference_text(model, processor, inputs, 6)
