#include "core/shape.h"

#include "core/error.h"

namespace hfx {

bool DimExpr::is(const Dim& d) const {
  if (dim) return *dim == d;
  const Symbol* s = d.symbol();
  return s && s->op == op && s->a == a && s->b == b && s->k == k;
}

DimExpr dim_plus(const Dim& a, int64_t k) {
  if (k == 0) return {a};
  if (a.is_static()) return {Dim(a.value() + k)};
  const Symbol* s = a.symbol();
  if (s->op == Symbol::Op::Add && !s->b) {  // (x + j) + k = x + (j + k)
    if (s->k + k == 0) return {Dim(s->a)};
    return {std::nullopt, Symbol::Op::Add, s->a, nullptr, s->k + k};
  }
  return {std::nullopt, Symbol::Op::Add, s, nullptr, k};
}

DimExpr dim_plus(const Dim& a, const Dim& b) {
  if (b.is_static()) return dim_plus(a, b.value());
  if (a.is_static()) return dim_plus(b, a.value());
  return {std::nullopt, Symbol::Op::Add, a.symbol(), b.symbol(), 0};
}

DimExpr dim_times(const Dim& a, int64_t k) {
  HFX_CHECK(k > 0, "dim multiplied by ", k);
  if (k == 1) return {a};
  if (a.is_static()) return {Dim(a.value() * k)};
  return {std::nullopt, Symbol::Op::Mul, a.symbol(), nullptr, k};
}

DimExpr dim_times(const Dim& a, const Dim& b) {
  if (b.is_static()) return dim_times(a, b.value());
  if (a.is_static()) return dim_times(b, a.value());
  return {std::nullopt, Symbol::Op::Mul, a.symbol(), b.symbol(), 0};
}

DimExpr dim_floordiv(const Dim& a, int64_t k) {
  HFX_CHECK(k > 0, "dim divided by ", k);
  if (k == 1) return {a};
  if (a.is_static()) return {Dim(a.value() >= 0 ? a.value() / k : -((-a.value() + k - 1) / k))};
  return {std::nullopt, Symbol::Op::FloorDiv, a.symbol(), nullptr, k};
}

}  // namespace hfx
