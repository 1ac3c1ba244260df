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

// The token ids, context length and greedy search every config carries.
void add_common(json& model, json& search, const json& gen, int64_t context, const json& vocab) {
  model["context_length"] = context;
  model["vocab_size"] = vocab;
  const json eos = gen.value(key::kEosTokenId, json::array());
  model["eos_token_id"] = eos.size() == 1 ? eos[0] : eos;
  for (const char* k : {key::kBosTokenId, key::kPadTokenId})
    if (const json id = first_id(gen, k); !id.is_null()) model[k] = id;
  if (!model.contains(key::kPadTokenId) && !eos.empty()) model[key::kPadTokenId] = eos[0];
  search = {{"do_sample", false},
            {"num_beams", 1},
            {"num_return_sequences", 1},
            {"max_length", context},
            {"min_length", 0},
            {"past_present_share_buffer", gen.value(key::kSharesBuffer, false)}};
}

// A section's session options and attention shape ([batch, heads, length, head_dim] of `cache`).
json section(const json& component, const json& cache, int64_t hidden, int64_t layers) {
  const json& shape = cache.at("shape");
  return {{"filename", component.at(key::kFile)},
          {"session_options", {{"log_id", "onnxruntime-genai"}, {"provider_options", json::array()}}},
          {"head_size", shape.at(3)},
          {"hidden_size", hidden},
          {"num_attention_heads", shape.at(1)},
          {"num_key_value_heads", shape.at(1)},
          {"num_hidden_layers", layers}};
}

// onnxruntime-genai's whisper model type (measured with 0.18): an encoder taking the features
// and returning the cross-attention state, and a decoder over past -> present without a mask
// (`--onnx-ops standard|ort`: GroupQueryAttention's shared buffer needs one); our names through
// its name templates.
std::optional<json> whisper_genai_config(const json& m, const JsonConfig& hf) {
  const json& gen = m.value(key::kGeneration, json());
  const json& components = m.at(key::kComponents);
  if (!gen.is_object() || gen.value(key::kCache, "") != manifest::cache::kDynamic ||
      !components.contains(manifest::component::kEncoder) || !components.contains(manifest::component::kDecoder) ||
      components.contains(manifest::component::kPrefill))
    return std::nullopt;
  const json& encoder = components.at(manifest::component::kEncoder);
  const json& decoder = components.at(manifest::component::kDecoder);
  const json* past = tensor(decoder, key::kInputs, "past_key_values.0.decoder.key");
  const json* cross = tensor(encoder, key::kOutputs, "present.0.encoder.key");
  const json* logits = tensor(decoder, key::kOutputs, "logits");
  if (!past || !cross || !logits || tensor(decoder, key::kInputs, "attention_mask") ||
      !tensor(encoder, key::kInputs, "input_features"))
    return std::nullopt;
  const int64_t hidden = hf.integer("d_model", 0);
  json dec = section(decoder, *past, hidden, hf.integer("decoder_layers", 0));
  dec["inputs"] = {{"input_ids", "input_ids"},
                   {"past_key_names", "past_key_values.%d.decoder.key"},
                   {"past_value_names", "past_key_values.%d.decoder.value"},
                   {"cross_past_key_names", "past_key_values.%d.encoder.key"},
                   {"cross_past_value_names", "past_key_values.%d.encoder.value"}};
  dec["outputs"] = {{"logits", "logits"},
                    {"present_key_names", "present.%d.decoder.key"},
                    {"present_value_names", "present.%d.decoder.value"}};
  json enc = section(encoder, *cross, hidden, hf.integer("encoder_layers", 0));
  enc["inputs"] = {{"audio_features", "input_features"}};
  enc["outputs"] = {{"encoder_hidden_states", "last_hidden_state"},
                    {"cross_present_key_names", "present.%d.encoder.key"},
                    {"cross_present_value_names", "present.%d.encoder.value"}};
  json model = {{"type", "whisper"}, {"decoder", dec}, {"encoder", enc}}, search;
  add_common(model, search, gen, m.at(key::kDims).at("total_sequence").at("max"), logits->at("shape").back());
  return json{{"model", model}, {"search", search}};
}

// The feature extraction onnxruntime-extensions runs for og's multimodal processor (the sequence
// onnxruntime-genai's own whisper builder writes): decode the audio, the periodic-Hann STFT, the
// log-mel spectrum over 30 s chunks.
json whisper_audio_processor(const JsonConfig& hf) {
  constexpr int64_t kFft = 400, kHop = 160, kChunkSeconds = 30;
  json stft = {{"name", "STFT"},
               {"type", "STFTNorm"},
               {"attrs", {{"n_fft", kFft}, {"frame_length", kFft}, {"hop_length", kHop}}}};
  json mel = {{"name", "log_mel_spectrogram"},
              {"type", "LogMelSpectrum"},
              {"attrs",
               {{"chunk_size", kChunkSeconds}, {"hop_length", kHop}, {"n_fft", kFft},
                {"n_mel", hf.integer("num_mel_bins", 80)}}}};
  json sequence = json::array({{{"operation", {{"name", "audio_decoder"}, {"type", "AudioDecoder"}}}},
                               {{"operation", stft}},
                               {{"operation", mel}}});
  return {{"feature_extraction", {{"sequence", sequence}}}};
}

}  // namespace

std::vector<std::pair<std::string, json>> genai_files(const json& m, const JsonConfig& hf) {
  std::vector<std::pair<std::string, json>> files;
  const auto config = genai_config(m, hf);
  if (!config) return files;
  files.emplace_back("genai_config.json", *config);
  if (config->at("model").at("type") == "whisper") files.emplace_back("audio_processor_config.json", whisper_audio_processor(hf));
  return files;
}

std::optional<json> genai_config(const json& m, const JsonConfig& hf) {
  if (m.at(key::kSource).value("model_type", "") == "whisper") return whisper_genai_config(m, hf);
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
  json model = {{"type", m.at(key::kSource).value("model_type", "")}, {"decoder", decoder}}, search;
  add_common(model, search, gen, context, logits->at("shape").back());
  return json{{"model", model}, {"search", search}};
}

}  // namespace hfx
