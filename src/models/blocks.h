// Blocks shared by decoder families: attention and MLP sub-graphs over HF-named weights. Each
// block declares the weights it reads (through ModelBuilder::weight) as it builds. The specs say
// what differs between families: weight names, fused checkpoints (one qkv or gate_up weight whose
// row ranges are the projections), biases per projection, q/k norms, scale and softcap, gated or
// plain MLPs.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "ir/builder.h"
#include "models/model_builder.h"

namespace hfx {

struct AttentionSpec {
  int64_t hidden, heads, kv_heads, head_dim;
  // Module names under the block's prefix. `qkv` set: one fused [q + k + v, hidden] weight whose
  // rows are q, then k, then v (Phi-3's qkv_proj); q/k/v are then unused.
  std::string q = "q_proj", k = "k_proj", v = "v_proj", o = "o_proj", qkv;
  std::string q_norm = "q_norm", k_norm = "k_norm";  // the per-head norms' modules (qk_norm)
  // How a fused qkv weight orders its rows: [q | k | v] (Phi-3, GPT-2) or per head [heads, 3, D]
  // (GPT-NeoX's query_key_value).
  enum class FusedLayout { Blocked, PerHead };
  FusedLayout qkv_layout = FusedLayout::Blocked;
  bool conv1d = false;   // weights stored [in, out] (GPT-2's Conv1D)
  bool qkv_bias = false, o_bias = false;
  bool k_bias = true;    // with qkv_bias, whether k has one too (Whisper's k_proj has none)
  bool qk_norm = false;  // per-head RMSNorm on q and k before RoPE (qwen3)
  bool qk_norm_whole = false;   // the q/k RMSNorm spans the whole projection, before the head split (OLMo-2)
  bool qk_norm_offset = false;  // the q/k norm weights are stored as offsets from 1 (Gemma-3)
  double norm_epsilon = 1e-6;
  double scale = 0;      // 0: 1 / sqrt(head_dim)
  double k_scale = 1.0;  // keys times this after k_proj (FalconH1's key_multiplier)
  double softcap = 0;    // attention logit softcapping (0: none)
  bool sinks = false;    // a learned logit per head in the softmax (gpt-oss's self_attn.sinks)
  // q_proj holds per head [query | gate] (2 * head_dim rows); the attention output is multiplied
  // by sigmoid(gate) before o_proj (Qwen3-Next, Qwen3.5).
  bool output_gate = false;
};

// Stores a layer's fresh keys/values in the cache; returns what attention reads.
using KvCacheHook = std::function<std::pair<Value*, Value*>(Value* k, Value* v)>;

// What a layer's attention reads besides its input: the RoPE tables (null: no RoPE on this
// layer), the mask of its window, and the cache it appends to.
struct AttentionContext {
  Value* cos = nullptr;
  Value* sin = nullptr;
  Value* mask = nullptr;
  KvCacheHook cache;
  bool causal = true;  // the mask is causal (else bidirectional: see AttentionAttrs::causal)
  Value* bias = nullptr;  // [B or 1, heads, S, T] added to the scores (MPNet's relative positions)
};

// Self-attention over `x` [B, S, hidden] with HF weight names under `prefix` (e.g.
// "model.layers.0.self_attn.": q_proj, k_proj, v_proj, o_proj, q_norm, k_norm).
Value* attention_block(ModelBuilder& m, const std::string& prefix, const AttentionSpec& spec, Value* x,
                       const AttentionContext& ctx);

// Cross-attention (an encoder-decoder's decoder layer), in two parts: the keys and values
// [B, kv_heads, T, head_dim] of the encoder's output `memory` through the k and v projections under
// `prefix` (computed once per input, by the encoder's component), and the queries of `x` over them
// (no RoPE, no causal rule; `mask` null or [B, 1, S, T]) through the out projection.
std::pair<Value*, Value*> cross_keys_values(ModelBuilder& m, const std::string& prefix, const AttentionSpec& spec,
                                            Value* memory);
Value* cross_attention_block(ModelBuilder& m, const std::string& prefix, const AttentionSpec& spec, Value* x,
                             Value* keys, Value* values, Value* mask, Value* bias = nullptr);

struct MlpSpec {
  int64_t hidden, intermediate;
  bool bias = false;
  std::string activation = "silu";  // HF hidden_act, validated by check_activation
  // Gated: down(act(gate(x)) * up(x)); plain: down(act(up(x))) (GPT-2's c_fc / c_proj).
  bool gated = true;
  // Module names under the block's prefix. `gate_up` set: one fused [2 * intermediate, hidden]
  // weight, gate rows first (Phi-3's gate_up_proj).
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj", gate_up;
  bool conv1d = false;  // weights stored [in, out] (GPT-2's Conv1D)
  // The gate's pre-activation and the down projection's output times these (FalconH1's
  // mlp_multipliers).
  double gate_scale = 1.0, down_scale = 1.0;
};

// A Mamba2 mixer's sizes (models/mamba2_mixer.h): heads of head_dim channels, B and C per group
// of heads, state_size per head channel, a causal conv of `kernel` taps.
struct Mamba2Spec {
  int64_t hidden = 0;
  int64_t heads = 0, head_dim = 0, groups = 0, state_size = 0, kernel = 0;
  bool proj_bias = false, conv_bias = true;
  bool out_bias = false;  // out_proj's bias (FalconH1's projectors_bias; else proj_bias)
  double norm_eps = 1e-5;
  // The output gate and norm: RMSNorm per group of y * silu(z) (Mamba2), of y then times silu(z)
  // (FalconH1's mamba_norm_before_gate), or no norm: y * silu(z) (mamba_rms_norm false).
  enum class Gate { GateThenNorm, NormThenGate, GateOnly };
  Gate gate = Gate::GateThenNorm;
  double in_scale = 1.0;  // the mixer's input times this (FalconH1's ssm_in_multiplier)
  // FalconH1's ssm_multipliers: in_proj's z, x, B, C and dt columns times these (empty: none).
  std::vector<double> projection_scales;
  double dt_min = 0.0, dt_max = 0.0;  // time_step_limit; dt_max 0: no upper clamp (inf)
  bool residual_in_fp32 = false;      // Mamba2Block keeps the residual stream in float32
  int64_t intermediate() const { return heads * head_dim; }
  int64_t conv_channels() const { return intermediate() + 2 * groups * state_size; }
};

// A gated DeltaNet mixer's sizes (models/gated_deltanet.h): q/k heads of key_dim, value heads of
// value_dim (each q/k head serves value_heads / key_heads of them), a causal conv of `kernel` taps
// over q, k and v.
struct GatedDeltaSpec {
  int64_t hidden = 0;
  int64_t key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0, kernel = 0;
  double norm_eps = 1e-6;
  // Qwen3.5's projections (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a) or Qwen3-Next's, grouped
  // per key head: in_proj_qkvz [q | k | v | z] and in_proj_ba [b | a] for each.
  enum class Layout { Separate, PerKeyHead };
  Layout layout = Layout::Separate;
  int64_t key_channels() const { return key_heads * key_dim; }
  int64_t value_channels() const { return value_heads * value_dim; }
  int64_t conv_channels() const { return 2 * key_channels() + value_channels(); }
};

// A sparse mixture-of-experts feed-forward block: a router Linear, then each token through its
// top-k experts (the IR's MoE op). Expert weights come in one of the Hub's layouts.
struct MoeSpec {
  int64_t hidden, intermediate, experts, top_k;
  bool normalize = true;  // renormalise the top-k routing weights
  double alpha = 1.0, beta = 0.0, limit = 0.0;  // MoEAttrs' activation
  enum class Layout {
    PerExpert,    // experts.{e}.{gate}/{up}/{down}.weight (Mixtral w1/w3/w2, Qwen3-MoE gate/up/down_proj)
    FusedConcat,  // experts.gate_up_proj [E, 2I, H] (gate rows, then up rows), experts.down_proj [E, H, I]
    FusedInterleavedIn,  // gpt-oss: experts.gate_up_proj [E, H, 2I] (gate / up columns interleaved), down_proj
                         // [E, I, H], with _bias tensors
    Mxfp4,        // gpt-oss on the Hub: the same as *_blocks / *_scales ([out, in] rows), biases as above
    FusedConcatIn,  // Qwen3-VL-MoE on the Hub: experts.gate_up_proj [E, H, 2I] (gate columns, then up),
                    // experts.down_proj [E, I, H]
  };
  Layout layout = Layout::PerExpert;
  std::string router = "gate", gate = "gate_proj", up = "up_proj", down = "down_proj";
  // The fused layouts' tensors under the block's prefix (GraniteMoe on the Hub: input_linear.weight,
  // output_linear.weight).
  std::string fused_gate_up = "experts.gate_up_proj", fused_down = "experts.down_proj";
  bool router_bias = false, expert_bias = false;
  // Routing (MoEAttrs): sigmoid scores (LFM2-MoE) instead of softmax; a per-expert bias under the
  // block's prefix added to the scores for choosing only (empty: none); the renormalising sum's
  // epsilon; routed_scaling_factor.
  bool sigmoid_routing = false;
  std::string selection_bias;
  double normalize_epsilon = 0.0, routed_scaling = 1.0;
  // A shared expert's width (Qwen3-Next's shared_expert, a SwiGLU every token passes through,
  // times sigmoid(shared_expert_gate)); 0: none.
  int64_t shared_expert = 0;
};

// The MoE block with HF names under `prefix` (e.g. "model.layers.0.block_sparse_moe.").
Value* moe_block(ModelBuilder& m, const std::string& prefix, const MoeSpec& spec, Value* x);

// Rejects an HF activation name the blocks cannot build, naming the config key.
void check_activation(const JsonConfig& config, const std::string& key, const std::string& activation);
// The activation by its HF name.
Value* activation(Builder& b, const std::string& name, Value* x);

// x times the constant k; x itself (no node) when k is 1 (the multipliers configs leave at 1).
Value* scaled(Builder& b, Value* x, double k);

// The MLP with HF names under `prefix` (e.g. "model.layers.0.mlp.").
Value* gated_mlp(ModelBuilder& m, const std::string& prefix, const MlpSpec& spec, Value* x);

// A causal convolution's kernel size from `key` (default `fallback`): at least 2, since its state
// holds the kernel - 1 inputs before a call.
int64_t conv_kernel_size(const JsonConfig& c, const std::string& key, int64_t fallback);
// The last two axes of a rank-4 tensor swapped.
Value* swap_last(Builder& b, Value* x);

}  // namespace hfx
