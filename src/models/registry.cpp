#include "models/registry.h"

#include <utility>

#include "core/error.h"

namespace hfx {
namespace {

const std::pair<const char*, ArchBuilder> kArchitectures[] = {
    {"llama", build_llama_family},
    {"mistral", build_llama_family},
    {"qwen2", build_llama_family},
    {"qwen3", build_llama_family},
};

}  // namespace

std::vector<std::string> supported_model_types() {
  std::vector<std::string> out;
  for (const auto& [type, fn] : kArchitectures) out.emplace_back(type);
  return out;
}

ArchBuilder find_arch(const std::string& model_type) {
  for (const auto& [type, fn] : kArchitectures)
    if (model_type == type) return fn;
  std::string list;
  for (const auto& t : supported_model_types()) list += (list.empty() ? "" : ", ") + t;
  fail("config.json: model_type '", model_type, "' is not supported (supported: ", list, ")");
}

}  // namespace hfx
