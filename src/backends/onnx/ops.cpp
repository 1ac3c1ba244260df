// The ONNX lowering of each IR op, one registered function per op (opset 23; com.microsoft
// contrib ops where the profile allows them). High-level ops without a rule here, or whose
// native predicate says no, are decomposed into primitives before lowering.
#include <algorithm>

#include "backends/onnx/lowering.h"
#include "core/error.h"
#include "ir/builder.h"

namespace hfx {
namespace {

// Ops whose ONNX op has the IR op's name, inputs and no attributes.
#define HFX_ONNX_SAME_NAME(Op) \
  HFX_ONNX_OP(Op) { l.node(#Op, in, {out}); }
HFX_ONNX_SAME_NAME(Add)
HFX_ONNX_SAME_NAME(Sub)
HFX_ONNX_SAME_NAME(Mod)  // integers: fmod 0 (the default) floors
HFX_ONNX_SAME_NAME(Mul)
HFX_ONNX_SAME_NAME(Div)
HFX_ONNX_SAME_NAME(Pow)
HFX_ONNX_SAME_NAME(Max)
HFX_ONNX_SAME_NAME(Min)
HFX_ONNX_SAME_NAME(Neg)
HFX_ONNX_SAME_NAME(Sqrt)
HFX_ONNX_SAME_NAME(Reciprocal)
HFX_ONNX_SAME_NAME(Exp)
HFX_ONNX_SAME_NAME(Log)
HFX_ONNX_SAME_NAME(Softplus)
HFX_ONNX_SAME_NAME(Tanh)
HFX_ONNX_SAME_NAME(Erf)
HFX_ONNX_SAME_NAME(Cos)
HFX_ONNX_SAME_NAME(Sin)
HFX_ONNX_SAME_NAME(Sigmoid)
HFX_ONNX_SAME_NAME(MatMul)
HFX_ONNX_SAME_NAME(Where)
HFX_ONNX_SAME_NAME(Equal)
HFX_ONNX_SAME_NAME(Less)
HFX_ONNX_SAME_NAME(LessOrEqual)
HFX_ONNX_SAME_NAME(Greater)
HFX_ONNX_SAME_NAME(And)
HFX_ONNX_SAME_NAME(Not)
HFX_ONNX_SAME_NAME(Range)
HFX_ONNX_SAME_NAME(Expand)
HFX_ONNX_SAME_NAME(BitwiseAnd)
#undef HFX_ONNX_SAME_NAME

HFX_ONNX_OP(BitShiftRight) { attr_string(l.node("BitShift", in, {out}), "direction", "RIGHT"); }
HFX_ONNX_OP(Softmax) { attr_int(l.node("Softmax", in, {out}), "axis", n.attrs_as<AxisAttrs>().axis); }
// pads: every axis' begin, then every axis' end; the value in x's type.
HFX_ONNX_OP(Pad) {
  const PadAttrs& p = n.attrs_as<PadAttrs>();
  std::vector<int64_t> pads = p.begin;
  pads.insert(pads.end(), p.end.begin(), p.end.end());
  l.node("Pad", {in[0], l.ints(pads), l.float_scalar(static_cast<float>(p.value), n.inputs[0]->dtype)}, {out});
}
HFX_ONNX_OP(Conv) {
  const ConvAttrs& c = n.attrs_as<ConvAttrs>();
  std::vector<int64_t> pads = c.pads;
  pads.insert(pads.end(), c.pads.begin(), c.pads.end());
  onnx::NodeProto* conv = l.node("Conv", in, {out});
  attr_ints(conv, "strides", c.strides);
  attr_ints(conv, "pads", pads);
  attr_ints(conv, "dilations", c.dilations);
  attr_int(conv, "group", c.group);
}
HFX_ONNX_OP(CumSum) { l.node("CumSum", {in[0], l.ints({n.attrs_as<AxisAttrs>().axis}, true)}, {out}); }

void lower_reduce(Lowering& l, const char* op, const Node& n, OnnxNames in, const std::string& out) {
  const ReduceAttrs& r = n.attrs_as<ReduceAttrs>();
  if (!r.axes.empty()) in.push_back(l.ints(r.axes));  // opset 18+: axes as an input
  attr_int(l.node(op, in, {out}), "keepdims", r.keepdims);
}
HFX_ONNX_OP(ReduceMean) { lower_reduce(l, "ReduceMean", n, in, out); }
HFX_ONNX_OP(ReduceMax) { lower_reduce(l, "ReduceMax", n, in, out); }
HFX_ONNX_OP(ReduceSum) { lower_reduce(l, "ReduceSum", n, in, out); }
// TopK's two outputs; the one the IR node does not ask for gets a temporary name.
HFX_ONNX_OP(TopK) {
  const TopKAttrs& t = n.attrs_as<TopKAttrs>();
  const std::string unused = l.temp(out + (t.indices ? "/values" : "/indices"));
  onnx::NodeProto* top = l.node("TopK", {in[0], l.ints({t.k})}, t.indices ? OnnxNames{unused, out} : OnnxNames{out, unused});
  attr_int(top, "axis", -1);
  attr_int(top, "largest", 1);
  attr_int(top, "sorted", 1);
}

HFX_ONNX_OP(Cast) { attr_int(l.node("Cast", in, {out}), "to", onnx_type(n.attrs_as<CastAttrs>().to)); }
HFX_ONNX_OP(Reshape) {
  l.node("Reshape", {in[0], l.ints(reshape_target(n.inputs[0]->shape, n.attrs_as<ShapeAttrs>().shape))}, {out});
}
HFX_ONNX_OP(Transpose) { attr_ints(l.node("Transpose", in, {out}), "perm", n.attrs_as<PermAttrs>().perm); }
HFX_ONNX_OP(Slice) {
  const SliceAttrs& s = n.attrs_as<SliceAttrs>();
  if (const auto* parts = l.split_group(n)) {  // it and its sibling slices tile the value: one Split
    std::vector<int64_t> sizes;
    std::vector<std::string> outs;
    const int64_t last = n.inputs[0]->shape.back().value();
    for (const Node* p : *parts) {
      const SliceAttrs& a = p->attrs_as<SliceAttrs>();
      sizes.push_back(std::min(a.end, last) - a.start);
      outs.push_back(p->outputs[0]->name);
    }
    attr_int(l.node("Split", {in[0], l.ints(sizes)}, outs), "axis", s.axis);
    return;
  }
  l.node("Slice", {in[0], l.ints({s.start}), l.ints({s.end}), l.ints({s.axis})}, {out});
}
HFX_ONNX_OP(Concat) { attr_int(l.node("Concat", in, {out}), "axis", n.attrs_as<ConcatAttrs>().axis); }
HFX_ONNX_OP(Gather) { attr_int(l.node("Gather", in, {out}), "axis", n.attrs_as<AxisAttrs>().axis); }
HFX_ONNX_OP(Unsqueeze) { l.node("Unsqueeze", {in[0], l.ints(n.attrs_as<AxesAttrs>().axes)}, {out}); }
HFX_ONNX_OP(ScatterElements) {
  attr_int(l.node("ScatterElements", in, {out}), "axis", n.attrs_as<AxisAttrs>().axis);
}
HFX_ONNX_OP(GatherElements) {
  attr_int(l.node("GatherElements", in, {out}), "axis", n.attrs_as<AxisAttrs>().axis);
}
HFX_ONNX_OP(ShapeOf) { l.node("Shape", in, {out}); }

// MatMul against the weight stored transposed ([in, out]) at export time.
HFX_ONNX_OP_RULE(Linear, nullptr, 0b10) {
  const std::string w = l.constant_name(n.inputs[1], true);
  if (!n.input(2)) {
    l.node("MatMul", {in[0], w}, {out});
    return;
  }
  const std::string mm = l.temp(out);
  l.node("MatMul", {in[0], w}, {mm});
  l.node("Add", {mm, in[2]}, {out});
}

// onnxruntime's MatMulNBits reads the IR's layout as is: codes [N, K/g, g*bits/8], scales
// [N, K/g], no zero points (the default is the symmetric midpoint). accuracy_level 4 lets it
// quantize activations to int8 and use the integer dot-product units; 0 computes in float.
bool has_contrib_ops(const Node&, OnnxOpProfile profile) { return profile_has_contrib_ops(profile); }
HFX_ONNX_OP_NATIVE(QuantizedLinear, has_contrib_ops) {
  const bool bias = n.input(3) != nullptr;
  const std::string mm = bias ? l.temp(out) : out;
  auto* m = l.node("MatMulNBits", {in[0], in[1], in[2]}, {mm}, "com.microsoft");
  const QuantizedLinearAttrs& q = n.attrs_as<QuantizedLinearAttrs>();
  attr_int(m, "K", n.inputs[0]->shape.back().value());
  attr_int(m, "N", n.inputs[1]->shape[0].value());
  attr_int(m, "bits", q.bits);
  attr_int(m, "block_size", q.group_size);
  attr_int(m, "accuracy_level", q.int8_compute ? 4 : 0);
  if (bias) l.node("Add", {mm, in[3]}, {out});
}

// onnxruntime's GatherBlockQuantized reads a tied embedding from the lm_head's MatMulNBits codes,
// viewed as [V, H * bits / 8] (the same bytes, stored once); no zero points: the default is the
// symmetric midpoint, as for MatMulNBits.
HFX_ONNX_OP_RULE(QuantizedEmbedding, has_contrib_ops, 0b1) {
  const Value* codes = n.inputs[0];
  const QuantizedLinearAttrs& q = n.attrs_as<QuantizedLinearAttrs>();
  const int64_t rows = codes->shape[0].value(), row_bytes = codes->shape[1].value() * codes->shape[2].value();
  auto* g = l.node("GatherBlockQuantized", {l.reshaped_constant(codes, {rows, row_bytes}), in[2], in[1]}, {out},
                   "com.microsoft");
  attr_int(g, "gather_axis", 0);
  attr_int(g, "quantize_axis", 1);
  attr_int(g, "block_size", q.group_size);
  attr_int(g, "bits", q.bits);
}

HFX_ONNX_OP_RULE(Embedding, nullptr, 0b1) {
  const Value* w = n.inputs[0];
  if (!l.stored_transposed(w)) {
    attr_int(l.node("Gather", {l.constant_name(w, false), in[1]}, {out}), "axis", 0);
    return;
  }
  // Tied embeddings: one [hidden, vocab] copy serves lm_head; gather columns and transpose back.
  const std::string cols = l.temp(out);
  attr_int(l.node("Gather", {l.constant_name(w, true), in[1]}, {cols}), "axis", 1);
  std::vector<int64_t> perm;
  for (size_t i = 1; i <= n.inputs[1]->rank(); ++i) perm.push_back(static_cast<int64_t>(i));
  perm.push_back(0);
  attr_ints(l.node("Transpose", {cols}, {out}), "perm", perm);
}

// RMSNormalization-23 computes in float32 (stash_type 1) and casts back before the scale, as HF.
// The ort profile uses onnxruntime's SimplifiedLayerNormalization, its fast kernel for the same.
HFX_ONNX_OP(RMSNorm) {
  const float epsilon = static_cast<float>(n.attrs_as<NormAttrs>().epsilon);
  const bool ort = profile_has_contrib_ops(l.profile());
  if (const Node* add = ort ? l.fusable_residual(n) : nullptr; add && l.fused(add)) {
    // Output 3 is the residual sum the skipped Add would have produced.
    onnx::NodeProto* norm = l.node("SkipSimplifiedLayerNormalization",
                                   {l.name_of(add->inputs[0]), l.name_of(add->inputs[1]), in[1]},
                                   {out, "", "", add->outputs[0]->name}, "com.microsoft");
    attr_float(norm, "epsilon", epsilon);
    return;
  }
  onnx::NodeProto* norm = l.node(ort ? "SimplifiedLayerNormalization" : "RMSNormalization", {in[0], in[1]}, {out});
  attr_int(norm, "axis", -1);
  attr_float(norm, "epsilon", epsilon);
  attr_int(norm, "stash_type", 1);
}

// onnxruntime's MoE / QMoE (com.microsoft) over `weights` (fc1, its bias, fc2, its bias, in the
// op's input order): the tokens as [T, H] and the logits as [T, E], as the CPU kernels take them;
// softmax routing, top-k, optional renormalisation, SwiGLU experts over interleaved fc1 rows (the
// IR's layout). `more_attrs` adds an op's own attributes (QMoE's bits and block size).
template <class MoreAttrs>
void lower_moe_contrib(Lowering& l, const Node& n, const OnnxNames& in, const std::string& out, const char* op,
                       const MoEAttrs& a, OnnxNames weights, MoreAttrs&& more_attrs) {
  const int64_t hidden = n.inputs[0]->shape.back().value(), experts = n.inputs[1]->shape.back().value();
  const std::string x = l.temp(out + "/tokens"), logits = l.temp(out + "/logits"), flat = l.temp(out + "/flat");
  l.node("Reshape", {in[0], l.ints({-1, hidden})}, {x});
  l.node("Reshape", {in[1], l.ints({-1, experts})}, {logits});
  weights.insert(weights.begin(), {x, logits});
  onnx::NodeProto* moe = l.node(op, weights, {flat}, "com.microsoft");
  attr_int(moe, "k", a.top_k);
  attr_int(moe, "normalize_routing_weights", a.normalize);
  attr_string(moe, "activation_type", "swiglu");
  attr_int(moe, "swiglu_fusion", 1);
  attr_float(moe, "activation_alpha", static_cast<float>(a.alpha));
  attr_float(moe, "activation_beta", static_cast<float>(a.beta));
  if (a.limit > 0) attr_float(moe, "swiglu_limit", static_cast<float>(a.limit));
  more_attrs(moe);
  const std::string shape = l.temp(out + "/shape");
  l.node("Shape", {in[0]}, {shape});
  l.node("Reshape", {flat, shape}, {out});
}

// The contrib ops route by softmax only (no sigmoid, selection bias or scaling).
bool moe_has_contrib_op(const Node& n, OnnxOpProfile profile) {
  return profile_has_contrib_ops(profile) && n.attrs_as<MoEAttrs>().plain_softmax_routing() && !n.input(6);
}
HFX_ONNX_OP_NATIVE(MoE, moe_has_contrib_op) {
  lower_moe_contrib(l, n, in, out, "MoE", n.attrs_as<MoEAttrs>(),
                    {in[2], n.input(4) ? in[4] : "", in[3], n.input(5) ? in[5] : ""}, [](onnx::NodeProto*) {});
}

// QMoE reads the experts' codes and scales as [E, N, K * bits / 8] and [E, N, K / g] views of the
// IR's stacked rows (default zero point 2^(bits - 1), as the IR's codes). Its CPU kernel has no
// float-activation path for 8-bit experts: with float compute those are decomposed.
bool qmoe_computes_as_asked(const Node& n, OnnxOpProfile profile) {
  const QuantizedLinearAttrs& q = n.attrs_as<QuantizedMoEAttrs>().quant;
  return profile_has_contrib_ops(profile) && (q.bits == 4 || q.int8_compute) &&
         n.attrs_as<QuantizedMoEAttrs>().moe.plain_softmax_routing() && !n.input(8);
}
HFX_ONNX_OP_RULE(QuantizedMoE, qmoe_computes_as_asked, 0b111100) {
  const QuantizedMoEAttrs& q = n.attrs_as<QuantizedMoEAttrs>();
  const int64_t experts = n.inputs[1]->shape.back().value();
  auto view = [&](int i) {
    const Value* v = n.inputs[static_cast<size_t>(i)];
    const int64_t rows = v->shape[0].value() / experts;
    const int64_t cols = v->rank() == 3 ? v->shape[1].value() * v->shape[2].value() : v->shape[1].value();
    return l.reshaped_constant(v, {experts, rows, cols});
  };
  lower_moe_contrib(l, n, in, out, "QMoE", q.moe,
                    {view(2), view(3), n.input(6) ? in[6] : "", view(4), view(5), n.input(7) ? in[7] : ""},
                    [&](onnx::NodeProto* moe) {
                      attr_int(moe, "expert_weight_bits", q.quant.bits);
                      attr_int(moe, "block_size", q.quant.group_size);
                      if (q.quant.int8_compute) attr_int(moe, "accuracy_level", 4);
                    });
}

// LayerNormalization-17 with stash_type 1 computes in float32 and casts back once, as torch.
// The ort profile folds the residual Add before it into SkipLayerNormalization.
HFX_ONNX_OP(LayerNorm) {
  const float epsilon = static_cast<float>(n.attrs_as<NormAttrs>().epsilon);
  const Node* add = profile_has_contrib_ops(l.profile()) ? l.fusable_residual(n) : nullptr;
  if (add && l.fused(add)) {
    // Output 3 is the residual sum the skipped Add would have produced.
    onnx::NodeProto* norm = l.node("SkipLayerNormalization",
                                   {l.name_of(add->inputs[0]), l.name_of(add->inputs[1]), in[1], n.input(2) ? in[2] : ""},
                                   {out, "", "", add->outputs[0]->name}, "com.microsoft");
    attr_float(norm, "epsilon", epsilon);
    return;
  }
  OnnxNames ins{in[0], in[1]};
  if (n.input(2)) ins.push_back(in[2]);
  onnx::NodeProto* norm = l.node("LayerNormalization", ins, {out});
  attr_int(norm, "axis", -1);
  attr_float(norm, "epsilon", epsilon);
  attr_int(norm, "stash_type", 1);
}

// cos / sin of the shared angles (one Cast/Unsqueeze/Mul/Concat per positions and frequencies).
HFX_ONNX_OP(RoPETable) {
  const RoPETableAttrs& a = n.attrs_as<RoPETableAttrs>();
  const std::string wave = a.scaling != 1.0 ? l.temp(out) : out;
  l.node(a.sine ? "Sin" : "Cos", {l.rope_angles(n.inputs[0], n.inputs[1])}, {wave});
  if (a.scaling != 1.0) l.node("Mul", {wave, l.float_scalar(static_cast<float>(a.scaling), DType::F32)}, {out});
}

// RotaryEmbedding-23 with per-token tables: cos/sin [B, S, R/2] (the IR's tables repeat the
// frequencies twice, HF-style, so the first half is taken once per table).
// Feeding GroupQueryAttention, it rotates the [B, S, N * D] form instead (3-D, num_heads set).
HFX_ONNX_OP(RoPE) {
  const Value* x = n.inputs[0];
  std::string cos = l.half_table(n.inputs[1]), sin = l.half_table(n.inputs[2]);
  if (n.inputs[1]->dtype != x->dtype) {
    const std::string c = l.temp(cos), s = l.temp(sin);
    attr_int(l.node("Cast", {cos}, {c}), "to", onnx_type(x->dtype));
    attr_int(l.node("Cast", {sin}, {s}), "to", onnx_type(x->dtype));
    cos = c, sin = s;
  }
  const bool bsh = l.rotates_bsh(n);
  const std::string result = bsh ? l.temp(out + "/bsh") : out;
  onnx::NodeProto* rope = l.node("RotaryEmbedding", {bsh ? l.bsh(x) : x->name, cos, sin}, {result});
  attr_int(rope, "interleaved", n.attrs_as<RoPEAttrs>().interleaved);
  const int64_t rot = n.inputs[1]->shape.back().value();
  if (rot != x->shape.back().value()) attr_int(rope, "rotary_embedding_dim", rot);
  if (bsh) {
    attr_int(rope, "num_heads", x->shape[1].value());
    l.set_bsh(n.outputs[0], result);
  }
}

void attention_attrs(onnx::NodeProto* node, const Node& n) {
  const AttentionAttrs& a = n.attrs_as<AttentionAttrs>();
  attr_float(node, "scale", static_cast<float>(a.scale));
  if (a.softcap > 0) attr_float(node, "softcap", static_cast<float>(a.softcap));
}

// An attention that produced its result flat ([B, S, N * D], in `flat`): the IR's [B, N, S, D]
// `out`, unless the plan took the flat result as the block's (nothing to emit) or the reader
// wants [B, S, N, D] (no transposes).
void heads_from_flat(Lowering& l, const Node& n, const std::string& flat, const std::string& out) {
  if (l.flat_result(n)) return;
  const int64_t heads = n.inputs[0]->shape[1].value(), head_dim = n.inputs[2]->shape[3].value();
  if (const Value* back = l.transposed_back(n)) {
    l.node("Reshape", {flat, l.ints({0, 0, heads, head_dim})}, {back->name});
    return;
  }
  const std::string split = l.temp(out + "/bsnd");
  l.node("Reshape", {flat, l.ints({0, 0, heads, head_dim})}, {split});
  attr_ints(l.node("Transpose", {split}, {out}), "perm", {0, 2, 1, 3});
}

// GroupQueryAttention over BSH tensors, appending to the cache itself when the keys and values
// come from KVAppend nodes that feed only this attention (the Lowering decided that up front).
bool lower_group_query_attention(Lowering& l, const Node& n, const std::string& out) {
  if (!l.lowers_to_gqa(n)) return false;  // decided up front (Lowering::plan_gqa_layouts)
  const Value* mask = n.inputs[3];
  const Node* k_append = n.inputs[1]->producer;
  const bool cached = k_append && k_append->op == OpKind::KVAppend && l.fused(k_append);
  const Node* v_append = cached ? n.inputs[2]->producer : nullptr;
  const Value* q = n.inputs[0];
  const Value* k = cached ? k_append->inputs[1] : n.inputs[1];
  const Value* v = cached ? v_append->inputs[1] : n.inputs[2];
  // Every row's cache spans all T slots (left padding included), so seqlens_k = T - 1 for each
  // row and the causal rule matches the IR's; padding and windows arrive as the additive bias.
  auto& [seqlens, total] = l.gqa_lengths(mask);
  if (seqlens.empty()) {
    const std::string shape = l.temp(mask->name + "/shape");
    l.node("Shape", {mask->name}, {shape});
    const std::string t64 = l.temp(mask->name + "/total64"), b64 = l.temp(mask->name + "/batch64");
    l.node("Gather", {shape, l.ints({3}, true)}, {t64});
    l.node("Gather", {shape, l.ints({0}, true)}, {b64});
    total = l.temp(mask->name + "/total");
    attr_int(l.node("Cast", {t64}, {total}), "to", onnx::TensorProto::INT32);
    const std::string last = l.temp(mask->name + "/last"), batch = l.temp(mask->name + "/batch");
    l.node("Sub", {total, l.int32_scalar(1)}, {last});
    l.node("Unsqueeze", {b64, l.ints({0})}, {batch});
    seqlens = l.temp(mask->name + "/seqlens_k");
    l.node("Expand", {last, batch}, {seqlens});
  }
  const int64_t heads = q->shape[1].value(), kv_heads = k->shape[1].value();
  const auto* rotary = l.fused_rotary(n);  // GQA rotates q and k itself: it reads them unrotated
  std::vector<std::string> inputs{l.bsh(rotary ? rotary->first->inputs[0] : q),
                                  l.bsh(rotary ? rotary->second->inputs[0] : k), l.bsh(v)};
  inputs.push_back(cached ? l.name_of(k_append->inputs[0]) : "");
  inputs.push_back(cached ? l.name_of(v_append->inputs[0]) : "");
  std::string cos_cache, sin_cache;
  if (rotary) {
    cos_cache = l.rotary_cache(*rotary->first->inputs[1]->producer, mask, q->dtype);
    sin_cache = l.rotary_cache(*rotary->first->inputs[2]->producer, mask, q->dtype);
  }
  inputs.insert(inputs.end(), {seqlens, total, cos_cache, sin_cache, "", l.additive_mask(mask, q->dtype)});
  if (n.input(4)) inputs.push_back(l.name_of(n.inputs[4]));  // head_sink
  // The block reshaping the result straight back to [B, S, N * D] takes GQA's output as is.
  const Value* flat_out = l.flat_result(n);
  const std::string flat = flat_out ? flat_out->name : l.temp(out + "/bsh");
  std::vector<std::string> outputs{flat};
  if (cached) outputs.insert(outputs.end(), {k_append->outputs[0]->name, v_append->outputs[0]->name});
  onnx::NodeProto* gqa = l.node("GroupQueryAttention", inputs, outputs, "com.microsoft");
  attr_int(gqa, "num_heads", heads);
  attr_int(gqa, "kv_num_heads", kv_heads);
  if (rotary) {
    attr_int(gqa, "do_rotary", 1);
    attr_int(gqa, "rotary_interleaved", rotary->first->attrs_as<RoPEAttrs>().interleaved);
  }
  attention_attrs(gqa, n);
  heads_from_flat(l, n, flat, out);
  return true;
}

// Attention-23 has no sinks; GroupQueryAttention does (head_sink). Attention with sinks is
// decomposed unless it becomes GroupQueryAttention (the plan's conditions: a mask, and a cache
// append or no cache).
bool attention_maps_natively(const Node& n, OnnxOpProfile profile) {
  if (n.input(5)) return false;  // an additive bias: the reference decomposition
  if (!n.input(4)) return true;
  return profile == OnnxOpProfile::OrtGqa && gqa_candidate(n) && gqa_refusal(n).empty();
}
HFX_ONNX_OP_NATIVE(Attention, attention_maps_natively) {
  HFX_CHECK(!n.input(5), "internal error: ", n.name, ": a native attention was given an additive bias");
  if (l.profile() == OnnxOpProfile::OrtGqa && lower_group_query_attention(l, n, out)) return;
  HFX_CHECK(!n.input(4), "attention sinks need GroupQueryAttention (or the decomposition)");
  const bool flat = l.lowers_flat(n);  // the 3-D form: BSH in and out (Lowering::plan_bsh_layouts)
  std::vector<std::string> inputs{in[0], in[1], in[2]};
  if (flat) inputs = {l.bsh(n.inputs[0]), l.bsh(n.inputs[1]), l.bsh(n.inputs[2])};
  if (const Value* mask = n.input(3)) inputs.push_back(l.additive_mask(mask, n.inputs[0]->dtype));
  const Value* flat_out = flat ? l.flat_result(n) : nullptr;
  const std::string result = !flat ? out : flat_out ? flat_out->name : l.temp(out + "/bsh");
  onnx::NodeProto* attention = l.node("Attention", inputs, {result});
  attention_attrs(attention, n);
  if (!flat) return;
  attr_int(attention, "q_num_heads", n.inputs[0]->shape[1].value());
  attr_int(attention, "kv_num_heads", n.inputs[1]->shape[1].value());
  heads_from_flat(l, n, result, out);
}

HFX_ONNX_OP(KVAppend) { attr_int(l.node("Concat", in, {out}), "axis", 2); }

// onnxruntime's com.microsoft LinearAttention (update_rule gated_delta; CPU kernel since 1.32):
// token by token or chunk-parallel, so a call costs linearly in its length, where the reference
// decomposition's one-chunk solve costs more. Its inputs are packed [B, L, H * D], its state
// [B, H, Dk, Dv] as ours; q is scaled already (scale 1), every head is a value head (q and k
// repeated per value head). Contrib ops only: the standard profile decomposes.
bool gated_delta_rule_maps_natively(const Node&, OnnxOpProfile profile) { return profile_has_contrib_ops(profile); }
HFX_ONNX_OP_NATIVE(GatedDeltaRule, gated_delta_rule_maps_natively) {
  const int64_t heads = n.inputs[0]->shape[2].value(), value_dim = n.inputs[2]->shape[3].value();
  const std::string packed_shape = l.ints({0, 0, -1});
  auto packed = [&](size_t i) {
    const std::string t = l.temp(out + "/packed");
    l.node("Reshape", {in[i], packed_shape}, {t});
    return t;
  };
  const std::string flat = l.temp(out + "/flat");
  onnx::NodeProto* rule = l.node("LinearAttention", {packed(0), packed(1), packed(2), in[5], in[3], in[4]},
                                 {flat, l.name_of(n.outputs[1])}, "com.microsoft");
  attr_int(rule, "q_num_heads", heads);
  attr_int(rule, "kv_num_heads", heads);
  attr_string(rule, "update_rule", "gated_delta");
  attr_float(rule, "scale", 1.0f);
  l.node("Reshape", {flat, l.ints({0, 0, heads, value_dim})}, {out});
}

// onnxruntime's com.microsoft CausalConvWithState (CPU kernel since 1.32, float32 there): channels
// first, its state [B, C, K - 1] ours, so only the call's input and output are transposed.
bool causal_conv_maps_natively(const Node& n, OnnxOpProfile profile) {
  return profile_has_contrib_ops(profile) &&
         std::all_of(n.inputs.begin(), n.inputs.end(), [](const Value* v) { return v->dtype == DType::F32; });
}
HFX_ONNX_OP_NATIVE(CausalConv, causal_conv_maps_natively) {
  const std::string channels_first = l.temp(out + "/channels_first"), conv = l.temp(out + "/conv");
  attr_ints(l.node("Transpose", {in[0]}, {channels_first}), "perm", {0, 2, 1});
  onnx::NodeProto* node = l.node("CausalConvWithState", {channels_first, in[1], n.input(3) ? in[3] : "", in[2]},
                                 {conv, l.name_of(n.outputs[1])}, "com.microsoft");
  attr_string(node, "activation", "none");
  attr_int(node, "ndim", 1);
  attr_ints(l.node("Transpose", {conv}, {out}), "perm", {0, 2, 1});
}

// onnxruntime's com.microsoft GatedDeltaNet with update_rule gated (CPU kernel since 1.32): the SSD
// as a linear recurrence, so a call costs linearly in its length. q = c and k = b per group (its
// query and key heads may be fewer than the value heads when they divide them: Mamba2's groups),
// v = dt x, decay = dt a (log), scale 1; its state is V-major [B, H, P, N], ours.
bool state_space_scan_maps_natively(const Node&, OnnxOpProfile profile) { return profile_has_contrib_ops(profile); }
HFX_ONNX_OP_NATIVE(StateSpaceScan, state_space_scan_maps_natively) {
  const std::string dt_last = l.temp(out + "/dt_per_channel"), values = l.temp(out + "/values");
  const std::string decay = l.temp(out + "/decay");
  l.node("Unsqueeze", {in[1], l.ints({3})}, {dt_last});
  l.node("Mul", {in[0], dt_last}, {values});
  l.node("Mul", {in[1], in[2]}, {decay});
  onnx::NodeProto* scan = l.node("GatedDeltaNet", {in[4], in[3], values, "", decay, "", in[5]},
                                 {out, l.name_of(n.outputs[1])}, "com.microsoft");
  attr_string(scan, "update_rule", "gated");
  attr_float(scan, "scale", 1.0f);
}

HFX_ONNX_OP(GELU) {
  const bool tanh = n.attrs_as<GELUAttrs>().approximate == GeluApproximation::Tanh;
  attr_string(l.node("Gelu", in, {out}), "approximate", tanh ? "tanh" : "none");
}

}  // namespace
}  // namespace hfx
