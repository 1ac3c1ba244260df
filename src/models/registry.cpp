#include "models/registry.h"

#include <map>

#include "core/error.h"

namespace hfx {
namespace {

// Function-local so that registrations from other files' static initialisers find it built.
std::map<std::string, ArchBuilder>& architectures() {
  static std::map<std::string, ArchBuilder> registry;
  return registry;
}

}  // namespace

bool register_arch(const std::string& model_type, ArchBuilder builder) {
  const bool added = architectures().emplace(model_type, std::move(builder)).second;
  HFX_CHECK(added, "model_type '", model_type, "' registered twice");
  return true;
}

std::vector<std::string> supported_model_types() {
  std::vector<std::string> out;
  for (const auto& [type, fn] : architectures()) out.push_back(type);
  return out;
}

const ArchBuilder& find_arch(const std::string& model_type) {
  if (const auto it = architectures().find(model_type); it != architectures().end()) return it->second;
  std::string list;
  for (const auto& t : supported_model_types()) list += (list.empty() ? "" : ", ") + t;
  fail("config.json: model_type '", model_type, "' is not supported (supported: ", list, ")");
}

}  // namespace hfx
