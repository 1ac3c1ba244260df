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
}


def rope(rope_type: str, theta: float = 10000.0, **kw) -> dict:
    """5.x-style rope_parameters overrides."""
    return {"rope_parameters": {"rope_type": rope_type, "rope_theta": theta, **kw}}


LLAMA3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)
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


def _case(model_type: str, variant: str, overrides: dict, *suites: str) -> TinyCase:
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
