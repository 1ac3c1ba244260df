#include <map>

#include "backends/backend.h"
#include "core/error.h"

namespace hfx {
namespace {

// Function-local so that registrations from other files' static initialisers find it built.
std::map<std::string, BackendFactory>& backends() {
  static std::map<std::string, BackendFactory> registry;
  return registry;
}

}  // namespace

bool register_backend(const std::string& format, BackendFactory make) {
  const bool added = backends().emplace(format, std::move(make)).second;
  HFX_CHECK(added, "format '", format, "' registered twice");
  return true;
}

std::vector<std::string> supported_formats() {
  std::vector<std::string> out;
  for (const auto& [name, make] : backends()) out.push_back(name);
  return out;
}

std::unique_ptr<Backend> make_backend(const std::string& format, const std::string& option) {
  if (const auto it = backends().find(format); it != backends().end()) return it->second();
  std::string list;
  for (const auto& f : supported_formats()) list += (list.empty() ? "" : ", ") + f;
  fail(option, ": '", format, "' is not supported (supported: ", list, ")");
}

}  // namespace hfx
