#include "io/manifest.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/output_dir.h"

namespace hfx {

namespace fs = std::filesystem;
namespace key = manifest::key;
using json = nlohmann::json;

Manifest::Manifest(json data, fs::path dir) : data_(std::move(data)), dir_(std::move(dir)) {}

std::string Manifest::where() const { return (dir_ / manifest::kFileName).string(); }

Manifest Manifest::load(const fs::path& dir) {
  const fs::path path = dir / manifest::kFileName;
  std::ifstream in(path);
  if (!in) fail(dir.string(), ": not an hfexport output (no ", manifest::kFileName, ")");
  std::stringstream text;
  text << in.rdbuf();
  json data = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (data.is_discarded() || !data.is_object()) fail(path.string(), ": not valid JSON");
  if (!data.contains(key::kFormat) || !data[key::kFormat].is_string() || !data.contains(key::kComponents) ||
      !data[key::kComponents].is_object())
    fail(path.string(), ": missing '", key::kFormat, "' or '", key::kComponents, "'");
  return Manifest(std::move(data), dir);
}

void Manifest::save(const fs::path& dir) const {
  const fs::path path = dir / manifest::kFileName;
  write_file(path, data_.dump(2) + "\n");
}

std::string Manifest::format() const { return data_.value(key::kFormat, ""); }

bool Manifest::has_component(std::string_view name) const {
  return data_.contains(key::kComponents) && data_[key::kComponents].contains(std::string(name));
}

const json& Manifest::component(std::string_view name) const {
  if (!has_component(name)) fail(dir_.string(), ": export has no '", name, "' component");
  const json& c = data_[key::kComponents][std::string(name)];
  if (!c.is_object() || !c.contains(key::kFile) || !c[key::kFile].is_string())
    fail(where(), ": component '", name, "' has no '", key::kFile, "'");
  return c;
}

fs::path Manifest::file_of(std::string_view name) const {
  return dir_ / component(name)[key::kFile].get<std::string>();
}

bool Manifest::for_generation() const {
  return data_.contains(key::kGeneration) && data_[key::kGeneration].is_object();
}

const json& Manifest::generation() const {
  if (!for_generation()) fail(dir_.string(), ": not exported with --for-generation");
  return data_[key::kGeneration];
}

std::string Manifest::cache() const {
  const json& g = generation();
  if (!g.contains(key::kCache)) return "";
  if (!g[key::kCache].is_string()) fail(where(), ": generation.", key::kCache, " must be a string");
  return g[key::kCache].get<std::string>();
}

std::vector<int64_t> Manifest::eos_token_ids() const {
  std::vector<int64_t> ids;
  for (const json& id : generation().value(key::kEosTokenId, json::array()))
    if (id.is_number_integer()) ids.push_back(id.get<int64_t>());
  return ids;
}

std::optional<int64_t> Manifest::dim_max(std::string_view name) const {
  const json dims = data_.value(key::kDims, json::object());
  const auto it = dims.find(std::string(name));
  if (it == dims.end() || !it->is_object() || !it->contains("max")) return std::nullopt;
  if (!(*it)["max"].is_number_integer()) fail(where(), ": dims.", name, ".max must be an integer");
  return (*it)["max"].get<int64_t>();
}

}  // namespace hfx
