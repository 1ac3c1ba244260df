// Lowering of IR ops to ONNX nodes, per op profile: `standard` (ai.onnx only, opset 23 fused
// RMSNormalization / RotaryEmbedding / Attention), `ort` (adds onnxruntime contrib ops: fused
// norms, MatMulNBits) or `ort-gqa` (ort + GroupQueryAttention owning the dynamic KV cache).
// Each op's lowering is a small function registered in ops.cpp (HFX_ONNX_OP); Lowering holds what
// they share: names, constants, and the fusions decided up front from the IR's links.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "ir/graph.h"
#include "onnx/onnx.pb.h"

namespace hfx {

enum class OnnxOpProfile { Standard, Ort, OrtGqa };
inline constexpr OnnxOpProfile kOnnxProfiles[] = {OnnxOpProfile::Standard, OnnxOpProfile::Ort, OnnxOpProfile::OrtGqa};

// Whether the profile may use onnxruntime's com.microsoft ops.
inline bool profile_has_contrib_ops(OnnxOpProfile p) { return p != OnnxOpProfile::Standard; }
// `name` empty: the default (standard). `field` is how the user spelled the option, for errors.
OnnxOpProfile parse_onnx_op_profile(const std::string& name, const std::string& field = "backend.op_profile");
int32_t onnx_type(DType t);
void set_value_info(onnx::ValueInfoProto* info, const std::string& name, DType dtype, const Shape& shape);
// Whether the profile has a fused op for this high-level node (else it is decomposed first).
bool maps_natively(const Node& n, OnnxOpProfile profile);
// Why onnxruntime's CPU GroupQueryAttention cannot run this Attention node ("" when it can): its
// kernel checks these only at run time, so an export that ignored them would fail in the runtime.
// An attention GQA cannot take over a cache refuses it for the whole graph (it owns every cache).
std::string gqa_refusal(const Node& attention);
// Whether ort-gqa would make this Attention a GroupQueryAttention: a causal mask (GQA applies the
// causal rule itself), and keys that a cache append produces (GQA absorbs it) or as long as the
// queries (no cache).
bool gqa_candidate(const Node& attention);

void attr_int(onnx::NodeProto* n, const std::string& name, int64_t v);
void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v);
void attr_string(onnx::NodeProto* n, const std::string& name, const std::string& v);
void attr_float(onnx::NodeProto* n, const std::string& name, float v);

class Lowering;
using OnnxNames = std::vector<std::string>;
// Lowers node `n` whose input names are `in` ("" for absent ones) and whose result is `out`.
using OnnxRule = void (*)(Lowering& l, const Node& n, const OnnxNames& in, const std::string& out);
// For a high-level op: whether the profile maps this node natively (no predicate: always).
using OnnxNative = bool (*)(const Node& n, OnnxOpProfile profile);
struct OnnxOpRule {
  OnnxRule lower = nullptr;
  OnnxNative native = nullptr;
  uint32_t owned_inputs = 0;  // bit i: the rule stores input i in a layout of its own; in[i] is empty
};
// The op's rule (lower == nullptr: the backend has none; a high-level op is then decomposed).
const OnnxOpRule& onnx_rule(OpKind op);
bool register_onnx_rule(OpKind op, OnnxRule lower, OnnxNative native = nullptr, uint32_t owned_inputs = 0);

// HFX_ONNX_OP(Softmax) { l.node(...); }   registers the lowering of OpKind::Softmax.
#define HFX_ONNX_OP_RULE(Op, native, owned_inputs)                                                          \
  static void onnx_lower_##Op(Lowering& l, const Node& n, const OnnxNames& in, const std::string& out);     \
  [[maybe_unused]] static const bool onnx_registered_##Op =                                                 \
      register_onnx_rule(OpKind::Op, onnx_lower_##Op, native, owned_inputs);                                \
  static void onnx_lower_##Op([[maybe_unused]] Lowering& l, [[maybe_unused]] const Node& n,                 \
                              [[maybe_unused]] const OnnxNames& in, [[maybe_unused]] const std::string& out)
#define HFX_ONNX_OP_NATIVE(Op, native) HFX_ONNX_OP_RULE(Op, native, 0)
#define HFX_ONNX_OP(Op) HFX_ONNX_OP_NATIVE(Op, nullptr)

class Lowering {
 public:
  Lowering(onnx::GraphProto& g, const Graph& graph, OnnxOpProfile profile,
           std::set<const Value*> transposed_weights);

  void lower(const Node& n);
  // Constants referenced so far: (value, as transposed, initializer name).
  struct Init {
    const Value* value;
    bool transposed;
    std::string name;
    std::vector<int64_t> dims;  // non-empty: the same bytes under these dims (a reshaped view)
  };
  const std::vector<Init>& initializers() const { return inits_; }
  bool uses_contrib_ops() const { return uses_contrib_; }
  // Every cache append was absorbed into a GroupQueryAttention (and there is at least one).
  bool attention_owns_cache() const { return appends_ > 0 && fused_appends_ == appends_; }
  // Fused kernels the profile prefers that this graph cannot use, and what it got instead.
  const std::vector<KernelFallback>& fallbacks() const { return fallbacks_; }

  // What the op rules build with.
  OnnxOpProfile profile() const { return profile_; }
  onnx::NodeProto* node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                        const std::string& domain = "");
  std::string name_of(const Value* v) { return v->is_constant() ? constant_name(v, false) : v->name; }
  std::string constant_name(const Value* v, bool transposed);
  // The constant's bytes under other dims (same element count), stored once with the original.
  std::string reshaped_constant(const Value* v, std::vector<int64_t> dims);
  bool stored_transposed(const Value* weight) const { return transposed_.count(weight) != 0; }
  std::string ints(const std::vector<int64_t>& data, bool scalar = false);
  std::string float_scalar(float value, DType dtype);
  std::string int32_scalar(int32_t value);
  std::string temp(const std::string& base) { return base + "/t" + std::to_string(++counter_); }
  // positions x inv_freq with the halves repeated, [B, S, R] float32: one per pair, shared by the
  // cos and sin tables.
  std::string rope_angles(const Value* positions, const Value* inv_freq);
  // GroupQueryAttention's cos_cache / sin_cache for `table` (a RoPETable, cos or sin) over the key
  // slots 0..T-1 of `mask` ([T, R/2] of `dtype`): built in the graph each call, for the slots it has.
  std::string rotary_cache(const Node& table, const Value* mask, DType dtype);
  // ort-gqa: the RoPE pair (on q, on k) a GroupQueryAttention applies itself (do_rotary), if any.
  bool rotates_by_slot() const { return !fused_rotaries_.empty(); }
  const std::pair<const Node*, const Node*>* fused_rotary(const Node& attention) const {
    const auto it = fused_rotaries_.find(&attention);
    return it == fused_rotaries_.end() ? nullptr : &it->second;
  }
  // Memoized per source value: the first half of a [B, S, R] cos/sin table, and additive masks.
  std::string half_table(const Value* table);
  std::string additive_mask(const Value* mask, DType dtype);
  // [B, N, S, D] -> [B, S, N * D], the layout GroupQueryAttention takes (one Reshape of the
  // [B, S, N, D] value when x is its head transpose, or the BSH form a RoPE already emitted).
  std::string bsh(const Value* x);
  // ort-gqa layout: a RoPE between a head transpose and GroupQueryAttention rotates the BSH form
  // (its BNSD result is never emitted), and a head transpose whose readers all take BSH is skipped.
  bool rotates_bsh(const Node& rope) const { return bsh_ropes_.count(&rope) != 0; }
  void set_bsh(const Value* v, std::string name) { bsh_names_[v] = std::move(name); }
  // The GroupQueryAttention whose only reader is the head transpose back to [B, S, N, D]: its
  // result is emitted under that transpose's name (the transpose pair cancels).
  const Value* transposed_back(const Node& attention) const;
  bool lowers_to_gqa(const Node& attention) const { return gqa_attentions_.count(&attention) != 0; }
  // Attention-23 in its 3-D form (q, k, v in BSH; q_num_heads / kv_num_heads).
  bool lowers_flat(const Node& attention) const { return flat_attentions_.count(&attention) != 0; }
  bool reads_bsh(const Node& attention) const { return lowers_to_gqa(attention) || lowers_flat(attention); }
  // The value such an attention's flat [B, S, N * D] result is emitted as, when the block
  // reshapes it straight back to that (the transpose and reshape pair is then not emitted).
  const Value* flat_result(const Node& attention) const {
    const auto it = flat_results_.find(&attention);
    return it == flat_results_.end() ? nullptr : it->second;
  }
  // Slices that together tile one value along its last axis (a packed Linear's parts), in tile
  // order, keyed by the first of them in graph order: it emits one Split for all (the rest are fused).
  const std::vector<const Node*>* split_group(const Node& slice) const {
    const auto it = split_groups_.find(&slice);
    return it == split_groups_.end() ? nullptr : &it->second;
  }
  // Whether `n` was absorbed into a later fused op (decided in the constructor).
  bool fused(const Node* n) const { return fused_.count(n) != 0; }
  // ort profile: a residual Add feeding RMSNorm becomes SkipSimplifiedLayerNormalization.
  const Node* fusable_residual(const Node& norm) const;
  // GroupQueryAttention's sequence-length inputs for a mask, built once: (seqlens_k, total).
  std::pair<std::string, std::string>& gqa_lengths(const Value* mask) { return gqa_lengths_[mask]; }

 private:
  const std::vector<const Node*>& consumers(const Value* v) const;
  void plan_bsh_layouts(const Graph& graph, bool gqa);
  void plan_splits(const Graph& graph);
  void plan_fused_rotaries(const Graph& graph);

  onnx::GraphProto& g_;
  OnnxOpProfile profile_;
  std::set<const Value*> transposed_;
  std::map<std::pair<const Value*, bool>, std::string> constant_names_;
  std::map<const Value*, std::string> half_tables_;
  std::map<std::pair<const Value*, DType>, std::string> additive_masks_;
  std::vector<Init> inits_;
  std::map<const Value*, std::vector<const Node*>> consumers_;
  std::set<const Node*> fused_;
  std::map<const Value*, std::pair<std::string, std::string>> gqa_lengths_;
  std::set<const Node*> gqa_attentions_, flat_attentions_, bsh_ropes_;
  std::map<const Value*, std::string> bsh_names_;
  std::map<const Node*, const Value*> flat_results_;
  std::map<const Node*, std::vector<const Node*>> split_groups_;
  std::map<const Node*, std::pair<const Node*, const Node*>> fused_rotaries_;
  std::map<std::pair<const Value*, const Value*>, std::string> rope_angles_, slot_angles_;
  std::map<std::tuple<const Value*, const Value*, double, bool, DType>, std::string> rotary_caches_;
  std::vector<KernelFallback> fallbacks_;
  int counter_ = 0;
  int appends_ = 0, fused_appends_ = 0;
  bool uses_contrib_ = false;
};

}  // namespace hfx
