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

// Every file onnxruntime-genai reads beside the model (name -> content): genai_config.json, and the
// processor config its multimodal processor computes the inputs by (Whisper's audio features,
// Qwen2-VL's image patches).
// `dir` is the export's directory, holding the checkpoint's companion files (the image processor's
// preprocessor_config.json, which a vision-language model's processor config is written from).
std::vector<std::pair<std::string, nlohmann::json>> genai_files(const nlohmann::json& manifest,
                                                                 const JsonConfig& hf_config,
                                                                 const std::filesystem::path& dir);

}  // namespace hfx
