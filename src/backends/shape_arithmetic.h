// Shape arithmetic as integers, for lowerings whose runtimes compute shapes as scalars (torch's
// SymInts in a .pt2, Int EValues in a .pte) rather than as int64 tensors: ShapeOf's result and
// what element picks, +, -, *, concatenation and reshapes make of it. `Int` is the lowering's
// integer (a constant or a computed value).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "ir/graph.h"

namespace hfx {

// A small int64 constant (rank <= 1, at most 16 elements) as numbers, the way shape arithmetic
// reads literals; nullopt for anything else.
inline std::optional<std::vector<int64_t>> small_int64_constant(const Value* v) {
  constexpr size_t kMaxShapeConstant = 16;
  if (!v || !v->is_constant() || v->dtype != DType::I64 || v->constant->op != ConstantData::Op::Owned ||
      v->constant->src_dtype != DType::I64 || v->constant->nbytes() > kMaxShapeConstant * sizeof(int64_t) ||
      v->rank() > 1)
    return std::nullopt;
  std::vector<int64_t> out(v->constant->nbytes() / sizeof(int64_t));
  for (size_t i = 0; i < out.size(); ++i) std::memcpy(&out[i], v->constant->bytes() + i * sizeof(int64_t), sizeof(int64_t));
  return out;
}

// The integers of node n's int64 result, when n is shape arithmetic over values `value_of` knows
// as integers (Gather of constant positions on axis 0, elementwise Add/Sub/Mul with
// broadcasting of one element, Concat, Unsqueeze/Reshape); nullopt otherwise (a tensor op).
// `constant_of(i)` is i's value if it is a constant; `arith(op, a, b)` computes "add", "sub" or "mul".
template <class Int, class ValueOf, class ConstantOf, class Arith>
std::optional<std::vector<Int>> fold_shape_arithmetic(const Node& n, ValueOf&& value_of, ConstantOf&& constant_of,
                                                      Arith&& arith) {
  const Value* y = n.outputs.at(0);
  if (y->dtype != DType::I64 || y->rank() > 1) return std::nullopt;
  std::vector<const std::vector<Int>*> args;
  for (const Value* v : n.inputs) {
    if (!v) continue;
    const std::vector<Int>* s = value_of(v);
    if (!s) return std::nullopt;
    args.push_back(s);
  }
  std::vector<Int> out;
  switch (n.op) {
    case OpKind::Gather:
      if (n.attrs_as<AxisAttrs>().axis != 0) return std::nullopt;
      for (const Int& i : *args[1]) {
        const std::optional<int64_t> index = constant_of(i);
        if (!index) return std::nullopt;
        const auto size = static_cast<int64_t>(args[0]->size());
        const int64_t at = *index < 0 ? *index + size : *index;
        HFX_CHECK(at >= 0 && at < size, "shape element ", *index, " of ", size, " (", n.name, ")");
        out.push_back((*args[0])[static_cast<size_t>(at)]);
      }
      break;
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul: {
      const auto& a = *args[0];
      const auto& b = *args[1];
      const size_t count = std::max(a.size(), b.size());
      if ((a.size() != count && a.size() != 1) || (b.size() != count && b.size() != 1)) return std::nullopt;
      const std::string_view op = n.op == OpKind::Add ? "add" : n.op == OpKind::Sub ? "sub" : "mul";
      for (size_t i = 0; i < count; ++i) out.push_back(arith(op, a[a.size() == 1 ? 0 : i], b[b.size() == 1 ? 0 : i]));
      break;
    }
    case OpKind::Concat:
      for (const auto* a : args) out.insert(out.end(), a->begin(), a->end());
      break;
    case OpKind::Unsqueeze:
    case OpKind::Reshape:
      out = *args[0];
      break;
    default: return std::nullopt;
  }
  return out;
}

}  // namespace hfx
