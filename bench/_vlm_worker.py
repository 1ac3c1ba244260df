"""The sides of bench/bench_vlm.py. Prints one JSON line.

  build DIR LAYERS DEPTH SEED          (the main venv)
      a Qwen2VLForConditionalGeneration checkpoint in Qwen2-VL-2B-Instruct's shapes (its Hub
      config.json, LAYERS decoder layers, DEPTH vision blocks), random bf16 weights, with a
      tokenizer of the real vocabulary size (byte-level tokens, Qwen's special tokens at their
      ids), Qwen2VLImageProcessor's preprocessor_config.json and Qwen2-VL's chat template.
  export-transformers CKPT OUT         (the main venv)
      transformers.exporters: OpenVINOExporter().export_for_generation(model, processor inputs,
      OpenVINOConfig(dynamic=True, stateful=True)) and save_pretrained, the model in float32.
  time hfexport|vlmpipeline|eager DIR IMAGE NEW REPEATS
      one image + a short prompt through the default path each side's users call, greedy:
        hfexport     ExportedModel(DIR).generate(prompt, images=[IMAGE], chat=True, ...)
        vlmpipeline  openvino_genai.VLMPipeline(DIR, "CPU", f32).generate(prompt, images=[...])
        eager        transformers' generate on AutoProcessor-shaped inputs (float32)
      time to first token = a call with max_new_tokens=1 (preprocessing included); decode
      tokens/s from a call with NEW tokens minus that; medians of REPEATS after a warm-up; every
      call a new image (the base shifted by a pixel more), so no side reuses an earlier call's work.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROMPT = "Describe this image in one sentence."
OV_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}

# Qwen/Qwen2-VL-2B-Instruct's config.json (transformers 4.x layout), layer counts from the caller.
QWEN2_VL_2B = {
    "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
    "vision_start_token_id": 151652, "vision_end_token_id": 151653, "vision_token_id": 151654,
    "image_token_id": 151655, "video_token_id": 151656, "hidden_act": "silu", "hidden_size": 1536,
    "initializer_range": 0.02, "intermediate_size": 8960, "max_position_embeddings": 32768,
    "max_window_layers": 28, "num_attention_heads": 12, "num_hidden_layers": 28, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                      "hidden_size": 1536, "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14,
                      "temporal_patch_size": 2},
}
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                  "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                  "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]  # ids 151643...
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
IMAGE_PROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor",
    "do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "do_convert_rgb": True, "resample": 3, "min_pixels": 3136, "max_pixels": 12845056,
    "size": {"shortest_edge": 3136, "longest_edge": 12845056}, "patch_size": 14, "temporal_patch_size": 2,
    "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711]}


def config_for(layers: int, depth: int) -> dict:
    config = json.loads(json.dumps(QWEN2_VL_2B))
    config["num_hidden_layers"] = config["max_window_layers"] = layers
    config["vision_config"]["depth"] = depth
    return config


def save_tokenizer(folder: Path, vocab_size: int) -> None:
    """A byte-level BPE over the 256 byte symbols and fillers up to Qwen2's base vocabulary, so
    every id a random model generates decodes; Qwen's special tokens at their real ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    base = 151643
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    vocab.update({f"<filler_{i}>": i for i in range(len(alphabet), base)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    assert tok.token_to_id("<|image_pad|>") == 151655 and tok.get_vocab_size() <= vocab_size
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)


def build(folder: str, layers: int, depth: int, seed: int) -> dict:
    import torch
    import transformers

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_export import write_random_safetensors

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    config = config_for(layers, depth)
    with torch.device("meta"):
        model = transformers.Qwen2VLForConditionalGeneration(transformers.AutoConfig.for_model(**config))
    specs = sorted((name, tuple(t.shape)) for name, t in model.state_dict().items() if name != "lm_head.weight")
    write_random_safetensors(out / "model.safetensors", specs, seed)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643, "do_sample": False}) + "\n")
    (out / "preprocessor_config.json").write_text(json.dumps(IMAGE_PROCESSOR, indent=2) + "\n")
    (out / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}) + "\n")
    save_tokenizer(out, config["vocab_size"])
    return {"parameters": sum(int(np.prod(shape)) for _, shape in specs)}


def processor(folder: str):
    """Qwen2VLProcessor from the checkpoint's files, built without its video processor (whose class
    check wants torchvision, which this venv does not have)."""
    import transformers

    images = transformers.AutoImageProcessor.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    check = transformers.ProcessorMixin.check_argument_for_proper_class
    transformers.ProcessorMixin.check_argument_for_proper_class = lambda self, *args: None
    try:
        return transformers.Qwen2VLProcessor(image_processor=images, tokenizer=tokenizer, video_processor=None,
                                             chat_template=CHAT_TEMPLATE)
    finally:
        transformers.ProcessorMixin.check_argument_for_proper_class = check


def processor_inputs(proc, image_path: str) -> dict:
    from PIL import Image

    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}]
    text = proc.apply_chat_template(messages, add_generation_prompt=True)
    return dict(proc(text=[text], images=[Image.open(image_path)], return_tensors="pt"))


def export_transformers(ckpt: str, out: str, image: str) -> dict:
    import torch
    import transformers
    from transformers.exporters.exporter_openvino import OpenVINOConfig, OpenVINOExporter

    timings = {}
    start = time.perf_counter()
    model = transformers.Qwen2VLForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32).eval()
    timings["load_s"] = time.perf_counter() - start
    inputs = processor_inputs(processor(ckpt), image)
    inputs.pop("mm_token_type_ids", None)
    start = time.perf_counter()
    exported = OpenVINOExporter().export_for_generation(model, inputs,
                                                        config=OpenVINOConfig(dynamic=True, stateful=True))
    timings["export_s"] = time.perf_counter() - start
    start = time.perf_counter()
    exported.save_pretrained(out)
    timings["save_s"] = time.perf_counter() - start
    return {**timings, "components": json.loads((Path(out) / "export.json").read_text()).get("components")}


def timed_side(kind: str, folder: str):
    """A function (new_tokens, image file) -> generated token count for the side, loaded once."""
    if kind == "hfexport":
        import hfexport.runner
        from hfexport import ExportedModel

        model = ExportedModel(folder)
        generated = {}
        loop = hfexport.runner.generate

        def counting_loop(*args, **kwargs):  # the default path returns text: count the ids it generated
            new = loop(*args, **kwargs)
            generated["count"] = int(new.shape[1])
            return new
        hfexport.runner.generate = counting_loop  # generate() imports it per call

        def run(new: int, image: str) -> int:
            generated.clear()
            model.generate(PROMPT, images=[image], chat=True, max_new_tokens=new, ignore_eos=True)
            return generated["count"]
        return run
    if kind == "vlmpipeline":
        import openvino as ov
        import openvino_genai
        from PIL import Image

        pipe = openvino_genai.VLMPipeline(folder, "CPU", **OV_CONFIG)

        def run(new: int, image: str) -> int:
            picture = ov.Tensor(np.asarray(Image.open(image).convert("RGB"), np.uint8)[None])
            config = openvino_genai.GenerationConfig()
            config.max_new_tokens = config.min_new_tokens = new
            config.ignore_eos = True
            result = pipe.generate(PROMPT, images=[picture], generation_config=config)
            return int(result.perf_metrics.get_num_generated_tokens())
        return run
    if kind == "eager":
        import torch
        import transformers

        model = transformers.Qwen2VLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
        proc = processor(folder)

        def run(new: int, image: str) -> int:
            inputs = processor_inputs(proc, image)
            with torch.no_grad():
                out = model.generate(**inputs, max_new_tokens=new, min_new_tokens=new, do_sample=False)
            return int(out.shape[1] - inputs["input_ids"].shape[1])
        return run
    raise SystemExit(f"unknown side {kind!r}")


def image_variants(image: str, count: int) -> list[str]:
    """`count` distinct images of the same size (the base shifted by 1, 2, ... pixels): each call
    gets a new image, so no side reuses what an earlier call computed (VLMPipeline keeps the last
    call's KV cache and reuses it for an identical prompt: 0.2 s instead of 4 s of prefill)."""
    from PIL import Image

    base = np.asarray(Image.open(image).convert("RGB"))
    folder = Path(tempfile.mkdtemp(prefix="vlm-images-"))
    paths = []
    for k in range(count):
        path = folder / f"image-{k}.png"
        Image.fromarray(np.ascontiguousarray(np.roll(base, k + 1, axis=1))).save(path)
        paths.append(str(path))
    return paths


def time_side(kind: str, folder: str, image: str, new: int, repeats: int) -> dict:
    start = time.perf_counter()
    run = timed_side(kind, folder)
    load_s = time.perf_counter() - start
    images = iter(image_variants(image, 1 + 2 * repeats))
    run(2, next(images))  # warm-up: compiles, first allocations
    first, full, counts = [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        run(1, next(images))
        first.append(time.perf_counter() - start)
        start = time.perf_counter()
        counts.append(run(new, next(images)))
        full.append(time.perf_counter() - start)
    if any(count != new for count in counts):
        raise SystemExit(f"{kind} generated {counts} tokens, not {new}: its decode rate would be wrong")
    ttft, total = statistics.median(first), statistics.median(full)
    if any(count != new for count in counts):
        raise SystemExit(f"{kind} generated {counts} tokens, not {new}: its decode rate would be wrong")
    return {"load_s": load_s, "ttft_s": ttft, "total_s": total, "new_tokens": counts,
            "decode_tok_s": (new - 1) / max(total - ttft, 1e-9), "ttft_samples": first, "total_samples": full}


def main() -> None:
    task, *rest = sys.argv[1:]
    if task == "build":
        result = build(rest[0], int(rest[1]), int(rest[2]), int(rest[3]))
    elif task == "export-transformers":
        result = export_transformers(*rest)
    elif task == "time":
        result = time_side(rest[0], rest[1], rest[2], int(rest[3]), int(rest[4]))
    else:
        raise SystemExit(f"unknown task {task!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
