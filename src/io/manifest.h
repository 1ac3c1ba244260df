// OUT_DIR/export.json, the contract between the exporter and every runner. Component names, keys
// and cache kinds are spelled here once (python/hfexport/manifest.py mirrors them); the C++
// runners read the manifest through this type.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hfx::manifest {

inline constexpr std::string_view kFileName = "export.json";
inline constexpr int kSchemaVersion = 1;

namespace component {
inline constexpr std::string_view kModel = "model";      // the plain forward
inline constexpr std::string_view kPrefill = "prefill";  // prompt -> last logits + cache
inline constexpr std::string_view kDecode = "decode";    // the step a decode loop repeats
inline constexpr std::string_view kEncoder = "encoder";  // an encoder-decoder's encoder
inline constexpr std::string_view kDecoder = "decoder";  // an encoder-decoder's decoder step
inline constexpr std::string_view kTextDecoder = "text_decoder";  // a decoder over inputs_embeds
inline constexpr std::string_view kTokenEmbedding = "token_embedding";  // token ids -> inputs_embeds
inline constexpr std::string_view kVisionEncoder = "vision_encoder";    // pixel values -> image embeddings
inline constexpr std::string_view kAudioEncoder = "audio_encoder";      // audio features -> audio embeddings
// OpenVINO GenAI's split of a Qwen-VL tower (its VLMPipeline computes the rest on the host):
inline constexpr std::string_view kVisionEmbeddings = "vision_embeddings";  // flattened patches -> patch embeddings
inline constexpr std::string_view kVisionEmbeddingsPos = "vision_embeddings_pos";  // grid cells -> position rows
inline constexpr std::string_view kVisionEmbeddingsMerger = "vision_embeddings_merger";  // blocks + merger
}  // namespace component

namespace cache {
inline constexpr std::string_view kDynamic = "dynamic";    // past_key_values.* -> present.*
inline constexpr std::string_view kStatic = "static";      // input.<name> / output.<name>, updated in place
inline constexpr std::string_view kStateful = "stateful";  // the cache lives in the runtime
}  // namespace cache

namespace key {
inline constexpr const char* kSchemaVersion = "schema_version";
inline constexpr const char* kProducer = "producer";
inline constexpr const char* kFormat = "format";
inline constexpr const char* kDtype = "dtype";
inline constexpr const char* kSource = "source";
inline constexpr const char* kExportConfig = "export_config";
inline constexpr const char* kComponents = "components";
inline constexpr const char* kFile = "file";
inline constexpr const char* kDataFiles = "data_files";
inline constexpr const char* kProgram = "program";  // a component's program in a multi-program file (.pt2)
inline constexpr const char* kInputs = "inputs";
// A component's states: [{name, kind, policy, window (ring), the input / output it travels through,
// variable (the runtime keeps it: an OpenVINO variable, a .pte method buffer), in_place (the
// caller's input tensor is updated)}].
inline constexpr const char* kStates = "states";
inline constexpr const char* kTestedWith = "tested_with";  // runtime package -> version the tests ran
inline constexpr const char* kOutputs = "outputs";
inline constexpr const char* kDims = "dims";
inline constexpr const char* kQuantization = "quantization";
inline constexpr const char* kQuantizedLinears = "quantized_linears";
inline constexpr const char* kGeneration = "generation";
inline constexpr const char* kCache = "cache";
inline constexpr const char* kCachePairs = "cache_pairs";
inline constexpr const char* kMultiTokenDecode = "multi_token_decode";
inline constexpr const char* kEosTokenId = "eos_token_id";
inline constexpr const char* kBosTokenId = "bos_token_id";
inline constexpr const char* kPadTokenId = "pad_token_id";
inline constexpr const char* kMaxCacheLen = "max_cache_len";
inline constexpr const char* kRebuildCacheAt = "rebuild_cache_at_length";
// Runners feed a longer prompt in calls of at most this many tokens (recurrent models).
inline constexpr const char* kPrefillChunk = "prefill_chunk";
inline constexpr const char* kBatchSize = "batch_size";
// true: bind each decode past/present pair to one buffer of the full cache length, updated in
// place (onnxruntime-genai's name for it).
inline constexpr const char* kSharesBuffer = "past_present_share_buffer";
// "slots": the cache's keys are rotated by their cache slot (the attention applies RoPE itself:
// for a left-padded row, slot = position + padding); absent: by position, as the model computes them.
inline constexpr const char* kCacheKeyPositions = "cache_key_positions";
// "all": logits for every query position; "last": the last position's only ([batch, 1, vocab]).
inline constexpr const char* kLogits = "logits";
}  // namespace key

}  // namespace hfx::manifest

namespace hfx {

// A read manifest: load() checks what every runner relies on, and the accessors name the file
// and the key in their errors.
class Manifest {
 public:
  explicit Manifest(nlohmann::json data, std::filesystem::path dir = {});
  // Throws one line when DIR has no export.json or it is not a valid manifest.
  static Manifest load(const std::filesystem::path& dir);
  void save(const std::filesystem::path& dir) const;

  const nlohmann::json& data() const { return data_; }
  nlohmann::json& data() { return data_; }
  std::string format() const;
  bool has_component(std::string_view name) const;
  // The component's entry; throws naming the export when it has none.
  const nlohmann::json& component(std::string_view name) const;
  std::filesystem::path file_of(std::string_view component) const;
  // The generation section; throws when the export was not made --for-generation.
  const nlohmann::json& generation() const;
  bool for_generation() const;
  std::string cache() const;
  std::vector<int64_t> eos_token_ids() const;
  // The upper bound of a named dim, if the export has it.
  std::optional<int64_t> dim_max(std::string_view name) const;

 private:
  std::string where() const;
  nlohmann::json data_;
  std::filesystem::path dir_;
};

}  // namespace hfx
