#include "backends/onnx/genai_config.h"

#include <fstream>
#include <map>

#include <string>

#include "core/error.h"
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
// tests/parity/test_onnxruntime_genai.py), and the type its config names: it refuses gpt_neox, olmo2,
// starcoder2, mamba2, falcon_h1, qwen3_next and the MoE families it lacks, and its gpt2 model wants
// other inputs. A Qwen3.5 checkpoint's text model (ours from either checkpoint) is its `*_text` type,
// as its own builder writes it. The others get no genai_config.json.
std::optional<std::string> genai_type(const std::string& model_type) {
  static const std::map<std::string, std::string> kTypes = {
      {"llama", "llama"},         {"mistral", "mistral"},
      {"qwen2", "qwen2"},         {"qwen3", "qwen3"},
      {"gemma", "gemma"},         {"gemma2", "gemma2"},
      {"gemma3_text", "gemma3_text"}, {"phi3", "phi3"},
      {"granite", "granite"},     {"smollm3", "smollm3"},
      {"lfm2", "lfm2"},           {"lfm2_moe", "lfm2_moe"},
      {"qwen3_5", "qwen3_5_text"}, {"qwen3_5_text", "qwen3_5_text"},
      {"qwen3_5_moe", "qwen3_5_moe_text"}, {"qwen3_5_moe_text", "qwen3_5_moe_text"},
      {"granitemoehybrid", "granitemoehybrid"}};
  const auto it = kTypes.find(model_type);
  if (it == kTypes.end()) return std::nullopt;
  return it->second;
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

constexpr const char* kQwenProcessorFile = "genai_processor_config.json";

// onnxruntime-genai's qwen2_5_vl model type (0.18's MultiModalLanguageModel; Qwen2-VL's contract is
// the same for images): `vision` (pixel_values, image_grid_thw -> image_features), `embedding`
// (input_ids, image_features -> inputs_embeds: our token_embedding, which merges them), and the
// decoder over inputs_embeds with the M-RoPE position_ids it computes itself.
std::optional<json> qwen_vl_genai_config(const json& m, const JsonConfig& hf) {
  const json& gen = m.value(key::kGeneration, json());
  const json& components = m.at(key::kComponents);
  namespace component = manifest::component;
  for (auto name : {component::kTextDecoder, component::kTokenEmbedding, component::kVisionEncoder})
    if (!components.contains(name)) return std::nullopt;
  if (!gen.is_object() || gen.value(key::kCache, "") != manifest::cache::kDynamic) return std::nullopt;
  const json& decode = components.at(component::kTextDecoder);
  const json& embedding = components.at(component::kTokenEmbedding);
  const json* past = tensor(decode, key::kInputs, "past_key_values.0.key");
  const json* logits = tensor(decode, key::kOutputs, "logits");
  if (!past || !logits || !tensor(embedding, key::kInputs, "image_features")) return std::nullopt;
  const JsonConfig text = hf.object("text_config").value_or(hf);
  const JsonConfig vision = hf.object("vision_config").value_or(JsonConfig(json::object(), hf.where()));
  const json& tokens = m.at("image_tokens");
  const int64_t layers = static_cast<int64_t>(gen.at(key::kCachePairs).size()) / 2;
  const json session = {{"log_id", "onnxruntime-genai"}, {"provider_options", json::array()}};
  json decoder = {{"filename", decode.at(key::kFile)},
                  {"session_options", session},
                  {"head_size", past->at("shape").at(3)},
                  {"hidden_size", text.integer("hidden_size", 0)},
                  {"num_attention_heads", text.integer("num_attention_heads", 0)},
                  {"num_key_value_heads", past->at("shape").at(1)},
                  {"num_hidden_layers", layers},
                  {"inputs",
                   {{"inputs_embeds", "inputs_embeds"},
                    {"attention_mask", "attention_mask"},
                    {"position_ids", "position_ids"},
                    {"past_key_names", "past_key_values.%d.key"},
                    {"past_value_names", "past_key_values.%d.value"}}},
                  {"outputs",
                   {{"logits", "logits"},
                    {"present_key_names", "present.%d.key"},
                    {"present_value_names", "present.%d.value"}}}};
  json embed = {{"filename", embedding.at(key::kFile)},
                {"session_options", session},
                {"inputs", {{"input_ids", "input_ids"}, {"image_features", "image_features"}}},
                {"outputs", {{"inputs_embeds", "inputs_embeds"}}}};
  json vis = {{"filename", components.at(component::kVisionEncoder).at(key::kFile)},
              {"config_filename", kQwenProcessorFile},
              {"session_options", session},
              {"spatial_merge_size", tokens.value("spatial_merge_size", 2)},
              {"patch_size", vision.integer("patch_size", 14)},
              {"tokens_per_second", vision.number("tokens_per_second", 2.0)},
              {"inputs", {{"pixel_values", "pixel_values"}, {"image_grid_thw", "image_grid_thw"}}},
              {"outputs", {{"image_features", "image_features"}}}};
  json model = {{"type", "qwen2_5_vl"},
                {"decoder", decoder},
                {"embedding", embed},
                {"vision", vis},
                {"image_token_id", tokens.at("image_token_id")},
                {"video_token_id", hf.integer("video_token_id", 151656)},
                {"vision_start_token_id", tokens.value("vision_start_token_id", 151652)}},
       search;
  add_common(model, search, gen, m.at(key::kDims).at("total_sequence").at("max"), logits->at("shape").back());
  return json{{"model", model}, {"search", search}};
}

// The image preprocessing onnxruntime-extensions runs for og's multimodal processor (the sequence
// onnxruntime-genai's qwen2.5-vl test model carries), with the image processor's settings.
json qwen_vl_image_processor(const std::filesystem::path& dir) {
  json p = json::object();
  if (std::ifstream file(dir / "preprocessor_config.json"); file) p = json::parse(file, nullptr, false);
  if (!p.is_object()) p = json::object();
  const json size = p.value("size", json::object());
  auto pick = [&](const char* top, const char* in_size, int64_t fallback) -> int64_t {
    if (p.contains(top) && p[top].is_number_integer()) return p[top];
    if (size.is_object() && size.contains(in_size) && size[in_size].is_number_integer()) return size[in_size];
    return fallback;
  };
  const int64_t patch = p.value("patch_size", 14), merge = p.value("merge_size", 2);
  auto op = [](const char* name, const char* type, json attrs) {
    json o = {{"name", name}, {"type", type}};
    if (!attrs.is_null()) o["attrs"] = std::move(attrs);
    return json{{"operation", o}};
  };
  json transforms = json::array(
      {op("decode_image", "DecodeImage", {{"color_space", "RGB"}}), op("convert_to_rgb", "ConvertRGB", json()),
       op("resize", "Resize",
          {{"width", 540}, {"height", 360}, {"smart_resize", 1}, {"min_pixels", pick("min_pixels", "shortest_edge", 3136)},
           {"max_pixels", pick("max_pixels", "longest_edge", 12845056)}, {"patch_size", patch}, {"merge_size", merge}}),
       op("rescale", "Rescale", {{"rescale_factor", p.value("rescale_factor", 1.0 / 255)}}),
       op("normalize", "Normalize",
          {{"mean", p.value("image_mean", json::array({0.48145466, 0.4578275, 0.40821073}))},
           {"std", p.value("image_std", json::array({0.26862954, 0.26130258, 0.27577711}))},
           {"qwen2_5_vl", 1}}),
       op("patch_image", "PatchImage",
          {{"patch_size", patch}, {"temporal_patch_size", p.value("temporal_patch_size", 2)}, {"merge_size", merge}})});
  return {{"processor", {{"name", "qwen2_5_image_processor"}, {"transforms", transforms}}}};
}

}  // namespace

std::vector<std::pair<std::string, json>> genai_files(const json& m, const JsonConfig& hf, const std::filesystem::path& dir) {
  std::vector<std::pair<std::string, json>> files;
  const auto config = genai_config(m, hf);
  if (!config) return files;
  files.emplace_back("genai_config.json", *config);
  const json& type = config->at("model").at("type");
  if (type == "whisper") files.emplace_back("audio_processor_config.json", whisper_audio_processor(hf));
  if (type == "qwen2_5_vl") files.emplace_back(kQwenProcessorFile, qwen_vl_image_processor(dir));
  return files;
}

// A hybrid decoder's convolution layers (LFM2): which layers carry past_conv.{i} [batch, channels,
// kernel - 1] instead of a KV cache, as onnxruntime-genai's LFM2 model reads them (layer_types,
// conv_cache_size, and the state's names).
void add_conv_state(json& decoder, const json& decode, int64_t layers) {
  json types = json::array();
  const json* conv = nullptr;
  for (int64_t i = 0; i < layers; ++i) {
    const json* state = tensor(decode, key::kInputs, str("past_conv.", i));
    types.push_back(state ? "conv" : "full_attention");
    conv = conv ? conv : state;
  }
  if (!conv) return;
  decoder["layer_types"] = types;
  decoder["conv_cache_size"] = conv->at("shape").at(2);
  decoder["inputs"]["past_conv_names"] = "past_conv.%d";
  decoder["outputs"]["present_conv_names"] = "present_conv.%d";
}

// A recurrent layer's convolution and recurrent state (Qwen3.5's gated DeltaNet, Granite 4's
// Mamba2): onnxruntime-genai finds those layers by the names' templates (no layer_types) and keeps
// one shape for all of them, so layers whose states differ in shape get no config (false).
bool add_recurrent_state(json& decoder, const json& decode, int64_t layers) {
  const json *first_state = nullptr, *first_conv = nullptr;
  for (int64_t i = 0; i < layers; ++i) {
    const json* state = tensor(decode, key::kInputs, str("past_ssm.", i));
    if (!state) continue;
    const json* conv = tensor(decode, key::kInputs, str("past_conv.", i));
    if (!conv) return false;
    if (!first_state) first_state = state, first_conv = conv;
    if (state->at("shape") != first_state->at("shape") || conv->at("shape") != first_conv->at("shape")) return false;
  }
  if (!first_state) return true;
  decoder.erase("layer_types");
  decoder.erase("conv_cache_size");
  decoder["inputs"]["past_conv_names"] = "past_conv.%d";
  decoder["inputs"]["past_recurrent_names"] = "past_ssm.%d";
  decoder["outputs"]["present_conv_names"] = "present_conv.%d";
  decoder["outputs"]["present_recurrent_names"] = "present_ssm.%d";
  return true;
}

std::optional<json> genai_config(const json& m, const JsonConfig& hf) {
  const std::string model_type = m.at(key::kSource).value("model_type", "");
  if (model_type == "whisper") return whisper_genai_config(m, hf);
  if (model_type == "qwen2_vl" || model_type == "qwen2_5_vl") return qwen_vl_genai_config(m, hf);
  const auto type = genai_type(m.at(key::kSource).value("model_type", ""));
  if (!type) return std::nullopt;
  const json& gen = m.value(key::kGeneration, json());
  const json& components = m.at(key::kComponents);
  if (!gen.is_object() || gen.value(key::kCache, "") != manifest::cache::kDynamic ||
      !gen.value(key::kMultiTokenDecode, false) || components.contains(manifest::component::kPrefill) ||
      !components.contains(manifest::component::kDecode))
    return std::nullopt;
  const json& decode = components.at(manifest::component::kDecode);
  // The first layer with a KV cache (a hybrid's first layers may carry convolution state instead).
  const int64_t layers =
      hf.integer("num_hidden_layers", static_cast<int64_t>(gen.at(key::kCachePairs).size()) / 2);
  int64_t first_kv = 0;
  while (first_kv < layers && !tensor(decode, key::kInputs, str("past_key_values.", first_kv, ".key"))) ++first_kv;
  const json* past = tensor(decode, key::kInputs, str("past_key_values.", first_kv, ".key"));
  const json* logits = tensor(decode, key::kOutputs, "logits");
  if (!past || !logits || !tensor(decode, key::kOutputs, str("present.", first_kv, ".key"))) return std::nullopt;
  const json& past_shape = past->at("shape");  // [batch, kv_heads, past, head_dim]
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
  add_conv_state(decoder, decode, layers);
  if (!add_recurrent_state(decoder, decode, layers)) return std::nullopt;
  json model = {{"type", *type}, {"decoder", decoder}}, search;
  add_common(model, search, gen, context, logits->at("shape").back());
  return json{{"model", model}, {"search", search}};
}

}  // namespace hfx
