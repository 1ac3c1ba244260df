// Phi-3 / Phi-4-mini: Llama blocks over fused checkpoints (qkv_proj rows [q | k | v],
// gate_up_proj rows [gate | up]), partial rotary (partial_rotary_factor), longrope scaling with
// short and long factors chosen per call by the positions' reach past
// original_max_position_embeddings, and one sliding window on every layer when set.
#include "core/error.h"
#include "models/decoder.h"

namespace hfx {
namespace {

// Phi3Config: rope_scaling (4.x) or rope_parameters; "su" and "yarn" are its old names for longrope.
JsonConfig phi3_rope_params(const JsonConfig& c) {
  auto params = c.object("rope_scaling");
  if (!params) params = c.object("rope_parameters");
  nlohmann::json p = params ? params->json() : nlohmann::json::object();
  const JsonConfig view(p, params ? params->where() : c.where());
  const std::string type = view.string("rope_type", view.string("type", "default"));
  if (type == "su" || type == "yarn") p["rope_type"] = "longrope";
  else if (type != "default" && type != "longrope")
    view.invalid("rope_type", "must be \"default\" or \"longrope\" for phi3");
  return JsonConfig(std::move(p), view.where());
}

constexpr DecoderDefaults kPhi3{
    .max_position_embeddings = 4096,
    .attention_bias = AttentionBias::None,
    .window = WindowRule::AllLayers,
    .partial_rotary = true,
    .rope_params = phi3_rope_params,
    .norm_eps = 1e-5,
};

class Phi3Decoder : public Decoder {
 public:
  using Decoder::Decoder;
  DecoderConfig parse(const JsonConfig& c) const override {
    DecoderConfig cfg = Decoder::parse(c);
    cfg.attention.qkv = "qkv_proj";
    cfg.mlp.gate_up = "gate_up_proj";
    return cfg;
  }
};

}  // namespace

HFX_REGISTER_DECODER("phi3", Phi3Decoder, kPhi3)

}  // namespace hfx
