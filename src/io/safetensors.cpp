#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hfx {

namespace {

using nlohmann::json;

uint64_t read_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

struct Parsed {
  TensorInfo info;
  uint64_t begin, end;
};

Parsed parse_entry(const std::string& where, const std::string& name, const json& entry) {
  const std::string at = where + ": tensor '" + name + "'";
  if (!entry.is_object()) fail(at, ": header entry is not an object");
  if (!entry.contains("dtype") || !entry["dtype"].is_string()) fail(at, ": missing 'dtype'");
  const std::string code = entry["dtype"].get<std::string>();
  const auto dtype = dtype_from_safetensors(code);
  if (!dtype) fail(at, ": unknown dtype '", code, "'");
  if (!entry.contains("shape") || !entry["shape"].is_array()) fail(at, ": missing 'shape'");
  Parsed p{TensorInfo{{name, *dtype, {}, nullptr, 0, nullptr}, nullptr}, 0, 0};
  uint64_t numel = 1;
  for (const auto& d : entry["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) fail(at, ": shape holds a non-integer or negative dim");
    const auto dim = d.get<uint64_t>();
    if (dim != 0 && numel > UINT64_MAX / dim) fail(at, ": shape overflows");
    numel *= dim;
    p.info.shape.push_back(static_cast<int64_t>(dim));
  }
  const auto& offs = entry.value("data_offsets", json());
  if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() ||
      !offs[1].is_number_unsigned())
    fail(at, ": 'data_offsets' must be two non-negative integers");
  p.begin = offs[0].get<uint64_t>();
  p.end = offs[1].get<uint64_t>();
  if (p.end < p.begin) fail(at, ": data_offsets end ", p.end, " is before begin ", p.begin);
  const uint64_t elem = dtype_size(*dtype);
  if (numel > UINT64_MAX / elem || numel * elem != p.end - p.begin)
    fail(at, ": shape ", shape_string(p.info.shape), " x ", code, " needs ", numel * elem,
         " bytes but data_offsets span ", p.end - p.begin);
  return p;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : file_(std::make_unique<MappedFile>(path)) {
  const std::string where = path.string();
  const size_t size = file_->size();
  if (size == 0) fail(where, ": file is empty (not a safetensors file)");
  if (size < 8) fail(where, ": file is truncated (", size, " bytes, header length needs 8)");
  const uint64_t header_len = read_le64(file_->data());
  if (header_len > kMaxSafetensorsHeader)
    fail(where, ": header length ", header_len, " exceeds the ", kMaxSafetensorsHeader, "-byte limit");
  if (header_len > size - 8)
    fail(where, ": file is truncated (header length ", header_len, " but only ", size - 8,
         " bytes follow)");
  const char* text = reinterpret_cast<const char*>(file_->data() + 8);
  json header = json::parse(text, text + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) fail(where, ": header is not valid JSON");
  if (!header.is_object()) fail(where, ": header is not a JSON object");

  const std::byte* base = file_->data() + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<Parsed> parsed;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(where, ": '__metadata__' is not an object");
      for (const auto& [k, v] : entry.items())
        if (v.is_string()) metadata_[k] = v.get<std::string>();
      continue;
    }
    Parsed p = parse_entry(where, name, entry);
    if (p.end > data_size)
      fail(where, ": tensor '", name, "': data_offsets [", p.begin, ", ", p.end,
           "] run past the end of the data (", data_size, " bytes; file truncated?)");
    p.info.data = base + p.begin;
    p.info.nbytes = p.end - p.begin;
    p.info.file = file_.get();
    p.info.storage = file_.get();
    parsed.push_back(std::move(p));
  }
  std::vector<const Parsed*> by_offset;
  for (const auto& p : parsed) by_offset.push_back(&p);
  std::sort(by_offset.begin(), by_offset.end(), [](const Parsed* a, const Parsed* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  const Parsed* furthest = nullptr;  // the tensor reaching furthest so far (empty ones overlap nothing)
  for (const Parsed* p : by_offset) {
    if (furthest && p->begin < furthest->end && p->end > p->begin)
      fail(where, ": tensors '", furthest->info.name, "' and '", p->info.name, "' overlap in the data section");
    if (!furthest || p->end > furthest->end) furthest = p;
  }
  for (auto& p : parsed) {
    index_[p.info.name] = tensors_.size();
    tensors_.push_back(std::move(p.info));
  }
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace hfx
