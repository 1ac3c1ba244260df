"""The decoder families beyond Llama, as the Hub ships them: checkpoint layouts other than what
transformers 5.x saves (GPT-2 without the "transformer." prefix and with its old mask buffers,
GPT-NeoX's head named lm_head), transformers 4.x config styles (Gemma-3's rope_local_base_freq,
GPT-NeoX's rotary_pct / rotary_emb_base, Phi-3's "su" longrope, no layer_types), guards that each
feature the parity cases rely on changes transformers' logits, and one-line refusals of config
values the export cannot honour.

Every export is compared with transformers eager in onnxruntime (logits within 1e-4 on a
left-padded batch), as in test_onnx_parity.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import assert_clean_error
from safetensors.torch import load_file, save_file
from test_onnx_parity import BASE, hf_logits, make_inputs, masked_max_abs_diff, verify_export
from tiny_configs import ARCHITECTURES, TOKENS, case, longrope
from transformers import AutoConfig


def tiny_case(make_tiny_model, tmp_path: Path, name: str, **extra):
    c = case(name)
    return make_tiny_model(tmp_path / "hf", c.model_type, {**BASE, **c.overrides, **extra})


def rewrite_weights(model_dir: Path, fn) -> None:
    path = model_dir / "model.safetensors"
    tensors = load_file(str(path))
    save_file(fn(tensors), str(path), metadata={"format": "pt"})


def edit_config(model_dir: Path, fn) -> dict:
    path = model_dir / "config.json"
    cfg = json.loads(path.read_text())
    fn(cfg)
    path.write_text(json.dumps(cfg, indent=2))
    return cfg


def check(support_matrix, export_model, model_type, variant, model_dir, model, tmp_path, *extra):
    verify_export(support_matrix=support_matrix, export_model=export_model, model_type=model_type, variant=variant,
                  model_dir=model_dir, ref_model=model, out_dir=tmp_path / "out", extra_args=extra)


# --------------------------------------------------------------------------------------------
# Hub checkpoint layouts


def test_gpt2_hub_layout_without_prefix_and_with_mask_buffers(tmp_path, make_tiny_model, export_model, support_matrix):
    """openai-community/gpt2 stores wte.weight, h.0.attn.c_attn.weight, ... and each layer's
    attn.bias / attn.masked_bias causal-mask buffers."""
    model_dir, model = tiny_case(make_tiny_model, tmp_path, "gpt2-tied-gelu_new")
    n = model.config.n_positions

    def hub(tensors):
        out = {k.removeprefix("transformer."): v for k, v in tensors.items()}
        for i in range(model.config.n_layer):
            out[f"h.{i}.attn.bias"] = torch.tril(torch.ones(n, n, dtype=torch.uint8)).view(1, 1, n, n)
            out[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
        return out

    rewrite_weights(model_dir, hub)
    assert "wte.weight" in load_file(str(model_dir / "model.safetensors"))
    check(support_matrix, export_model, "gpt2", "hub-no_prefix-mask_buffers", model_dir, model, tmp_path)


def test_gpt_neox_head_saved_as_lm_head(tmp_path, make_tiny_model, export_model, support_matrix):
    """transformers saves the head as embed_out.weight; a checkpoint re-saved from a loaded one
    may carry lm_head.weight instead."""
    model_dir, model = tiny_case(make_tiny_model, tmp_path, "gpt_neox-parallel-rotary_pct0.25")
    rewrite_weights(model_dir, lambda t: {("lm_head.weight" if k == "embed_out.weight" else k): v for k, v in t.items()})
    check(support_matrix, export_model, "gpt_neox", "hub-lm_head_name", model_dir, model, tmp_path)


def test_mamba2_legacy_embedding_name(tmp_path, make_tiny_model, export_model, support_matrix):
    """Mamba2 checkpoints converted from the original code store backbone.embedding.weight, which
    Mamba2Model's load hook reads as backbone.embeddings.weight."""
    model_dir, model = tiny_case(make_tiny_model, tmp_path, "mamba2-heads4-groups1-conv3-bias-tied-dt_limit")
    rewrite_weights(model_dir, lambda t: {k.replace("backbone.embeddings.", "backbone.embedding."): v for k, v in t.items()})
    assert "backbone.embedding.weight" in load_file(str(model_dir / "model.safetensors"))
    check(support_matrix, export_model, "mamba2", "hub-legacy_embedding_name", model_dir, model, tmp_path)


@pytest.mark.parametrize("model_type, text_case, moe", [
    ("qwen3_5", "qwen3_5_text-gqa-khead2-vhead4-conv4-rope_half", {}),
    ("qwen3_5_moe", "qwen3_5_text-mha-interval2-conv3-equal_heads-bias-tied",
     dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32)),
])
def test_qwen3_5_vision_language_checkpoint_as_causal_lm(model_type, text_case, moe, tmp_path, export_model,
                                                          support_matrix, monkeypatch):
    """Qwen3.5 (and -MoE) ship as vision-language checkpoints: config.json's text_config,
    model.language_model.* beside model.visual.* and the multi-token-prediction mtp.* tensors.
    AutoModelForCausalLM loads the text model alone from them; so does the export."""
    from conftest import build_tiny_model
    from transformers import AutoModelForCausalLM

    c = case(text_case)
    text = {**BASE, **c.overrides, **moe}
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4, out_hidden_size=BASE["hidden_size"])
    model_dir, _ = build_tiny_model(tmp_path / "hf", model_type, dict(text_config=text, vision_config=vision),
                                    causal_lm=False)
    rewrite_weights(model_dir, lambda t: {**t, "mtp.fc.weight": torch.zeros(4, 4)})
    stored = load_file(str(model_dir / "model.safetensors"))
    assert any(k.startswith("model.visual.") for k in stored) and "model.language_model.embed_tokens.weight" in stored
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32).eval()
    # The manifest records the checkpoint's own architectures.
    monkeypatch.setitem(ARCHITECTURES, model_type, json.loads((model_dir / "config.json").read_text())["architectures"][0])
    assert type(model).__name__.endswith("ForCausalLM"), type(model)
    check(support_matrix, export_model, model_type, "hub-vision_language_checkpoint", model_dir, model, tmp_path)


def test_qwen3_5_vision_language_checkpoint_tied_by_its_own_flag(tmp_path, export_model, support_matrix, monkeypatch):
    """tie_word_embeddings true at the top, false in text_config, no lm_head.weight stored: the
    vision-language model ties its head (AutoModelForCausalLM would leave it random), so the export
    ties it; the reference is the vision-language model's own text-only forward."""
    from conftest import build_tiny_model

    c = case("qwen3_5_text-gqa-khead2-vhead4-conv4-rope_half")
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4, out_hidden_size=BASE["hidden_size"])
    model_dir, model = build_tiny_model(tmp_path / "hf", "qwen3_5",
                                        dict(text_config={**BASE, **c.overrides, "tie_word_embeddings": False},
                                             vision_config=vision, tie_word_embeddings=True), causal_lm=False)
    assert "lm_head.weight" not in load_file(str(model_dir / "model.safetensors"))
    assert model.lm_head.weight.data_ptr() == model.model.language_model.embed_tokens.weight.data_ptr()
    # The vision-language model's text path: its language model and its (tied) head.
    from transformers import Qwen3_5ForCausalLM

    text_lm = Qwen3_5ForCausalLM(model.config.text_config).eval()
    text_lm.model.load_state_dict(model.model.language_model.state_dict())
    text_lm.lm_head.weight = model.lm_head.weight
    monkeypatch.setitem(ARCHITECTURES, "qwen3_5", "Qwen3_5ForConditionalGeneration")
    check(support_matrix, export_model, "qwen3_5", "hub-vision_language_tied_at_top", model_dir, text_lm, tmp_path)


def test_tied_config_with_a_different_lm_head_stored(tmp_path, make_tiny_model, export_model, support_matrix):
    """tie_word_embeddings true, yet the checkpoint holds an lm_head.weight unlike the embeddings:
    transformers then keeps both (and warns), so the export reads lm_head.weight."""
    from transformers import AutoModelForCausalLM

    model_dir, _ = tiny_case(make_tiny_model, tmp_path, "qwen3_5_text-mha-interval2-conv3-equal_heads-bias-tied")
    torch.manual_seed(7)
    rewrite_weights(model_dir, lambda t: {**t, "lm_head.weight": torch.randn_like(t["model.embed_tokens.weight"]) * 0.08})
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32).eval()
    assert model.config.tie_word_embeddings and not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    check(support_matrix, export_model, "qwen3_5_text", "tied-different_lm_head", model_dir, model, tmp_path)


# --------------------------------------------------------------------------------------------
# transformers 4.x config styles: the 5.x model's reference, the 4.x keys in config.json


def _gemma3_4x(c):
    c.pop("rope_parameters")
    c.update(rope_theta=10000.0, rope_local_base_freq=100.0, rope_scaling={"rope_type": "linear", "factor": 2.0})
    c.pop("layer_types")  # derived from sliding_window_pattern


def _neox_4x(c):
    c.pop("rope_parameters")
    c.update(rotary_pct=0.5, rotary_emb_base=500.0)


def _phi3_su(c):
    c.pop("rope_parameters", None)
    c["rope_scaling"] = {"type": "su", **{k: v for k, v in longrope(12, 8)["rope_scaling"].items() if k != "rope_type"}}


LEGACY = [
    ("gemma3_text", "legacy4x-rope_local_base_freq-rope_scaling",
     dict(num_key_value_heads=2, head_dim=16, sliding_window=4, sliding_window_pattern=2, rope_theta=10000.0,
          rope_local_base_freq=100.0, rope_scaling={"rope_type": "linear", "factor": 2.0}), _gemma3_4x),
    ("gpt_neox", "legacy4x-rotary_pct-rotary_emb_base", dict(rotary_pct=0.5, rotary_emb_base=500.0), _neox_4x),
    ("gemma2", "legacy4x-no_layer_types", dict(num_key_value_heads=2, head_dim=16, sliding_window=4),
     lambda c: c.pop("layer_types")),
    ("smollm3", "legacy4x-no_layer_types-no_rope_layers",
     dict(num_hidden_layers=3, no_rope_layer_interval=3, use_sliding_window=True, sliding_window=4),
     lambda c: [c.pop("layer_types"), c.pop("no_rope_layers")]),
    ("phi3", "legacy4x-rope_type_su",
     dict(num_key_value_heads=2, partial_rotary_factor=0.75, **longrope(12, 8)), _phi3_su),
]


@pytest.mark.parametrize("model_type,variant,overrides,edit", LEGACY, ids=[f"{m}-{v}" for m, v, _, _ in LEGACY])
def test_legacy_config(model_type, variant, overrides, edit, tmp_path, make_tiny_model, export_model, support_matrix):
    model_dir, model = make_tiny_model(tmp_path / "hf", model_type, {**BASE, **TOKENS, **overrides})
    edit_config(model_dir, edit)
    if model_type != "phi3":  # transformers 5.24 itself cannot load "su" (KeyError on the missing length)
        reloaded = AutoConfig.from_pretrained(model_dir)
        assert reloaded.rope_parameters == model.config.rope_parameters
        assert getattr(reloaded, "layer_types", None) == getattr(model.config, "layer_types", None)
    check(support_matrix, export_model, model_type, variant, model_dir, model, tmp_path)


# --------------------------------------------------------------------------------------------
# Guards: each feature changes transformers' logits for the test batch

GUARDS = [
    ("granite", dict(embedding_multiplier=6.0, residual_multiplier=0.4, attention_multiplier=0.35, logits_scaling=3.0),
     dict()),
    ("smollm3", dict(no_rope_layer_interval=2), dict(no_rope_layer_interval=100)),
    ("gemma2", dict(head_dim=16, attn_logit_softcapping=2.0, final_logit_softcapping=None),
     dict(head_dim=16, attn_logit_softcapping=None, final_logit_softcapping=None)),
    ("gemma2", dict(head_dim=16, final_logit_softcapping=4.0), dict(head_dim=16, final_logit_softcapping=None)),
    ("gemma3_text", dict(head_dim=16, sliding_window_pattern=2, rope_local_base_freq=100.0),
     dict(head_dim=16, sliding_window_pattern=2, rope_local_base_freq=1e6)),
    ("gpt_neox", dict(use_parallel_residual=True), dict(use_parallel_residual=False)),
    # At the forward suite's weight scale GPT-2's scores are too small for this to show: the
    # generation suite (weight std 0.2) runs the case, so the guard checks at that scale.
    ("gpt2", dict(n_inner=96, scale_attn_by_inverse_layer_idx=True, weight_std=0.2), dict(n_inner=96, weight_std=0.2)),
    ("phi3", dict(**longrope(16, 8)), dict(**longrope(16, 16))),  # long vs short factors
    ("olmo2", dict(), None),  # q/k norm weights: compared with them set to one
]


@pytest.mark.parametrize("model_type,with_,without", GUARDS, ids=[f"{g[0]}-{i}" for i, g in enumerate(GUARDS)])
def test_feature_changes_reference_logits(model_type, with_, without, tmp_path, make_tiny_model):
    with_ = dict(with_)
    std = with_.pop("weight_std", 0.08)
    _, a = make_tiny_model(tmp_path / "a", model_type, {**BASE, **TOKENS, **with_}, weight_std=std)
    if without is None:
        import copy

        b = copy.deepcopy(a)
        with torch.no_grad():
            for name, p in b.named_parameters():
                if "q_norm" in name or "k_norm" in name:
                    p.fill_(1.0)
    else:
        without = {k: v for k, v in without.items() if k != "weight_std"}
        _, b = make_tiny_model(tmp_path / "b", model_type, {**BASE, **TOKENS, **without}, weight_std=std)
    inputs = make_inputs(BASE["vocab_size"])
    assert masked_max_abs_diff(hf_logits(a, inputs), hf_logits(b, inputs), inputs[1]) > 1e-3


# --------------------------------------------------------------------------------------------
# Config values the export cannot honour: one line naming the key, nothing written

REFUSALS = [
    # (gemma3_text's bidirectional masks: test_mask_patterns.py)
    ("gemma2-gqa-softcaps-sliding_window4", lambda c: c.update(use_bidirectional_attention=True),
     "use_bidirectional_attention"),
    ("gpt2-tied-gelu_new", lambda c: c.update(add_cross_attention=True), "add_cross_attention"),
    ("phi3-gqa-sliding_window4", lambda c: c.update(rope_parameters={"rope_type": "linear", "factor": 2.0}), "phi3"),
    ("phi3-gqa-sliding_window4",
     lambda c: c.update(original_max_position_embeddings=8,
                        rope_parameters={"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}),
     "short_factor"),
    ("smollm3-gqa-nope_interval2", lambda c: c.update(no_rope_layers=[1]), "no_rope_layers"),
    ("gemma2-gqa-softcaps-sliding_window4", lambda c: c.update(layer_types=["full_attention", "chunked"]),
     "layer_types"),
    ("gemma3_text-gqa-sliding_window4-pattern2",
     lambda c: c.update(rope_parameters={"rope_type": "default", "rope_theta": 1e4}), "rope_parameters"),
    ("gpt_neox-parallel-rotary_pct0.25", lambda c: c["rope_parameters"].update(partial_rotary_factor=1.5),
     "partial_rotary_factor"),
    ("granite-gqa-multipliers", lambda c: c.update(logits_scaling=0), "logits_scaling"),
    ("gemma-mqa-head_dim16", lambda c: c.update(hidden_act="relu6"), "hidden_act"),
    ("mixtral-gqa-experts4-top2", lambda c: c.update(num_experts_per_tok=5), "num_experts_per_tok"),
    ("mixtral-gqa-experts4-top2", lambda c: c.update(hidden_act="gelu"), "hidden_act"),
    ("qwen3_moe-gqa-experts4-top2-norm_topk", lambda c: c.update(mlp_only_layers=[7]), "mlp_only_layers"),
    ("gpt_oss-gqa-sinks-window4-experts4-top2",
     lambda c: c.update(quantization_config={"quant_method": "gptq", "bits": 4}), "quantization_config"),
    ("phi3-gqa-sliding_window4", lambda c: c.update(quantization_config={"quant_method": "awq"}), "quantization_config"),
]


@pytest.mark.parametrize("name,edit,mention", REFUSALS, ids=[f"{n.split('-')[0]}-{m}" for n, _, m in REFUSALS])
def test_config_refused(name, edit, mention, tmp_path, make_tiny_model, run_hfexport):
    model_dir, _ = tiny_case(make_tiny_model, tmp_path, name)
    edit_config(model_dir, edit)
    out = tmp_path / "exports" / "out"
    assert_clean_error(run_hfexport("export", model_dir, "-o", out), out, mention, "config.json")


# --------------------------------------------------------------------------------------------
# Mixture-of-experts checkpoint layouts


@pytest.mark.parametrize("name", ["mixtral-gqa-experts4-top2", "qwen3_moe-gqa-experts4-top2-norm_topk",
                                  "lfm2_moe-conv3-experts4-top2-expert_bias-dense1"])
def test_moe_fused_expert_layout(name, tmp_path, make_tiny_model, export_model, support_matrix):
    """transformers saves Mixtral / Qwen3-MoE experts per expert (as the Hub has them; the other
    parity cases read those); save_pretrained(save_original_format=False) writes its fused
    in-memory tensors (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I])."""
    model_dir, model = tiny_case(make_tiny_model, tmp_path, name)
    fused_dir = tmp_path / "fused"
    model.save_pretrained(fused_dir, save_original_format=False)
    names = load_file(str(fused_dir / "model.safetensors")).keys()
    assert any(k.endswith(".experts.gate_up_proj") for k in names), sorted(names)[:8]
    c = case(name)
    check(support_matrix, export_model, c.model_type, "fused-experts", fused_dir, model, tmp_path)


FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)


def to_mxfp4(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[..., rows, K] floats -> (blocks [..., rows, K/32, 16] u8, scales [..., rows, K/32] u8): per
    block of 32, the E8M0 exponent that fits its largest |value| in FP4's 6, codes rounded to the
    nearest FP4 value, two per byte with the even element in the low nibble."""
    g = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    top = np.abs(g).max(-1, keepdims=True)
    exp = np.ceil(np.log2(np.maximum(top, 1e-30) / 6.0)).clip(-127, 127)
    codes = np.abs(g[..., None] / np.exp2(exp)[..., None] - FP4).argmin(-1).astype(np.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks.astype(np.uint8), (exp[..., 0] + 127).astype(np.uint8)


def test_gpt_oss_mxfp4_experts(tmp_path, make_tiny_model, export_model, support_matrix):
    """gpt-oss as the Hub ships it: expert weights as MXFP4 *_blocks / *_scales ([out, in] rows),
    quantization_config mxfp4. The reference is transformers loading that very checkpoint (it
    dequantizes MXFP4 on CPU)."""
    from transformers import AutoModelForCausalLM

    model_dir, _ = tiny_case(make_tiny_model, tmp_path, "gpt_oss-gqa-sinks-window4-experts4-top2")

    def hub(tensors):
        out = {}
        for k, v in tensors.items():
            if k.endswith(("experts.gate_up_proj", "experts.down_proj")):
                blocks, scales = to_mxfp4(v.float().numpy().transpose(0, 2, 1))  # [E, in, out] -> [E, out, in]
                out[k + "_blocks"] = torch.from_numpy(np.ascontiguousarray(blocks))
                out[k + "_scales"] = torch.from_numpy(np.ascontiguousarray(scales))
            else:
                out[k] = v
        return out

    rewrite_weights(model_dir, hub)
    edit_config(model_dir, lambda c: c.update(quantization_config={
        "quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                            "model.embed_tokens", "lm_head"]}))
    ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    experts = ref.model.layers[0].mlp.experts
    assert experts.gate_up_proj.dtype in (torch.float32, torch.bfloat16), type(experts)
    check(support_matrix, export_model, "gpt_oss", "hub-mxfp4-experts", model_dir, ref.float(), tmp_path)
