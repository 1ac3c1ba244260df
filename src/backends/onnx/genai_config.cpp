#include "backends/onnx/genai_config.h"

#include <set>

#include <string>

#include "io/manifest.h"

namespace hfx {
namespace {

using nlohmann::json;
namespace key = manifest::key;

// The input or output of `component` named `name`, or null.
const json* tensor(const json& component, const char* dir, const std::string& name) {
  for (const json& t : component.at(dir))
    if (t.at("name") == name) return &t;
  return nullptr;
}

// The first token id of a generation key (an int or a list), else null.
json first_id(const json& generation, const char* k) {
  const json& v = generation.value(k, json());
  if (v.is_number_integer()) return v;
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0];
  return json();
}

// The model types onnxruntime-genai 0.18 loads and runs our decode graph under (measured by
// tests/parity/test_onnxruntime_genai.py): it refuses gpt_neox, olmo2, starcoder2 and the MoE
// families, and its gpt2 model wants other inputs. The others get no genai_config.json.
bool genai_runs(const std::string& model_type) {
  static const std::set<std::string> kTypes = {"llama", "mistral", "qwen2", "qwen3", "gemma",
                                               "gemma2", "gemma3_text", "phi3", "granite", "smollm3"};
  return kTypes.count(model_type) > 0;
}

}  // namespace

std::optional<json> genai_config(const json& m, const JsonConfig& hf) {
  if (!genai_runs(m.at(key::kSource).value("model_type", ""))) return std::nullopt;
  const json& gen = m.value(key::kGeneration, json());
  const json& components = m.at(key::kComponents);
  if (!gen.is_object() || gen.value(key::kCache, "") != manifest::cache::kDynamic ||
      !gen.value(key::kMultiTokenDecode, false) || components.contains(manifest::component::kPrefill) ||
      !components.contains(manifest::component::kDecode))
    return std::nullopt;
  const json& decode = components.at(manifest::component::kDecode);
  const json* past = tensor(decode, key::kInputs, "past_key_values.0.key");
  const json* logits = tensor(decode, key::kOutputs, "logits");
  if (!past || !logits || !tensor(decode, key::kOutputs, "present.0.key")) return std::nullopt;
  const json& past_shape = past->at("shape");  // [batch, kv_heads, past, head_dim]
  const int64_t layers = static_cast<int64_t>(gen.at(key::kCachePairs).size()) / 2;
  const int64_t context = m.at(key::kDims).at("total_sequence").at("max");

  json inputs = {{"input_ids", "input_ids"},
                 {"attention_mask", "attention_mask"},
                 {"past_key_names", "past_key_values.%d.key"},
                 {"past_value_names", "past_key_values.%d.value"}};
  if (tensor(decode, key::kInputs, "position_ids")) inputs["position_ids"] = "position_ids";
  json decoder = {{"filename", decode.at(key::kFile)},
                  {"session_options", {{"log_id", "onnxruntime-genai"}, {"provider_options", json::array()}}},
                  {"head_size", past_shape.at(3)},
                  {"hidden_size", hf.integer("hidden_size", 0)},
                  {"num_attention_heads", hf.integer("num_attention_heads", 0)},
                  {"num_key_value_heads", past_shape.at(1)},
                  {"num_hidden_layers", layers},
                  {"inputs", inputs},
                  {"outputs",
                   {{"logits", "logits"},
                    {"present_key_names", "present.%d.key"},
                    {"present_value_names", "present.%d.value"}}}};
  json model = {{"type", m.at(key::kSource).value("model_type", "")},
                {"context_length", context},
                {"vocab_size", logits->at("shape").back()},
                {"decoder", decoder}};
  const json eos = gen.value(key::kEosTokenId, json::array());
  model["eos_token_id"] = eos.size() == 1 ? eos[0] : eos;
  for (const char* k : {key::kBosTokenId, key::kPadTokenId})
    if (const json id = first_id(gen, k); !id.is_null()) model[k] = id;
  if (!model.contains(key::kPadTokenId) && !eos.empty()) model[key::kPadTokenId] = eos[0];
  json search = {{"do_sample", false},
                 {"num_beams", 1},
                 {"num_return_sequences", 1},
                 {"max_length", context},
                 {"min_length", 0},
                 {"past_present_share_buffer", gen.value(key::kSharesBuffer, false)}};
  return json{{"model", model}, {"search", search}};
}

}  // namespace hfx
