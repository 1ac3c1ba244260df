// The one export contract: what to export and how, from the command line, a JSON file or the
// Python API alike. Field names follow transformers.exporters where it has them (`dynamic`,
// generation's `cache_implementation` / `max_cache_len` / `multi_token_decode`). Options only one
// backend understands live in `backend`, a sub-object that backend validates itself.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/quantize.h"

namespace hfx {

struct DimRange {
  int64_t min = 1;
  int64_t max = INT64_MAX;
};

struct GenerationConfig {
  bool enabled = false;                          // export the components a decode loop needs
  std::string cache_implementation = "dynamic";  // "dynamic" (past -> present) | "static" (in place)
  int64_t max_cache_len = 0;                     // static: upper bound of the cache dim
  bool multi_token_decode = false;               // one decode graph with a symbolic query length
  int64_t batch_size = 1;                        // static: fixed batch
  // Not a user field: a backend's graph_config sets it with multi_token_decode for one decode
  // graph that serves the prompt and the steps and returns only the last position's logits.
  bool last_logits_only = false;
  // Not user fields. Where an encoder-decoder's cross-attention state is projected (a backend's
  // graph_config picks): by the encoder (hfexport's layout); by the decoder's first step from
  // encoder_hidden_states, returned for the later steps to read (optimum's ONNX files); or by the
  // one stateful decoder on its first call, kept in a variable (optimum-intel, OpenVINO GenAI).
  // decoder_first_step marks the config that first step is built under.
  enum class CrossState { Encoder, FirstDecoderStep, DecoderVariable };
  CrossState cross_state = CrossState::Encoder;
  bool decoder_first_step = false;
  // Whether an encoder-decoder's dynamic decoder takes attention_mask and position_ids: a cache
  // buffer shared across steps needs the mask's length; otherwise the cache's length counts the
  // past, and the decoder takes neither (onnxruntime-genai's whisper and OpenVINO GenAI feed neither;
  // its tokens are never padded).
  bool decoder_mask = true;

  bool static_cache() const { return cache_implementation == "static"; }
};

// How a front end spells a config field in its messages: "generation.max_cache_len" in JSON,
// "--max-cache-len" on the command line.
using FieldSpelling = std::function<std::string(std::string_view field)>;
std::string json_field(std::string_view field);

struct ExportConfig {
  std::string format = "onnx";
  DType dtype = DType::F32;  // weights and compute of the exported graphs
  bool dynamic = true;       // false: every dim must be fixed in `dims` (min == max)
  // Bounds of the graphs' named dims (batch, sequence, past_sequence, total_sequence, cache),
  // overriding the frontend's defaults; min == max makes the dim static.
  std::map<std::string, DimRange> dims;
  GenerationConfig generation;
  // The plain forward's graph inputs, by name (a frontend derives the ones left out, as the source
  // model's forward does); empty: every input the frontend has.
  std::vector<std::string> inputs;
  // What the export computes (core/task.h: text-generation, feature-extraction, ...); empty: what
  // config.json's architectures imply.
  std::string task;
  WeightQuantization quantization;
  nlohmann::json backend = nlohmann::json::object();  // the format's own options

  // Throws one line naming `where` and the key for unknown keys or values of the wrong type.
  static ExportConfig from_json(const nlohmann::json& j, const std::string& where = "export config");
  nlohmann::json to_json() const;
  // The rules that hold for every backend, in one place.
  void validate(const FieldSpelling& spell = json_field) const;
  // The bounds of dim `name`: the configured ones, else the defaults.
  DimRange dim(const std::string& name, DimRange defaults) const;
};

}  // namespace hfx
