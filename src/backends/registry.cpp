#include <algorithm>
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

nlohmann::json tested_runtimes(const Backend& backend) {
  const std::string_view package = backend.runtime_package();
  const std::string_view all = HFX_TESTED_RUNTIMES;  // "package=version," per runtime CMake found
  nlohmann::json out = nlohmann::json::object();
  size_t begin = 0;
  while (!package.empty() && begin < all.size()) {
    const size_t end = all.find(',', begin);
    const std::string_view entry = all.substr(begin, end - begin);
    const size_t eq = entry.find('=');
    if (entry.substr(0, eq) == package) out[std::string(package)] = std::string(entry.substr(eq + 1));
    begin = end == std::string_view::npos ? all.size() : end + 1;
  }
  return out;
}

BackendOption decompose_option() {
  return {"decompose", BackendOption::Type::Strings, {}, "--decompose",
          "high-level ops to export as their reference decomposition (e.g. Attention,RMSNorm, or all)"};
}

void check_backend_options(const Backend& backend, const ExportConfig& config, const FieldSpelling& spell) {
  const std::vector<BackendOption> options = backend.options();
  for (const auto& item : config.backend.items()) {
    const std::string& key = item.key();  // not a structured binding: clang's lambdas cannot capture those
    const nlohmann::json& value = item.value();
    const auto option = std::find_if(options.begin(), options.end(), [&](const BackendOption& o) { return o.key == key; });
    if (option == options.end()) {
      std::string known;
      for (const BackendOption& o : options) known += (known.empty() ? "" : ", ") + o.key;
      fail(spell("backend"), ": unknown ", backend.display_name(), " option '", key, "' (known: ", known, ")");
    }
    const std::string field = spell("backend." + key);
    switch (option->type) {
      case BackendOption::Type::Bool:
        if (!value.is_boolean()) fail(field, ": expected true or false");
        break;
      case BackendOption::Type::Choice: {
        const auto& c = option->choices;
        if (value.is_string() && std::find(c.begin(), c.end(), value.get<std::string>()) != c.end()) break;
        std::string expected;
        for (size_t i = 0; i < c.size(); ++i)
          expected += (i == 0 ? "" : i + 1 == c.size() ? " or " : ", ") + ("\"" + c[i] + "\"");
        fail(field, ": ", value.is_string() ? "'" + value.get<std::string>() + "'" : value.dump(), " is not ",
             c.size() > 2 ? "one of " : "", expected, option->choices_note.empty() ? "" : " (" + option->choices_note + ")");
      }
      case BackendOption::Type::Strings:
      case BackendOption::Type::Object:
        break;  // the backend reads and checks these itself
    }
  }
}

std::set<OpKind> forced_decompositions(const ExportConfig& config, const FieldSpelling& spell) {
  std::set<OpKind> out;
  if (!config.backend.contains("decompose")) return out;
  const nlohmann::json& list = config.backend["decompose"];
  const std::string field = spell("backend.decompose");
  if (!list.is_array()) fail(field, " must be a list of high-level op names");
  for (const auto& item : list) {
    const std::string name = item.is_string() ? item.get<std::string>() : item.dump();
    bool known = false;
    for (size_t i = 0; i < kOpCount; ++i) {
      const auto op = static_cast<OpKind>(i);
      if (!op_is_high_level(op) || (name != "all" && op_name(op) != name)) continue;
      out.insert(op);
      known = true;
    }
    if (!known) {
      std::string ops;
      for (size_t i = 0; i < kOpCount; ++i)
        if (op_is_high_level(static_cast<OpKind>(i))) ops += std::string(ops.empty() ? "" : ", ") + std::string(op_name(static_cast<OpKind>(i)));
      fail(field, ": '", name, "' is not a high-level op (all, ", ops, ")");
    }
  }
  return out;
}

Pass decompose_pass(std::function<bool(const Node&)> native, std::set<OpKind> forced) {
  return {"decompose", [native = std::move(native), forced = std::move(forced)](Graph& g, PassReport&) {
            decompose(g, [&](const Node& n) { return !forced.count(n.op) && native(n); });
          }};
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
