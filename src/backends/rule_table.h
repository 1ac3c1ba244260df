// A backend's per-op rules, one slot per IR op: every backend's lowering table (ONNX, OpenVINO,
// .pt2, ExecuTorch, XNNPACK) is one of these, so each refuses an op registered twice alike.
#pragma once
#include <array>
#include <cstddef>

#include "core/error.h"
#include "ir/graph.h"

namespace hfx {

template <class Rule>
class OpRuleTable {
 public:
  explicit OpRuleTable(const char* owner) : owner_(owner) {}

  bool add(OpKind op, Rule rule) {
    Entry& e = entries_[static_cast<size_t>(op)];
    HFX_CHECK(!e.registered, "internal error: ", owner_, " lowering of ", op_name(op), " registered twice");
    e = {rule, true};
    return true;
  }
  // The op's rule, or null where the backend has none.
  const Rule* find(OpKind op) const {
    const Entry& e = entries_[static_cast<size_t>(op)];
    return e.registered ? &e.rule : nullptr;
  }
  // The op's rule, or an empty Rule where the backend has none.
  const Rule& get(OpKind op) const {
    static const Rule none{};
    const Rule* rule = find(op);
    return rule ? *rule : none;
  }

 private:
  struct Entry {
    Rule rule{};
    bool registered = false;
  };
  const char* owner_;
  std::array<Entry, kOpCount> entries_{};
};

}  // namespace hfx
