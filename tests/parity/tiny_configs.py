"""The one registry of tiny test models, per HF model_type, used by every suite (parity, generation,
quantized, OpenVINO, bad input) and by scripts/export_digest.py.

Each case is a named set of config overrides on TINY_CONFIG, tagged with the suites that run it:
- "forward": plain-forward parity (every config feature of the family at least once);
- "generation": decode-loop parity in every cache mode (two per model type);
- "quantized": int4/int8 weight parity (one per model type).
A new family adds its rows here (and its class name to ARCHITECTURES); the suites pick it up.
"""

from __future__ import annotations

from dataclasses import dataclass

# The tiny decoder every case starts from.
TINY_CONFIG = dict(
    vocab_size=160,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
)

# model_type -> the architectures entry transformers writes for its causal LM.
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "granite": "GraniteForCausalLM",
    "smollm3": "SmolLM3ForCausalLM",
    "starcoder2": "Starcoder2ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "phi3": "Phi3ForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "lfm2": "Lfm2ForCausalLM",
    "lfm2_moe": "Lfm2MoeForCausalLM",
    "granitemoehybrid": "GraniteMoeHybridForCausalLM",
    "mamba2": "Mamba2ForCausalLM",
    "falcon_h1": "FalconH1ForCausalLM",
    "qwen3_5_text": "Qwen3_5ForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM",
    "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM",
}


def rope(rope_type: str, theta: float = 10000.0, **kw) -> dict:
    """5.x-style rope_parameters overrides."""
    return {"rope_parameters": {"rope_type": rope_type, "rope_theta": theta, **kw}}


LLAMA3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)
def longrope(rotary_dim: int, original: int, **kw) -> dict:
    """4.x-style Phi-3 longrope overrides: distinct short and long factors per frequency."""
    half = rotary_dim // 2
    return {"original_max_position_embeddings": original,
            "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0 + 0.1 * i for i in range(half)],
                             "long_factor": [2.0 + 0.5 * i for i in range(half)], **kw}}


YARN = dict(factor=4.0, original_max_position_embeddings=16, beta_fast=32.0, beta_slow=1.0)


@dataclass(frozen=True)
class TinyCase:
    model_type: str
    variant: str
    overrides: dict
    suites: frozenset

    @property
    def name(self) -> str:
        return f"{self.model_type}-{self.variant}"

    @property
    def config(self) -> dict:
        return {**TINY_CONFIG, **self.overrides}


# Special token ids inside the tiny vocabulary, for families whose configuration class defaults
# them to ids of the real vocabulary (the Llama family's defaults already fit).
TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
_DEFAULT_TOKENS_FIT = {"llama", "mistral", "qwen2", "qwen3"}


def _case(model_type: str, variant: str, overrides: dict, *suites: str) -> TinyCase:
    if model_type not in _DEFAULT_TOKENS_FIT:
        overrides = {**TOKENS, **overrides}
    return TinyCase(model_type, variant, overrides, frozenset(suites))


F, G, Q = "forward", "generation", "quantized"

# Together, per family: GQA/MQA/MHA, explicit head_dim != hidden/heads, tied embeddings, biases,
# q/k norm (qwen3), every rope type, sliding windows (shorter than the test prompts).
CASES = [
    # llama
    _case("llama", "gqa-rope_default", dict(num_key_value_heads=2, **rope("default")), F, Q),
    _case("llama", "mqa-rope_linear", dict(num_key_value_heads=1, **rope("linear", factor=2.0)), F),
    _case("llama", "mha-rope_dynamic-maxpos8",
          dict(num_key_value_heads=4, max_position_embeddings=8, **rope("dynamic", factor=2.0)), F),
    _case("llama", "gqa-head_dim32-tied-attn_bias-mlp_bias-rope_llama3",
          dict(num_key_value_heads=2, head_dim=32, tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
               max_position_embeddings=256, **rope("llama3", theta=500000.0, **LLAMA3)), F),
    _case("llama", "gqa-rope_yarn", dict(num_key_value_heads=2, **rope("yarn", **YARN)), F),
    # HF llama's default rope ignores partial_rotary_factor (inv_freq spans the full head_dim):
    # parity here means the exporter must ignore it too.
    _case("llama", "gqa-partial_rotary_0.5", dict(num_key_value_heads=2, **rope("default", partial_rotary_factor=0.5)), F),
    _case("llama", "gqa-tied-rope_llama3",
          dict(num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=256,
               **rope("llama3", theta=500000.0, **LLAMA3)), G),
    _case("llama", "mqa-rope_yarn", dict(num_key_value_heads=1, **rope("yarn", **YARN)), G),
    # mistral (no attention bias in HF mistral)
    _case("mistral", "gqa-sliding_window4", dict(num_key_value_heads=2, sliding_window=4, **rope("default")), F),
    _case("mistral", "mqa-head_dim24", dict(num_key_value_heads=1, head_dim=24, sliding_window=None), F),
    _case("mistral", "mha-tied-rope_linear",
          dict(num_key_value_heads=4, tie_word_embeddings=True, sliding_window=None, **rope("linear", factor=4.0)), F),
    _case("mistral", "gqa-sliding_window4-rope_yarn", dict(num_key_value_heads=2, sliding_window=4, **rope("yarn", **YARN)), F),
    _case("mistral", "gqa-rope_linear", dict(num_key_value_heads=2, sliding_window=None, **rope("linear", factor=2.0)), G),
    _case("mistral", "mha-sliding_window4", dict(num_key_value_heads=4, sliding_window=4, **rope("default")), G),
    _case("mistral", "window4", dict(num_key_value_heads=2, sliding_window=4), Q),
    # qwen2 (q/k/v bias built in)
    _case("qwen2", "gqa-qkv_bias-theta1e6", dict(num_key_value_heads=2, **rope("default", theta=1e6)), F, G),
    _case("qwen2", "mqa-use_sliding_window4-max_window_layers1",
          dict(num_key_value_heads=1, use_sliding_window=True, sliding_window=4, max_window_layers=1), F),
    _case("qwen2", "mha-tied-rope_dynamic-maxpos8",
          dict(num_key_value_heads=4, tie_word_embeddings=True, max_position_embeddings=8, **rope("dynamic", factor=2.0)), F),
    _case("qwen2", "gqa-head_dim32-rope_llama3",
          dict(num_key_value_heads=2, head_dim=32, max_position_embeddings=256, **rope("llama3", **LLAMA3)), F),
    _case("qwen2", "mqa-tied-use_sliding_window4",
          dict(num_key_value_heads=1, tie_word_embeddings=True, use_sliding_window=True, sliding_window=4,
               max_window_layers=1), G),
    _case("qwen2", "bias-tied", dict(num_key_value_heads=2, tie_word_embeddings=True), Q),
    # qwen3 (q/k RMSNorm built in; head_dim defaults to 128 in HF, so always set it)
    _case("qwen3", "gqa-qk_norm-head_dim16", dict(num_key_value_heads=2, head_dim=16, **rope("default", theta=1e6)), F, G),
    _case("qwen3", "mqa-head_dim24-rope_yarn", dict(num_key_value_heads=1, head_dim=24, **rope("yarn", **YARN)), F),
    _case("qwen3", "mha-head_dim32-tied-attn_bias-rope_llama3",
          dict(num_key_value_heads=4, head_dim=32, tie_word_embeddings=True, attention_bias=True,
               max_position_embeddings=256, **rope("llama3", **LLAMA3)), F),
    _case("qwen3", "gqa-use_sliding_window4-max_window_layers1-rope_linear",
          dict(num_key_value_heads=2, head_dim=16, use_sliding_window=True, sliding_window=4, max_window_layers=1,
               **rope("linear", factor=2.0)), F),
    _case("qwen3", "mha-head_dim24-tied-rope_yarn",
          dict(num_key_value_heads=4, head_dim=24, tie_word_embeddings=True, **rope("yarn", **YARN)), G),
    _case("qwen3", "qk_norm", dict(num_key_value_heads=1, head_dim=32), Q),
    # granite (embedding / residual / attention multipliers, logits_scaling)
    _case("granite", "gqa-multipliers",
          dict(num_key_value_heads=2, embedding_multiplier=6.0, residual_multiplier=0.4, attention_multiplier=0.35,
               logits_scaling=3.0), F, G, Q),
    _case("granite", "mqa-tied-attn_bias-mlp_bias-rope_linear",
          dict(num_key_value_heads=1, tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
               attention_multiplier=0.2, **rope("linear", factor=2.0)), F),
    _case("granite", "mha-tied-default_multipliers", dict(num_key_value_heads=4, tie_word_embeddings=True), F, G),
    # smollm3 (NoPE layers; tied by default; sliding windows on layer_types' sliding layers)
    _case("smollm3", "gqa-nope_interval2", dict(num_key_value_heads=2, no_rope_layer_interval=2), F, G, Q),
    _case("smollm3", "mqa-no_rope_layers-sliding_window4",
          dict(num_hidden_layers=3, num_key_value_heads=1, no_rope_layers=[1, 0, 1], use_sliding_window=True,
               sliding_window=4, tie_word_embeddings=False), F, G),
    _case("smollm3", "gqa-attn_bias-mlp_bias-rope_yarn",
          dict(num_key_value_heads=2, attention_bias=True, mlp_bias=True, **rope("yarn", **YARN)), F),
    # starcoder2 (LayerNorm with bias, biases everywhere, plain gelu MLP, sliding window)
    _case("starcoder2", "gqa-bias-sliding_window4", dict(num_key_value_heads=2, sliding_window=4), F, G, Q),
    _case("starcoder2", "mqa-no_bias-untied", dict(num_key_value_heads=1, use_bias=False, tie_word_embeddings=False), F, G),
    # olmo2 (post-norms inside the residual, q/k RMSNorm over the whole projection)
    _case("olmo2", "gqa-qk_norm", dict(num_key_value_heads=2), F, G, Q),
    _case("olmo2", "mha-tied-attn_bias-rope_llama3",
          dict(num_key_value_heads=4, tie_word_embeddings=True, attention_bias=True, max_position_embeddings=256,
               **rope("llama3", **LLAMA3)), F, G),
    # gemma (sqrt(hidden) embeddings, 1 + w RMSNorm, tanh GELU; head_dim defaults to 256 in HF, so set it)
    _case("gemma", "mqa-head_dim16", dict(num_key_value_heads=1, head_dim=16), F, G, Q),
    _case("gemma", "gqa-head_dim32-gelu-untied", dict(num_key_value_heads=2, head_dim=32, hidden_act="gelu",
                                                     tie_word_embeddings=False), F, G),
    # gemma2 (sandwich norms, attention and final softcaps, query_pre_attn_scalar, alternating window)
    _case("gemma2", "gqa-softcaps-sliding_window4",
          dict(num_key_value_heads=2, head_dim=16, sliding_window=4, query_pre_attn_scalar=24,
               attn_logit_softcapping=2.0, final_logit_softcapping=4.0), F, G, Q),
    _case("gemma2", "mqa-no_softcaps-layer_types",
          dict(num_hidden_layers=3, num_key_value_heads=1, head_dim=16, sliding_window=4,
               layer_types=["full_attention", "sliding_attention", "sliding_attention"],
               attn_logit_softcapping=None, final_logit_softcapping=None), F, G),
    # gemma3_text (q/k norm, local and global RoPE, sliding_window_pattern, final softcap)
    _case("gemma3_text", "gqa-sliding_window4-pattern2",
          dict(num_key_value_heads=2, head_dim=16, sliding_window=4, sliding_window_pattern=2,
               rope_local_base_freq=100.0, query_pre_attn_scalar=16), F, G, Q),
    _case("gemma3_text", "mqa-rope_linear-final_softcap",
          dict(num_hidden_layers=3, num_key_value_heads=1, head_dim=32, sliding_window=4,
               layer_types=["sliding_attention", "full_attention", "sliding_attention"],
               rope_scaling={"rope_type": "linear", "factor": 2.0}, final_logit_softcapping=4.0), F, G),
    # gpt_neox (parallel residual, partial rotary (default 0.25), per-head fused qkv, LayerNorm)
    _case("gpt_neox", "parallel-rotary_pct0.25", dict(), F, G, Q),
    _case("gpt_neox", "sequential-rotary_pct0.5-no_bias-tied",
          dict(use_parallel_residual=False, rotary_pct=0.5, attention_bias=False, tie_word_embeddings=True), F, G),
    _case("gpt_neox", "rope_linear-full_rotary",
          dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0,
                                "partial_rotary_factor": 1.0}), F),
    # gpt2 (learned positions, Conv1D weights, fused c_attn, LayerNorm, gelu_new; tied by default)
    _case("gpt2", "tied-gelu_new", dict(n_inner=96), F, G, Q),
    _case("gpt2", "untied-scale_by_layer-gelu",
          dict(n_inner=96, tie_word_embeddings=False, scale_attn_by_inverse_layer_idx=True,
               activation_function="gelu"), F, G),
    _case("gpt2", "no_scale_attn_weights-inner_default", dict(scale_attn_weights=False, intermediate_size=None), F),
    # phi3 (fused qkv_proj / gate_up_proj, partial rotary, longrope, sliding window)
    _case("phi3", "gqa-sliding_window4", dict(num_key_value_heads=2, sliding_window=4), F, G, Q),
    _case("phi3", "partial_rotary0.75-longrope_long",  # prompts (12 tokens) reach past 8: long factors
          dict(num_key_value_heads=2, partial_rotary_factor=0.75, **longrope(12, 8)), F),
    _case("phi3", "mha-longrope_short-attention_factor",  # prompts stay within 16: short factors
          dict(num_key_value_heads=4, **longrope(16, 16, attention_factor=1.3)), F),
    _case("phi3", "mqa-partial_rotary0.5-longrope_long-tied",
          dict(num_key_value_heads=1, tie_word_embeddings=True, partial_rotary_factor=0.5, **longrope(8, 4)), G),
    # generation crosses the original length (16): the loop rebuilds its cache there, as transformers
    _case("phi3", "gqa-longrope_switch_during_generation", dict(num_key_value_heads=2, **longrope(16, 16)), G),
    # mixtral (sparse MoE: 4 experts, top-2, renormalised)
    _case("mixtral", "gqa-experts4-top2", dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2), F, G, Q),
    _case("mixtral", "mqa-experts3-top1-sliding_window4",
          dict(num_key_value_heads=1, num_local_experts=3, num_experts_per_tok=1, sliding_window=4), F, G),
    # qwen3_moe (q/k norm; dense layers between MoE ones; norm_topk_prob)
    _case("qwen3_moe", "gqa-experts4-top2-norm_topk", dict(num_key_value_heads=2, head_dim=16, num_experts=4,
                                                         num_experts_per_tok=2, moe_intermediate_size=32,
                                                         norm_topk_prob=True), F, G, Q),
    _case("qwen3_moe", "mha-experts5-top3-sparse_step2-mlp_only0",
          dict(num_hidden_layers=3, num_key_value_heads=4, head_dim=16, num_experts=5, num_experts_per_tok=3,
               moe_intermediate_size=32, decoder_sparse_step=1, mlp_only_layers=[0], norm_topk_prob=False), F, G),
    _case("qwen3_moe", "gqa-sparse_step2-sliding_window4",
          dict(num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
               decoder_sparse_step=2, use_sliding_window=True, sliding_window=4), F),
    # gpt_oss (attention sinks, alternating window, YaRN; biased router, clamped SwiGLU experts)
    _case("gpt_oss", "gqa-sinks-window4-experts4-top2",
          dict(num_key_value_heads=2, head_dim=16, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,
               sliding_window=4), F, G, Q),
    _case("gpt_oss", "mqa-swiglu_limit0.3-top1-layer_types",
          dict(num_hidden_layers=3, num_key_value_heads=1, head_dim=16, intermediate_size=32, num_local_experts=3,
               num_experts_per_tok=1, swiglu_limit=0.3, sliding_window=4,
               layer_types=["full_attention", "sliding_attention", "full_attention"]), F, G),
    # lfm2 (gated short convolutions with convolution state, between GQA layers with q/k norm)
    _case("lfm2", "conv3-gqa-layer_types",
          dict(num_hidden_layers=3, layer_types=["conv", "full_attention", "conv"], block_multiple_of=16), F, G, Q),
    _case("lfm2", "conv4-bias-mha-full_attn_idxs-untied",
          dict(num_hidden_layers=3, full_attn_idxs=[1], conv_L_cache=4, conv_bias=True, num_key_value_heads=4,
               tie_word_embeddings=False, block_auto_adjust_ff_dim=False), F, G),
    # lfm2_moe (lfm2's layers; dense SwiGLU in the first num_dense_layers, then sparse MoE with sigmoid
    # routing chosen by scores + expert_bias, renormalised, routed_scaling_factor)
    _case("lfm2_moe", "conv3-experts4-top2-expert_bias-dense1",
          dict(num_hidden_layers=3, layer_types=["conv", "full_attention", "conv"], num_experts=4, num_experts_per_tok=2,
               moe_intermediate_size=32, num_dense_layers=1), F, G, Q),
    _case("lfm2_moe", "mha-experts5-top3-no_bias-no_norm-scaled-all_moe",
          dict(num_hidden_layers=2, layer_types=["full_attention", "conv"], num_key_value_heads=4, conv_L_cache=4,
               num_experts=5, num_experts_per_tok=3, moe_intermediate_size=32, num_dense_layers=0, use_expert_bias=False,
               norm_topk_prob=False, routed_scaling_factor=2.5, tie_word_embeddings=False), F, G),
    # granitemoehybrid (Mamba2 mixers with conv and SSM state, between attention layers; shared MLP
    # beside GraniteMoe experts; Granite multipliers)
    _case("granitemoehybrid", "mamba-groups2-rope-moe4-4x_names",
          dict(num_hidden_layers=3, layer_types=["mamba", "attention", "mamba"], mamba_n_heads=8, mamba_n_groups=2,
               mamba_d_state=16, mamba_d_conv=4, num_local_experts=4, num_experts_per_tok=2, intermediate_size=32,
               shared_intermediate_size=64, position_embedding_type="rope", embedding_multiplier=2.0,
               residual_multiplier=0.5, attention_multiplier=0.1, logits_scaling=3.0), F, G, Q),
    _case("granitemoehybrid", "dense-nope-conv3-projbias-dt_limit",
          dict(layer_types=["linear_attention", "full_attention"], mamba_n_heads=4, mamba_d_head=32, mamba_n_groups=1,
               mamba_d_state=8, mamba_d_conv=3, mamba_conv_bias=False, mamba_proj_bias=True, num_local_experts=0,
               shared_intermediate_size=48, time_step_limit=[0.01, 0.5]), F, G),
    # mamba2 (pure state space: conv and SSM state per layer, no KV cache)
    _case("mamba2", "heads8-groups2-state16-conv4",
          dict(num_heads=8, head_dim=16, n_groups=2, state_size=16, conv_kernel=4), F, G, Q),
    _case("mamba2", "heads4-groups1-conv3-bias-tied-dt_limit",
          dict(num_hidden_layers=3, num_heads=4, head_dim=32, n_groups=1, state_size=8, conv_kernel=3, use_bias=True,
               use_conv_bias=False, tie_word_embeddings=True, time_step_limit=[0.01, 0.5], residual_in_fp32=False), F, G),
    # falcon_h1 (a Mamba2 mixer beside attention in every layer; muP multipliers)
    _case("falcon_h1", "d_ssm96-groups2-rmsnorm-mup",
          dict(mamba_d_ssm=96, mamba_n_heads=6, mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=4, mamba_rms_norm=True,
               ssm_multipliers=[1.5, 0.5, 2.0, 0.25, 1.2], mlp_multipliers=[0.7, 1.3], key_multiplier=0.8,
               attention_in_multiplier=1.2, attention_out_multiplier=0.9, ssm_in_multiplier=1.1,
               ssm_out_multiplier=0.6, embedding_multiplier=2.0, lm_head_multiplier=0.5), F, G, Q),
    _case("falcon_h1", "expand2-no_rmsnorm-conv3-biases-mha",
          dict(mamba_d_ssm=None, mamba_n_heads=4, mamba_n_groups=1, mamba_d_state=8, mamba_d_conv=3, mamba_rms_norm=False,
               mamba_proj_bias=True, projectors_bias=True, mlp_bias=True, attention_bias=True, num_key_value_heads=4),
          F, G),
    # qwen3_5_text (gated DeltaNet linear attention with conv and recurrent state, between gated
    # full-attention layers with partial RoPE; RMSNorms scale by 1 + w)
    _case("qwen3_5_text", "gqa-khead2-vhead4-conv4-rope_half",
          dict(num_hidden_layers=3, layer_types=["linear_attention", "full_attention", "linear_attention"],
               head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
               linear_value_head_dim=8, linear_conv_kernel_dim=4,
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                                "mrope_section": [2, 1, 1], "mrope_interleaved": True}), F, G, Q),
    _case("qwen3_5_text", "mha-interval2-conv3-equal_heads-bias-tied",
          dict(num_hidden_layers=4, full_attention_interval=2, num_key_value_heads=4, head_dim=16,
               linear_num_key_heads=4, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=16,
               linear_conv_kernel_dim=3, attention_bias=True, tie_word_embeddings=True), F, G),
    # qwen3_next (the same layers, Qwen3-Next's per-key-head projections; sparse MoE with a gated
    # shared expert)
    _case("qwen3_next", "moe4-top2-shared-khead2-vhead4",
          dict(num_hidden_layers=3, layer_types=["linear_attention", "full_attention", "linear_attention"],
               head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
               linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
               shared_expert_intermediate_size=64), F, G, Q),
    _case("qwen3_next", "mlp_only0-top1-no_norm_topk-conv3-mha",
          dict(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"], num_key_value_heads=4,
               head_dim=16, linear_num_key_heads=4, linear_num_value_heads=4, linear_key_head_dim=8,
               linear_value_head_dim=8, linear_conv_kernel_dim=3, num_experts=3, num_experts_per_tok=1,
               moe_intermediate_size=32, shared_expert_intermediate_size=32, norm_topk_prob=False,
               mlp_only_layers=[0], partial_rotary_factor=0.5), F, G),
    # qwen3_5_moe_text (Qwen3.5's layers, every feed-forward the sparse block plus the shared expert)
    _case("qwen3_5_moe_text", "experts4-top1-shared-khead2-vhead4",
          dict(num_hidden_layers=3, layer_types=["linear_attention", "full_attention", "linear_attention"],
               head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
               linear_value_head_dim=8, num_experts=4, num_experts_per_tok=1, moe_intermediate_size=32,
               shared_expert_intermediate_size=64), F, G, Q),
]

_BY_NAME = {c.name: c for c in CASES}
assert len(_BY_NAME) == len(CASES), "duplicate tiny case names"


def cases(suite: str | None = None) -> list[TinyCase]:
    """The cases a suite runs (all of them when `suite` is None), in registry order."""
    return [c for c in CASES if suite is None or suite in c.suites]


def case(name: str) -> TinyCase:
    return _BY_NAME[name]


def model_types() -> list[str]:
    return list(dict.fromkeys(c.model_type for c in CASES))
