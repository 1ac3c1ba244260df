#include "io/json_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace hfx {

using nlohmann::json;

namespace {

// Python's json writes float('inf') and float('nan') as bare Infinity / -Infinity / NaN (a 4.x
// config's time_step_limit); outside strings they become the strings python_float reads.
std::string quote_python_literals(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const std::string literal : {"-Infinity", "Infinity", "NaN"}) {
      if (text.compare(i, literal.size(), literal) == 0) {
        out += '"' + literal + '"';
        i += literal.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

}  // namespace

json read_json_value(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) fail(path.string(), ": cannot read");
  std::stringstream buf;
  buf << in.rdbuf();
  json j = json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) j = json::parse(quote_python_literals(buf.str()), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(path.string(), ": not valid JSON");
  return j;
}

std::optional<double> python_float(const json& v) {
  if (v.is_number()) return v.get<double>();
  const json* text = &v;
  if (v.is_object() && v.size() == 1 && v.contains("__float__")) text = &v.at("__float__");  // transformers 5.x
  if (!text->is_string()) return std::nullopt;
  const std::string s = text->get<std::string>();
  if (s == "Infinity" || s == "inf") return INFINITY;
  if (s == "-Infinity" || s == "-inf") return -INFINITY;
  if (s == "NaN" || s == "nan") return NAN;
  return std::nullopt;
}

json read_json_file(const std::filesystem::path& path) {
  json j = read_json_value(path);
  if (!j.is_object()) fail(path.string(), ": top level is not a JSON object");
  return j;
}

bool JsonConfig::has(const std::string& key) const {
  return json_.contains(key) && !json_.at(key).is_null();
}

const nlohmann::json& JsonConfig::at(const std::string& key) const {
  if (!has(key)) fail(where_, ": required key '", key, "' is missing");
  return json_.at(key);
}

void JsonConfig::invalid(const std::string& key, const std::string& why) const {
  fail(where_, ": '", key, "' ", why, (has(key) ? ", got " + json_.at(key).dump() : std::string()));
}

int64_t JsonConfig::integer(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {  // 32.0 is an integer; 1e300 and 2.5 are not
    const double d = v.get<double>();
    if (std::abs(d) < 9.0e18 && d == std::trunc(d)) return static_cast<int64_t>(d);
  }
  invalid(key, "must be an integer");
}

int64_t JsonConfig::integer(const std::string& key, int64_t fallback) const {
  return has(key) ? integer(key) : fallback;
}

int64_t JsonConfig::positive(const std::string& key) const {
  const int64_t v = integer(key);
  if (v <= 0) invalid(key, "must be a positive integer");
  return v;
}

int64_t JsonConfig::positive(const std::string& key, int64_t fallback) const {
  return has(key) ? positive(key) : fallback;
}

int64_t JsonConfig::scaled(const std::string& key, double fallback, int64_t base) const {
  const double width = number(key, fallback) * static_cast<double>(base);
  if (!(width >= 1.0 && width <= 1099511627776.0)) invalid(key, "must scale " + std::to_string(base) + " to a positive size");
  return static_cast<int64_t>(width);
}

double JsonConfig::number(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_number()) invalid(key, "must be a number");
  return v.get<double>();
}

double JsonConfig::number(const std::string& key, double fallback) const {
  return has(key) ? number(key) : fallback;
}

bool JsonConfig::boolean(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const nlohmann::json& v = json_.at(key);
  if (!v.is_boolean()) invalid(key, "must be true or false");
  return v.get<bool>();
}

std::string JsonConfig::string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const nlohmann::json& v = json_.at(key);
  if (!v.is_string()) invalid(key, "must be a string");
  return v.get<std::string>();
}

std::optional<JsonConfig> JsonConfig::object(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  if (!json_.at(key).is_object()) invalid(key, "must be an object");
  return JsonConfig(json_.at(key), where_ + ": " + key);
}

}  // namespace hfx
