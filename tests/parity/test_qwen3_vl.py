"""Qwen3-VL (issue 32), against transformers on every backend. vision_encoder (flattened patches +
image_grid_thw) against get_image_features: the merged features and the deepstack mergers'
features, for two images whose patch grids resample the learned position grid up and down;
token_embedding; text_decoder over inputs_embeds with get_rope_index's interleaved M-RoPE rows and
the deepstack features at the image tokens (visual_pos_masks, deepstack_visual_embeds), against
the model's forward. Generation through ExportedModel.generate(**processor-shaped inputs): greedy
tokens identical to generate with one image, two images, no image and a left-padded batch. Two
deepstack layouts: two mergers (blocks 0 and 2) and one (block 1). Qwen3-VL-MoE (`qwen3_vl_moe`): the
same tower with a mixture-of-experts language model (a dense layer among sparse ones), its experts as
the Hub stores them and as transformers' modules hold them, its head untied by the top-level config
though text_config says tied."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_clean_error
from test_llava import assert_generates_like, assert_missing_tensor_refused, check_text_decoder, component, left_padded
# The tiny towers' patching (4-pixel patches, 2 x 2 merges, ids 290-293) and prompts are Qwen2-VL's tests'.
from test_qwen2_vl import (END, IMAGE, MERGE, PATCH, START, TEMPORAL, VIDEO, genai_image, image_tokens, inputs_for,
                           reference_text, save_processor, vision_encoder)

FORMATS = ["onnx", "openvino", "pt2", "executorch"]
TEXT = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=256, eos_token_id=2, pad_token_id=0,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True,
                             "rope_theta": 10000.0})
# A 4 x 4 learned position grid; the images' 6 x 4 and 2 x 6 patch grids resample it up and down.
VISION = dict(depth=3, hidden_size=32, intermediate_size=48, out_hidden_size=64, num_heads=2, patch_size=PATCH,
              temporal_patch_size=TEMPORAL, spatial_merge_size=MERGE, num_position_embeddings=16)
DEEPSTACK = {"deepstack-0-2": [0, 2], "deepstack-1": [1]}
# Qwen3-VL-MoE's language model: experts on layers 0 and 2, a dense MLP on layer 1.
MOE_TEXT = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, decoder_sparse_step=1,
                mlp_only_layers=[1])
VARIANTS = {"deepstack-0-2": ("qwen3_vl", "deepstack-0-2"), "deepstack-1": ("qwen3_vl", "deepstack-1"),
            "moe": ("qwen3_vl_moe", "deepstack-0-2")}
GRIDS = np.array([[1, 6, 4], [1, 2, 6]], np.int64)


def build(folder, variant: str = "deepstack-0-2", vocab: int = 300, image: int = IMAGE, video: int = VIDEO,
          start: int = START, end: int = END, eos: int = 2):
    import transformers

    torch.manual_seed(0)
    model_type, deepstack = VARIANTS[variant]
    moe = model_type == "qwen3_vl_moe"
    config_class, model_class = ((transformers.Qwen3VLMoeConfig, transformers.Qwen3VLMoeForConditionalGeneration) if moe
                                 else (transformers.Qwen3VLConfig, transformers.Qwen3VLForConditionalGeneration))
    config = config_class(
        text_config={**TEXT, **(MOE_TEXT if moe else {}), "vocab_size": vocab, "eos_token_id": eos},
        vision_config={**VISION, "deepstack_visual_indexes": DEEPSTACK[deepstack]},
        image_token_id=image, video_token_id=video, vision_start_token_id=start, vision_end_token_id=end)
    config._attn_implementation = "eager"
    model = model_class(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5) if name.endswith("weight") else p.normal_(0.0, 0.1)
            else:
                p.normal_(0.0, 0.3 if "embed" in name else 0.1)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = 0
    model.save_pretrained(folder)
    return model


def image_features(model, inputs: dict, grids: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
    """get_image_features' merged features [features, hidden] and deepstack features [layers, features, hidden]."""
    with torch.no_grad():
        out = model.get_image_features(pixel_values=torch.from_numpy(inputs["pixel_values"]),
                                       image_grid_thw=torch.from_numpy(grids))
    deepstack = np.stack([torch.cat(list(per_layer)).numpy() for per_layer in out.deepstack_features])
    return torch.cat(list(out.pooler_output)), deepstack


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_components_match_transformers(tmp_path, export_model, support_matrix, fmt, variant):
    model = build(tmp_path / "model", variant)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt)
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["task"] == "image-text-to-text"
    tower = ({"vision_embeddings", "vision_embeddings_pos", "vision_embeddings_merger"} if fmt == "openvino"
             else {"vision_encoder"})  # OpenVINO GenAI's split
    assert set(manifest["components"]) == {*tower, "token_embedding", "text_decoder"}
    assert manifest["image_tokens"] == {"image_token_id": IMAGE, "features_per_image": 0, "rope_index": "qwen2_vl",
                                        "spatial_merge_size": MERGE, "vision_start_token_id": START}
    grids = GRIDS if fmt != "executorch" else GRIDS[1:]
    inputs = inputs_for([[5, *image_tokens(grids[0]), 6, 7], [8, *image_tokens(grids[-1]), 9]][:len(grids)], grids)
    expected, deepstack_expected = image_features(model, inputs, grids)
    got = vision_encoder(out)({"pixel_values": inputs["pixel_values"], "image_grid_thw": grids})
    np.testing.assert_allclose(got["image_features"], expected.numpy(), rtol=1e-4, atol=1e-4)
    assert got["deepstack_features"].shape == (len(DEEPSTACK[VARIANTS[variant][1]]), len(expected), 64)
    np.testing.assert_allclose(got["deepstack_features"], deepstack_expected, rtol=1e-4, atol=1e-4)
    err = max(float(np.abs(got["image_features"] - expected.numpy()).max()),
              float(np.abs(got["deepstack_features"] - deepstack_expected).max()))

    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    with torch.no_grad():
        positions, _ = model.model.get_rope_index(torch.from_numpy(ids), torch.from_numpy(inputs["mm_token_type_ids"]),
                                                  image_grid_thw=torch.from_numpy(grids),
                                                  attention_mask=torch.from_numpy(mask))
    # Against the model's whole forward (its own image and deepstack features, M-RoPE positions).
    embeds, decoder_err = check_text_decoder(out, model, ids, mask, expected, IMAGE, positions.numpy(), reference=inputs,
                                             visual_pos_masks=ids == IMAGE, deepstack_visual_embeds=deepstack_expected)
    embed = component(out, "token_embedding")
    if fmt == "openvino":  # GenAI's text embeddings model: the ids alone
        np.testing.assert_array_equal(embed({"input_ids": ids})["inputs_embeds"],
                                      model.get_input_embeddings()(torch.from_numpy(ids)).detach().numpy())
    else:
        np.testing.assert_array_equal(embed({"input_ids": ids, "image_features": expected.numpy()})["inputs_embeds"], embeds)
    support_matrix.record(VARIANTS[variant][0], f"image-text-to-text components ({VARIANTS[variant][1]})", True,
                          max(err, decoder_err), backend=fmt)


GENERATIONS = {
    "one-image": ([[5, *image_tokens(GRIDS[1]), 6, 7]], GRIDS[1:]),
    "two-images": ([[5, *image_tokens(GRIDS[0]), 6, *image_tokens(GRIDS[1]), 7]], GRIDS),
    "no-image": ([[5, 6, 7, 11]], None),
    "left-padded-batch": ([[5, *image_tokens(GRIDS[0]), 6, 7, 8, 9], [*image_tokens(GRIDS[1]), 12]], GRIDS),
}


@pytest.mark.parametrize("case", list(GENERATIONS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_generation_matches_transformers(tmp_path, export_model, support_matrix, fmt, case):
    rows, grids = GENERATIONS[case]
    if fmt == "executorch" and len(rows) > 1:
        pytest.skip("covered on the other formats; the .pte's batch is exercised by its dynamic cache elsewhere")
    model = build(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt, "--for-generation")
    assert_generates_like(model, out, inputs_for(rows, grids))
    support_matrix.record("qwen3_vl", f"generate ({case})", True, 0.0, backend=fmt)


def hub_experts(folder):
    """The experts as the Hub's Qwen3-VL-MoE checkpoints store them, [experts, in, out]
    (save_pretrained writes transformers' modules, [experts, out, in]); transformers transposes them
    back when it loads."""
    import safetensors.torch as st

    tensors = st.load_file(folder / "model.safetensors")
    st.save_file({k: v.transpose(1, 2).contiguous() if k.endswith(("experts.gate_up_proj", "experts.down_proj")) else v
                  for k, v in tensors.items()}, folder / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize("experts", ["hub", "modules"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_moe_generation_matches_transformers(tmp_path, export_model, support_matrix, fmt, experts):
    """Qwen3-VL-MoE with two images, its experts as the Hub stores them ([experts, hidden,
    2 x intermediate], which transformers loads into the same model) and as save_pretrained writes them."""
    import transformers

    if experts == "modules" and fmt != "onnx":
        pytest.skip("the weight layout is read by the frontend: one format shows it")
    model = build(tmp_path / "model", "moe")
    if experts == "hub":
        hub_experts(tmp_path / "model")
        loaded = transformers.Qwen3VLMoeForConditionalGeneration.from_pretrained(tmp_path / "model")
        assert torch.equal(loaded.model.language_model.layers[0].mlp.experts.gate_up_proj,
                           model.model.language_model.layers[0].mlp.experts.gate_up_proj)
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", fmt, "--for-generation")
    assert_generates_like(model, out, inputs_for(*GENERATIONS["two-images"]))
    support_matrix.record("qwen3_vl_moe", f"generate (two-images, {experts} experts)", True, 0.0, backend=fmt)


def hub_4x_config(folder):
    """The config as the Hub's Qwen3-VL checkpoints carry it (transformers 4.57): the text model's RoPE
    in rope_scaling with rope_theta beside it, the tower's model_type "qwen3_vl"."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    text = config["text_config"]
    rope = text.pop("rope_parameters")
    text["rope_theta"] = rope.pop("rope_theta")
    text["rope_scaling"] = rope
    config["vision_config"]["model_type"] = "qwen3_vl"
    path.write_text(json.dumps(config))


def test_hub_4x_config(tmp_path, export_model):
    model = build(tmp_path / "model")
    hub_4x_config(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "onnx", "--for-generation")
    assert_generates_like(model, out, inputs_for(*GENERATIONS["two-images"]))


REFUSALS = {
    "position-grid": (lambda c: c["vision_config"].update(num_position_embeddings=15),
                      ["num_position_embeddings", "15 is not a square grid"]),
    "deepstack-block": (lambda c: c["vision_config"].update(deepstack_visual_indexes=[0, 3]),
                        ["deepstack_visual_indexes", "block 3"]),
    "deepstack-layers": (lambda c: c["vision_config"].update(deepstack_visual_indexes=[0, 1, 2, 2]),
                         ["deepstack", "4", "3"]),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals(tmp_path, run_hfexport, case):
    edit, mentions = REFUSALS[case]
    build(tmp_path / "model")
    path = tmp_path / "model" / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))
    out = tmp_path / "out"
    assert_clean_error(run_hfexport("export", tmp_path / "model", "-o", out), out, *mentions)


def test_missing_deepstack_weight(tmp_path, run_hfexport):
    build(tmp_path / "model")
    assert_missing_tensor_refused(tmp_path / "model", run_hfexport, "model.visual.deepstack_merger_list.1.linear_fc2.weight")


def with_processor(folder):
    """The model (its special token ids the tokenizer's) and a Qwen2VLProcessor (Qwen3-VL's image
    processor class) at the tower's patching."""
    processor = save_processor(folder)
    ids = processor.tokenizer.convert_tokens_to_ids
    model = build(folder, vocab=len(processor.tokenizer), image=ids("<|image_pad|>"), video=ids("<|video_pad|>"),
                  start=ids("<|vision_start|>"), end=ids("<|vision_end|>"), eos=ids("<|im_end|>"))
    processor.image_processor.save_pretrained(folder)
    processor.tokenizer.save_pretrained(folder)
    return model, processor


def test_cli_and_api_generate_with_image_files(tmp_path, export_model, run_hfexport):
    """`hfexport generate OUT --image F --prompt T` and ExportedModel.generate(text, images=[...],
    chat=True): the image preprocessed as Qwen2VLImageProcessor does (Qwen3-VL's processor class),
    its placeholder expanded per merged patch, the deepstack features at those tokens; transformers' text."""
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

    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "the cat"}]}]
    text = processor.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=text, images=[Image.open(files[1])], return_tensors="pt")
    got = ExportedModel(out).generate("the cat", images=[files[1]], chat=True, max_new_tokens=6, ignore_eos=True)
    assert got == reference_text(model, processor, inputs, 6)


def test_openvino_genai_vlm_pipeline(tmp_path, export_model):
    """OpenVINO GenAI's VLMPipeline loads the OpenVINO export as it is: the tower as its split
    (vision_embeddings, vision_embeddings_pos, whose rows it weights and adds itself, and
    vision_embeddings_merger with the deepstack features), the language model taking
    visual_pos_masks and deepstack_visual_embeds (through its paged-attention conversion, which
    feeds the mask as [1, tokens]); transformers' text for an image and a prompt. (VLMPipeline has
    no qwen3_vl_moe type.)"""
    pytest.importorskip("openvino_genai")
    from test_llava import vlm_pipeline_text

    model, processor = with_processor(tmp_path / "model")
    out = export_model(tmp_path / "model", tmp_path / "out", "--format", "openvino", "--for-generation")
    prompt = "<|vision_start|><|image_pad|><|vision_end|>the cat"
    inputs = processor(text=prompt, images=[genai_image()], return_tensors="pt")
    assert vlm_pipeline_text(out, processor.tokenizer, genai_image(), prompt, 6) == reference_text(model, processor, inputs, 6)
