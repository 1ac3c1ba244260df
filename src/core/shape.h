// Shapes whose dims are constants or named symbols with bounds. Symbols compare by identity,
// so two dims built from the same symbol are provably equal.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hfx {

struct Symbol {
  std::string name;
  int64_t min = 1;
  int64_t max = INT64_MAX;
};

class Dim {
 public:
  Dim(int64_t value) : value_(value) {}  // NOLINT: constants read naturally as dims
  Dim(const Symbol* symbol) : symbol_(symbol) {}  // NOLINT
  bool is_static() const { return symbol_ == nullptr; }
  int64_t value() const { return value_; }
  const Symbol* symbol() const { return symbol_; }
  bool operator==(const Dim& other) const {
    return symbol_ == other.symbol_ && (symbol_ != nullptr || value_ == other.value_);
  }
  std::string to_string() const { return symbol_ ? symbol_->name : std::to_string(value_); }

 private:
  int64_t value_ = -1;
  const Symbol* symbol_ = nullptr;
};

using Shape = std::vector<Dim>;

inline std::string shape_string(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + s[i].to_string();
  return out + "]";
}

inline std::string shape_string(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace hfx
