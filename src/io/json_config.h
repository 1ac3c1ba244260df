// Typed, validated access to a JSON config (config.json, generation_config.json). Every error
// names the file and the key.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace hfx {

// A JSON file whose top level is an object (config files); read_json_value takes any top level.
nlohmann::json read_json_file(const std::filesystem::path& path);
nlohmann::json read_json_value(const std::filesystem::path& path);
// A float as Python writes it: a number, Infinity / -Infinity / NaN (bare in a 4.x file, read as
// strings), or transformers 5.x's {"__float__": "Infinity"}; nullopt for anything else.
std::optional<double> python_float(const nlohmann::json& value);

class JsonConfig {
 public:
  JsonConfig(nlohmann::json json, std::string where) : json_(std::move(json)), where_(std::move(where)) {}

  // A key counts as present only when it is not null (HF writes null for "unset").
  bool has(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback) const;
  int64_t positive(const std::string& key) const;
  int64_t positive(const std::string& key, int64_t fallback) const;
  double number(const std::string& key) const;
  double number(const std::string& key, double fallback) const;
  // `base` times the key's ratio, truncated (a width such as hidden_size x mlp_ratio): refused
  // unless it is a positive size (at most 2^40), so a corrupt ratio never overflows an integer.
  int64_t scaled(const std::string& key, double fallback, int64_t base) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  std::optional<JsonConfig> object(const std::string& key) const;
  const nlohmann::json& at(const std::string& key) const;
  const nlohmann::json& json() const { return json_; }
  const std::string& where() const { return where_; }
  [[noreturn]] void invalid(const std::string& key, const std::string& why) const;

 private:
  nlohmann::json json_;
  std::string where_;
};

}  // namespace hfx
