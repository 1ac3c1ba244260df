// The decoder frontend kit: the skeleton every decoder-only family shares (components per
// generation mode, inputs/masks/cache through DecoderIO, RoPE tables, the layer loop, last-logits
// slice, final norm, tied or untied head, float32 logits), with small hooks that default to Llama.
// A family file overrides only what differs and registers itself:
//
//   HFX_REGISTER_DECODER("qwen3", Decoder, kQwen3Defaults);
//   HFX_REGISTER_DECODER("gemma", GemmaDecoder, kGemmaDefaults);  // GemmaDecoder : Decoder
#pragma once
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint.h"
#include "models/blocks.h"
#include "models/decoder_io.h"
#include "models/model_builder.h"
#include "models/registry.h"
#include "models/rope.h"

namespace hfx {

// Which layers attend through a sliding window, and where the config says so.
enum class WindowRule {
  None,        // no sliding window (llama)
  AllLayers,   // `sliding_window` applies to every layer when set (mistral)
  LayerTypes,  // only with `use_sliding_window`, on the layers `layer_types` (or, in 4.x configs,
               // `max_window_layers`) marks sliding (qwen2, qwen3)
};

// Which attention projections carry biases.
enum class AttentionBias {
  FromConfig,  // q, k, v and o when `attention_bias` is true (llama, qwen3)
  QkvAlways,   // q, k, v always, o never (qwen2)
  None,        // never; `attention_bias` is not a key of the family (mistral)
};

// How a family normalises: RMSNorm scaling by w (Llama) or by 1 + w (Gemma stores the offset),
// or LayerNorm with a bias (GPT-2, GPT-NeoX, StarCoder2).
enum class NormKind { RMS, RMSOnePlus, LayerNorm };

// HF module names, which differ between families (GPT-2: transformer.h.{i}.attn, ...). An empty
// norm name means the layer has no norm at that place (OLMo-2 has no pre-norms; Gemma-2 adds
// post-norms).
struct DecoderNames {
  const char* model = "model.";  // prefix of everything but the head
  const char* embed = "embed_tokens";
  const char* layers = "layers";
  const char* attention = "self_attn";
  const char* mlp = "mlp";
  const char* attention_norm = "input_layernorm";
  const char* attention_post_norm = "";
  const char* mlp_norm = "post_attention_layernorm";
  const char* mlp_post_norm = "";
  const char* final_norm = "norm";
  const char* head = "lm_head";
  // What older checkpoints write in place of a fragment of these names (Mamba2's load hook reads
  // "embedding." as "embeddings."): {fragment, legacy}, or nulls.
  std::pair<const char*, const char*> legacy{nullptr, nullptr};
};

// One row per model_type: transformers' defaults for keys a config may omit, and which of the
// kit's optional behaviours the family has. Aliases are rows that repeat another's values.
struct DecoderDefaults {
  int64_t max_position_embeddings = 2048;
  std::optional<int64_t> num_key_value_heads;  // unset: num_attention_heads
  bool grouped_kv = true;                      // reads num_key_value_heads (GPT-NeoX: one kv head per head)
  std::optional<int64_t> head_dim;             // unset: hidden_size / num_attention_heads
  AttentionBias attention_bias = AttentionBias::FromConfig;
  bool mlp_bias = false;  // honours the `mlp_bias` key
  bool qk_norm = false;   // per-head RMSNorm on q and k
  WindowRule window = WindowRule::None;
  bool partial_rotary = false;  // honours `partial_rotary_factor` (the Llama family reads and ignores it)
  double rope_theta = 10000.0;  // the configuration class's default_theta
  double partial_rotary_factor = 1.0;
  // Where the family's configuration class finds its RoPE parameters, when not in rope_scaling /
  // rope_parameters as they stand (GPT-NeoX's rotary_pct, Phi-3's old type names).
  JsonConfig (*rope_params)(const JsonConfig& config) = nullptr;
  bool tie_word_embeddings = false;
  NormKind norm = NormKind::RMS;
  const char* norm_eps_key = "rms_norm_eps";
  double norm_eps = 1e-6;
  const char* activation_key = "hidden_act";
  const char* activation = "silu";
  DecoderNames names{};
  // The pre-quantized checkpoint format the family reads (gpt-oss: "mxfp4"); any other
  // quantization_config is refused.
  const char* quant_method = nullptr;
  // The transformers.modeling_outputs class the family's causal LM returns.
  const char* output_type = "CausalLMOutputWithPast";
};

// A decoder's hyper-parameters, read once from config.json.
struct DecoderConfig {
  std::string model_type;
  std::vector<std::string> architectures;
  std::string prefix;  // the checkpoint's base-model prefix ("model.", or "" when saved without it)
  std::string head;    // the LM head's module ("lm_head"; a vision-language model's may differ)
  // The decoder is one part of a larger checkpoint (a vision-language model's language model): its
  // graphs tolerate the tensors outside `prefix` and the head, which the other parts declare.
  bool part_of_checkpoint = false;
  int64_t vocab = 0, hidden = 0, intermediate = 0, layers = 0, max_positions = 0;
  NormKind norm = NormKind::RMS;
  double norm_eps = 1e-6;
  bool tied = false;
  AttentionSpec attention;
  MlpSpec mlp;
  // The RoPE tables the layers use (Gemma-3: one for sliding layers, one for full ones) and each
  // layer's index into them; -1: the layer has no RoPE (SmolLM3's NoPE layers).
  std::vector<RopeConfig> ropes;
  std::vector<int> layer_rope;
  std::vector<std::optional<int64_t>> layer_window;  // sliding window per layer, if any
  // Each layer's token mixer as config.json's layer_types names it, where a family mixes kinds
  // (LFM2's "conv" and "full_attention"); empty: attention in every layer.
  std::vector<std::string> layer_types;
  // The short causal convolutions of such layers: taps per channel, and whether their projections
  // and the convolution carry biases.
  struct {
    int64_t kernel = 0;
    bool bias = false;
  } conv;
  // The Mamba2 mixers of such layers (granitemoehybrid's "linear_attention" layers).
  Mamba2Spec mamba;
  // The gated DeltaNet mixers of such layers (Qwen3.5's and Qwen3-Next's "linear_attention").
  GatedDeltaSpec delta;
  // Every token attends to the ones after it too (EmbeddingGemma): a forward only, no decode loop.
  bool bidirectional = false;
  MaskPattern layer_mask(int64_t layer) const { return {bidirectional, layer_window[static_cast<size_t>(layer)]}; }
  std::vector<double> layer_attention_scale;          // per layer, when it varies (GPT-2); else attention.scale
  // Scalars some families apply: token embeddings times embedding_scale (the embedding module's:
  // Gemma's sqrt(hidden), rounded to the model dtype), the embeddings the model's forward is given
  // (or looked up) times embeds_multiplier (Granite's embedding_multiplier), each residual branch
  // times residual_scale, logits divided by logits_divisor, then tanh-softcapped at final_softcap
  // (0: none).
  double embedding_scale = 1.0, embeds_multiplier = 1.0, residual_scale = 1.0, logits_divisor = 1.0,
         final_softcap = 0.0;
  double logits_multiplier = 1.0;  // logits times this before the divisor (FalconH1's lm_head_multiplier)
  // FalconH1's muP multipliers on its branches: attention's input and output, the Mamba mixer's
  // output (the MLP's are MlpSpec's gate_scale / down_scale).
  struct {
    double attention_in = 1, attention_out = 1, mixer_out = 1;
  } branch_scales;
  bool parallel_residual = false;  // x + attn(norm1(x)) + mlp(norm2(x)) (GPT-NeoX)
  // Mixture-of-experts layers: their block (its layout read from the checkpoint unless fixed),
  // and which layers have it (the others keep the dense MLP).
  std::optional<MoeSpec> moe;
  std::vector<bool> layer_moe;
  // Qwen3-VL's deepstack: given inputs_embeds, the graph also takes visual_pos_masks [batch, query]
  // (bool: the image tokens) and deepstack_visual_embeds [deepstack_layers, features, hidden], and
  // after layer i < deepstack_layers adds row i's features, in order, to the marked tokens' states.
  int64_t deepstack_layers = 0;
};

DecoderConfig parse_decoder_config(const JsonConfig& config, const DecoderDefaults& defaults);
// config.json's `architectures` (the checkpoint's head classes), in order.
std::vector<std::string> architectures(const JsonConfig& config);
// Gemma-2/3 and gpt-oss: `sliding_window` (default `fallback`; null: none) on the layers
// layer_types marks, else on every layer but each `pattern`-th; returns which layers slide.
std::vector<bool> patterned_windows(const JsonConfig& config, DecoderConfig& cfg, int64_t fallback, int64_t pattern);
// config.json's layer_types, each one of `allowed` (nullopt when the key is absent; another
// length than `layers` or another entry is refused).
std::optional<std::vector<std::string>> listed_layer_types(const JsonConfig& config, int64_t layers,
                                                          const std::vector<std::string>& allowed);
// Which layers `layer_types` marks "sliding_attention" (none when the key is absent); other
// entries than "full_attention" are refused.
std::optional<std::vector<bool>> sliding_layers(const JsonConfig& config, int64_t layers);

// What the hooks see while one component's graph is built.
struct DecoderGraph {
  ModelBuilder& m;
  DecoderIO* io;  // null in a graph of the embeddings alone
  const DecoderConfig& cfg;
  // RoPE tables for the positions of this call ([batch, query, rotary_dim]), one per cfg.ropes.
  std::vector<std::pair<Value*, Value*>> rope_tables;
  Builder& b() { return m.b(); }
};

class Decoder {
 public:
  explicit Decoder(DecoderDefaults defaults) : defaults_(defaults) {}
  virtual ~Decoder() = default;

  virtual DecoderConfig parse(const JsonConfig& config) const { return parse_decoder_config(config, defaults_); }
  // input_ids -> their embeddings [batch, query, hidden], as the embedding module computes them
  // (what a caller passes as inputs_embeds).
  virtual Value* embed_tokens(DecoderGraph& g, Value* input_ids) const;
  // inputs_embeds -> the first layer's input, as the model's forward takes them (GPT-2 adds the
  // position embeddings).
  virtual Value* embed(DecoderGraph& g, Value* inputs_embeds) const;
  // One decoder layer: attention and MLP, each between the norms the names give, added to the
  // residual one after the other or in parallel.
  virtual Value* layer(DecoderGraph& g, int64_t index, Value* x) const;
  // The self-attention of layer `index` over its normed input, under `prefix` (".../self_attn.").
  virtual Value* attention(DecoderGraph& g, int64_t index, const std::string& prefix, Value* x) const;
  // The feed-forward block of layer `index`, under `prefix` (".../mlp.").
  virtual Value* mlp(DecoderGraph& g, int64_t index, const std::string& prefix, Value* x) const;
  virtual Value* final_norm(DecoderGraph& g, Value* x) const;
  // Hidden states -> logits in the graph dtype (the kit casts them to float32).
  virtual Value* head(DecoderGraph& g, Value* x) const;
  // The task's outputs over the final hidden states (the head for text-generation).
  void finish_task(DecoderGraph& g, Task task, const SentencePooling* pooling, Value* hidden) const;

  // The components the config's generation section asks for, each built by the hooks above.
  ExportModel build(const Checkpoint& ckpt, const ExportConfig& config) const;

  // The decoder as a vision-language model's language model: `text_config` parsed, its modules
  // under `prefix` and its head at `head` (the checkpoint layout the model saves).
  DecoderConfig parse_part(const JsonConfig& text_config, std::string prefix, std::string head) const;
  // token ids [batch, sequence] -> inputs_embeds, as the embedding module computes them. With
  // `image_token`, it also takes image_features [features, hidden] and puts them, in order, at the
  // tokens with that id (onnxruntime-genai's embedding model; none: [0, hidden]).
  std::unique_ptr<Graph> token_embedding_graph(const Checkpoint& ckpt, const ExportConfig& config,
                                               const DecoderConfig& cfg, std::set<std::string>& dims,
                                               std::optional<int64_t> image_token = std::nullopt) const;
  // inputs_embeds -> logits, with the cache the config's generation section asks for (one graph
  // that serves the prompt and each step; none without generation).
  // `image_blocks`: it takes token_type_ids and lets each image's tokens attend both ways (Gemma 3).
  std::unique_ptr<Graph> text_decoder_graph(const Checkpoint& ckpt, const ExportConfig& config,
                                            const DecoderConfig& cfg, std::set<std::string>& dims,
                                            bool image_blocks = false) const;

 protected:
  // Layer i's HF weight prefix, e.g. "model.layers.{i}.".
  std::string layer_prefix(const DecoderGraph& g, int64_t i) const {
    return g.cfg.prefix + defaults_.names.layers + "." + std::to_string(i) + ".";
  }
  // The family's norm over x with the weights of module `module` ("" returns x unchanged).
  Value* norm(DecoderGraph& g, const std::string& module, Value* x) const;
  DecoderDefaults defaults_;

 private:
  std::unique_ptr<Graph> build_graph(const Checkpoint& ckpt, const ExportConfig& config, const DecoderConfig& cfg,
                                     const DecoderVariant& variant, std::set<std::string>& dims) const;
};

// The decoders by model_type, for models that embed one (a vision-language model's text_config).
using DecoderFactory = std::unique_ptr<Decoder> (*)();
bool register_decoder(const std::string& model_type, DecoderFactory factory);
// Throws Error (naming `where` and the decoder types there are) when `model_type` is not one.
std::unique_ptr<Decoder> make_decoder(const std::string& model_type, const std::string& where);

// Registers `model_type` as built by a DecoderClass (Decoder or a subclass) with `defaults`, as an
// architecture of its own and as a decoder other models can embed.
#define HFX_REGISTER_DECODER(model_type, DecoderClass, defaults)                                                 \
  HFX_REGISTER_ARCH(model_type, [](const ::hfx::Checkpoint& ckpt, const ::hfx::ExportConfig& config) {           \
    return DecoderClass(defaults).build(ckpt, config);                                                               \
  })                                                                                                                 \
  namespace {                                                                                                        \
  const bool HFX_CONCAT(hfx_registered_decoder_, __LINE__) = ::hfx::register_decoder(                                 \
      model_type, []() -> std::unique_ptr<::hfx::Decoder> { return std::make_unique<DecoderClass>(defaults); });      \
  }

}  // namespace hfx
