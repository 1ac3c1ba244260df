#include "io/checkpoint.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "io/json_config.h"

namespace hfx {

namespace fs = std::filesystem;

namespace {

// fs::exists without its exceptions: a path the OS refuses (a name too long, no permission) is an
// Error naming it.
bool path_exists(const fs::path& path) {
  std::error_code ec;
  const bool found = fs::exists(path, ec);
  if (ec) fail(path.string(), ": ", ec.message());
  return found;
}

}  // namespace

// A sentence-transformers folder without config.json of its own whose modules.json puts the
// Transformer module in a subfolder (0_Transformer/, the layout before sentence-transformers 2):
// that folder. Else none (the directory itself).
static fs::path transformer_folder(const fs::path& dir) {
  if (path_exists(dir / "config.json") || !path_exists(dir / "modules.json")) return {};
  const nlohmann::json modules = read_json_value(dir / "modules.json");
  for (const auto& module : modules.is_array() ? modules : nlohmann::json::array()) {
    if (!module.is_object() || !module.contains("type") || !module.contains("path")) continue;
    if (!module["type"].is_string() || !module["path"].is_string()) continue;
    const std::string type = module["type"].get<std::string>(), path = module["path"].get<std::string>();
    const bool transformer = type.ends_with("Transformer");
    if (transformer && !path.empty() && path.find("..") == std::string::npos && path_exists(dir / path / "config.json"))
      return dir / path;
  }
  return {};
}

Checkpoint::Checkpoint(const fs::path& dir) : dir_(dir), model_dir_(transformer_folder(dir)) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir.string(), ": not a directory", ec ? " (" + ec.message() + ")" : "");
  const fs::path config_path = model_dir() / "config.json";
  if (!path_exists(config_path)) fail(dir.string(), ": no config.json");
  config_.emplace(read_json_file(config_path), config_path.string());
  const fs::path gen_path = model_dir() / "generation_config.json";
  if (path_exists(gen_path)) generation_config_.emplace(read_json_file(gen_path), gen_path.string());
  tensors_ = std::make_unique<SafetensorsSource>(model_dir());
}

Checkpoint::Checkpoint(JsonConfig config, std::optional<JsonConfig> generation_config,
                       std::unique_ptr<TensorSource> tensors, fs::path dir)
    : dir_(std::move(dir)),
      config_(std::move(config)),
      generation_config_(std::move(generation_config)),
      tensors_(std::move(tensors)) {
  HFX_CHECK(tensors_ != nullptr, "checkpoint without tensors");
}

SafetensorsSource::SafetensorsSource(const fs::path& dir) : dir_(dir) {
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (path_exists(index)) {
    open_index(index);
  } else if (path_exists(single)) {
    open_shards({single});
  } else {
    std::vector<fs::path> found;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".safetensors") found.push_back(it->path());
    if (ec) fail(dir.string(), ": cannot list: ", ec.message());
    std::sort(found.begin(), found.end());
    if (found.empty())
      fail(dir.string(), ": no model.safetensors, model.safetensors.index.json or *.safetensors file");
    open_shards(found);
  }
}

void SafetensorsSource::open_shards(const std::vector<fs::path>& files) {
  for (const auto& path : files) {
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    for (const auto& t : files_.back()->tensors()) {
      const auto [it, inserted] = tensors_.emplace(t.name, &t);
      if (!inserted)
        fail(path.string(), ": tensor '", t.name, "' also appears in ", it->second->file->path().string());
    }
  }
}

void SafetensorsSource::open_index(const fs::path& index_path) {
  const JsonConfig index(read_json_file(index_path), index_path.string());
  const auto& map = index.at("weight_map");
  if (!map.is_object()) index.invalid("weight_map", "must be an object");
  std::set<std::string> shard_names;
  for (const auto& [name, file] : map.items()) {
    if (!file.is_string()) fail(index_path.string(), ": weight_map['", name, "'] is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f == "." || f.find('\0') != std::string::npos)
      fail(index_path.string(), ": weight_map['", name, "'] is not a file name");
    if (f.find('/') != std::string::npos || f == "..")
      fail(index_path.string(), ": weight_map['", name, "'] names a file outside the checkpoint: ", f);
    shard_names.insert(f);
  }
  std::vector<fs::path> shards;
  for (const auto& f : shard_names) {
    std::error_code ec;
    const bool found = fs::exists(dir_ / f, ec);
    if (ec) fail(index_path.string(), ": lists shard ", f, ", which cannot be opened: ", ec.message());
    if (!found) fail(index_path.string(), ": lists shard ", f, " which does not exist");
    shards.push_back(dir_ / f);
  }
  open_shards(shards);
  for (const auto& [name, file] : map.items()) {
    const auto it = tensors_.find(name);
    if (it == tensors_.end() || it->second->file->path().filename() != file.get<std::string>())
      fail(index_path.string(), ": maps tensor '", name, "' to ", file.get<std::string>(),
           " but that shard does not hold it");
  }
}

const TensorView* SafetensorsSource::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

std::vector<const TensorView*> SafetensorsSource::tensors() const {
  std::vector<const TensorView*> out;
  for (const auto& [name, t] : tensors_) out.push_back(t);
  return out;
}

DType Checkpoint::dominant_float_dtype() const {
  std::map<DType, size_t> bytes;
  for (const TensorView* t : tensors())
    if (is_float(t->dtype)) bytes[t->dtype] += t->nbytes;
  DType best = DType::F32;
  size_t most = 0;
  for (const auto& [type, n] : bytes)
    if (n > most) best = type, most = n;
  return best;
}

}  // namespace hfx
