// The .pt2 lowering of the IR's ops: every primitive is the ATen table's call (backends/aten/ops.cpp)
// unless a rule here says otherwise; the high-level ops named here are kept (the ATen table's call
// or a rule of their own), the others decomposed into primitives first.
#include <limits>

#include "backends/pt2/lowering.h"
#include "core/error.h"

namespace hfx {
namespace {

HFX_PT2_ATEN_OP(SiLU);
HFX_PT2_ATEN_OP(Softplus);
HFX_PT2_ATEN_OP(GELU);
HFX_PT2_ATEN_OP(Linear);
HFX_PT2_ATEN_OP(Embedding);
HFX_PT2_ATEN_OP(KVAppend);

// One unsqueeze per axis, as torch traces x[:, None, ...].
HFX_PT2_OP(Unsqueeze) {
  const Value* x = n.inputs[0];
  std::string cur = l.in(n, 0);
  Shape shape = x->shape;
  const std::vector<int64_t>& axes = n.attrs_as<AxesAttrs>().axes;  // sorted: each inserts at its final place
  for (size_t i = 0; i < axes.size(); ++i) {
    shape.insert(shape.begin() + axes[i], Dim(1));
    const bool last = i + 1 == axes.size();
    cur = l.call("torch.ops.aten.unsqueeze.default", {{"self", tensor_arg(cur)}, {"dim", int_arg(axes[i])}}, x->dtype,
                 l.sizes(shape), last ? n.outputs[0]->name : n.outputs[0]->name + "_part");
  }
  l.define(n.outputs[0], cur);
}

// A static cache's update writes the caller's tensor (scatter_): ATen's in-place variant.
HFX_PT2_OP(ScatterElements) {
  if (!l.updates_in_place(n)) return l.aten(n);
  l.result(n, "torch.ops.aten.scatter_.src",
           {{"self", tensor_arg(l.in(n, 0))}, {"dim", int_arg(n.attrs_as<AxisAttrs>().axis)},
            {"index", tensor_arg(l.in(n, 1))}, {"src", tensor_arg(l.in(n, 2))}});
}

// HF's RMSNorm computes in float32; aten.rms_norm does the same ops on a float32 input (others
// are decomposed, so the cast back to the input's type comes before the weight as in HF).
bool rms_norm_in_float32(const Node& n) { return n.inputs[0]->dtype == DType::F32; }
HFX_PT2_OP_NATIVE(RMSNorm, rms_norm_in_float32) {
  const Value* x = n.inputs[0];
  l.result(n, "torch.ops.aten.rms_norm.default",
           {{"input", tensor_arg(l.in(n, 0))}, {"normalized_shape", sym_ints_arg({l.sym_int(x->shape.back())})},
            {"weight", tensor_arg(l.in(n, 1))}, {"eps", float_arg(n.attrs_as<NormAttrs>().epsilon)}});
}

// scaled_dot_product_attention with the boolean mask (true = attend) and grouped heads; a fully
// masked row (a left pad's query) comes out as zeros. Softcapping and sinks are decomposed.
bool sdpa_computes(const Node& n) {  // no softcap, sinks or additive bias
  return n.attrs_as<AttentionAttrs>().softcap == 0.0 && !n.input(4) && !n.input(5);
}
HFX_PT2_OP_NATIVE(Attention, sdpa_computes) {
  HFX_CHECK(!n.input(5), "internal error: ", n.name, ": a native attention was given an additive bias");
  const Dim q_heads = n.inputs[0]->shape[1], kv_heads = n.inputs[1]->shape[1];
  l.result(n, "torch.ops.aten.scaled_dot_product_attention.default",
           {{"query", tensor_arg(l.in(n, 0))}, {"key", tensor_arg(l.in(n, 1))}, {"value", tensor_arg(l.in(n, 2))},
            {"attn_mask", n.input(3) ? tensor_arg(l.in(n, 3)) : none_arg()},
            {"scale", float_arg(n.attrs_as<AttentionAttrs>().scale), true},
            {"enable_gqa", bool_arg(!(q_heads == kv_heads)), true}});
}

}  // namespace
}  // namespace hfx
