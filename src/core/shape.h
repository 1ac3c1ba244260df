// Shapes whose dims are constants or named symbols with bounds. Symbols compare by identity,
// so two dims built from the same symbol are provably equal.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hfx {

struct Symbol {
  std::string name;
  int64_t min = 1;
  int64_t max = INT64_MAX;
  // A derived dim, `a + b`, `a + k`, `a * k` or `a // k` (k > 0 for * and //): how a runtime
  // computes it from the dims it is built from. A free symbol (a graph input's dim) has none.
  enum class Op : uint8_t { Free, Add, Mul, FloorDiv };
  Op op = Op::Free;
  const Symbol* a = nullptr;
  const Symbol* b = nullptr;  // Add or Mul of two symbols; else the constant k
  int64_t k = 0;
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

// A dim expression in canonical form: a constant, an existing dim, or a derived symbol still to be
// made (Graph::dim interns it, so that one expression is one symbol and compares equal). Constants
// fold; x + 0, x * 1 and x // 1 are x; (x + j) + k is x + (j + k).
struct DimExpr {
  std::optional<Dim> dim;  // set: the expression is this dim
  Symbol::Op op = Symbol::Op::Free;
  const Symbol* a = nullptr;
  const Symbol* b = nullptr;
  int64_t k = 0;
  // Whether `d` is this expression's dim (a derived symbol of the same form, or the dim itself).
  bool is(const Dim& d) const;
};
DimExpr dim_plus(const Dim& a, int64_t k);
DimExpr dim_plus(const Dim& a, const Dim& b);
DimExpr dim_times(const Dim& a, int64_t k);
DimExpr dim_times(const Dim& a, const Dim& b);
DimExpr dim_floordiv(const Dim& a, int64_t k);

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
