// onnxruntime-genai's genai_config.json for an ONNX export whose one decode graph serves the
// prompt and the steps over a dynamic cache, so that og.Model loads the export and runs its own
// C++ decode loop (past_present_share_buffer when GroupQueryAttention owns the cache).
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/json_config.h"

namespace hfx {

// The config for `manifest` (export.json's content), or nothing when onnxruntime-genai cannot run
// the export (no generation, a static or stateful cache, separate prefill and decode graphs).
std::optional<nlohmann::json> genai_config(const nlohmann::json& manifest, const JsonConfig& hf_config);

// Every file onnxruntime-genai reads beside the model (name -> content): genai_config.json, and for
// Whisper the audio_processor_config.json its multimodal processor computes the features by.
std::vector<std::pair<std::string, nlohmann::json>> genai_files(const nlohmann::json& manifest,
                                                                 const JsonConfig& hf_config);

}  // namespace hfx
