// Nodes the XNNPACK delegate runs, lowered into one XNNGraph per run of consecutive ones (see
// EtLowering::delegate_group): each op's rule (xnnpack_ops.cpp, HFX_XNN_OP) says which nodes it
// takes and writes their XNNPACK nodes. Values are float32; dims are upper bounds, and a reshape
// leaves its one dynamic dim for XNNPACK to infer.
#pragma once
#include <map>
#include <set>
#include <vector>

#include "backends/executorch/lowering.h"
#include "backends/executorch/xnnpack.h"

namespace hfx {

class XnnLowering {
 public:
  XnnLowering(EtLowering& et, const std::vector<const Node*>& group);
  EtLowering& et;
  XnnGraphBuilder g;

  // The value of n's input i: made in the group, a constant, or a delegate input.
  uint32_t in(const Node& n, size_t i) { return value(n.inputs.at(i)); }
  uint32_t value(const Value* v);
  // n's output i: a delegate output where read after the group, else internal.
  uint32_t out(const Node& n, size_t i = 0);
  uint32_t internal(const std::vector<int64_t>& dims) { return g.internal(XnnFloat::F32, dims); }
  uint32_t scalar(float v) { return made_constant({v}, {1}); }
  uint32_t made_constant(const std::vector<float>& data, const std::vector<int64_t>& dims) {
    return g.named_constant(XnnFloat::F32, et.named_floats(data, dims));
  }
  // A delegate input computed by kernels before the delegate runs.
  uint32_t prepared(int tensor, const std::vector<int64_t>& dims);
  std::vector<int64_t> dims(const Value* v) const;
  std::vector<int64_t> dims(const Shape& s) const;
  // A reshape's target: 0 for its dynamic dim (at most one; see reshapable).
  static std::vector<int64_t> reshape_target(const Shape& s);
  static int64_t upper(const Dim& d) { return d.is_static() ? d.value() : d.symbol()->max; }
  // Whether a dim's size is only known at run time (a bound with min == max, as the batch of 1, is not).
  static bool dynamic(const Dim& d) { return !d.is_static() && d.symbol()->min != d.symbol()->max; }

  // Writes the payload and calls it.
  void finish();

 private:
  std::set<const Node*> members_;
  std::map<const Value*, uint32_t> ids_;
  std::vector<int> inputs_;                 // the delegate's inputs, in the order of its external inputs
  std::vector<const Value*> outputs_;       // and its outputs
};

using XnnRule = void (*)(XnnLowering& x, const Node& n);
using XnnAccepts = bool (*)(const Node& n);
struct XnnOpRule {
  XnnRule lower = nullptr;
  XnnAccepts accepts = nullptr;
  bool moves_data = false;  // only moves data (a run of these alone stays on the kernels, as views)
};
const XnnOpRule* xnn_rule(const Node& n);  // null: XNNPACK does not run this node
bool register_xnn_rule(OpKind op, XnnOpRule rule);

// Whether a shape has at most one dim whose size is only known at run time.
bool reshapable(const Shape& s);
// Whether every tensor n reads and writes is float32 of at most XNNPACK's 6 dims.
bool all_float32(const Node& n);

#define HFX_XNN_RULE(Op, accepts, moves)                                                              \
  static void xnn_lower_##Op(XnnLowering& x, const Node& n);                                          \
  [[maybe_unused]] static const bool xnn_registered_##Op =                                            \
      register_xnn_rule(OpKind::Op, XnnOpRule{xnn_lower_##Op, accepts, moves});                       \
  static void xnn_lower_##Op([[maybe_unused]] XnnLowering& x, [[maybe_unused]] const Node& n)
#define HFX_XNN_OP(Op, accepts) HFX_XNN_RULE(Op, accepts, false)
#define HFX_XNN_MOVE(Op, accepts) HFX_XNN_RULE(Op, accepts, true)

}  // namespace hfx
