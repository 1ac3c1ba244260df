// Lowering of IR ops to ONNX nodes, per op profile: `standard` (ai.onnx only, opset 23 fused
// RMSNormalization / RotaryEmbedding / Attention), `ort` (adds onnxruntime contrib ops: fused
// norms, MatMulNBits) or `ort-gqa` (ort + GroupQueryAttention owning the dynamic KV cache).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "onnx/onnx.pb.h"

namespace hfx {

enum class OnnxOpProfile { Standard, Ort, OrtGqa };

// Whether the profile may use onnxruntime's com.microsoft ops.
inline bool profile_has_contrib_ops(OnnxOpProfile p) { return p != OnnxOpProfile::Standard; }
// `name` empty: the default (standard). `field` is how the user spelled the option, for errors.
OnnxOpProfile parse_onnx_op_profile(const std::string& name, const std::string& field = "backend.op_profile");
int32_t onnx_type(DType t);
void set_value_info(onnx::ValueInfoProto* info, const std::string& name, DType dtype, const Shape& shape);
// Whether the profile has a fused op for this high-level node (else it is decomposed first).
bool maps_natively(const Node& n, OnnxOpProfile profile);

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
  };
  const std::vector<Init>& initializers() const { return inits_; }
  bool uses_contrib_ops() const { return uses_contrib_; }

 private:
  std::string name_of(const Value* v) { return v->is_constant() ? constant_name(v, false) : v->name; }
  std::string constant_name(const Value* v, bool transposed);
  std::string ints(const std::vector<int64_t>& data, bool scalar = false);
  std::string float_scalar(float value, DType dtype);
  std::string int32_scalar(int32_t value);
  onnx::NodeProto* node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                        const std::string& domain = "");
  std::string temp(const std::string& base) { return base + "/t" + std::to_string(++counter_); }
  void lower_quantized_linear(const Node& n, const std::vector<std::string>& in, const std::string& out);
  void lower_rms_norm(const Node& n, const std::vector<std::string>& in, const std::string& out);
  void lower_rope(const Node& n, const std::vector<std::string>& in, const std::string& out);
  void lower_attention(const Node& n, const std::vector<std::string>& in, const std::string& out);
  // ort profile: GroupQueryAttention over BSH tensors, appending to the cache itself when the
  // keys and values come from KVAppend nodes that feed only this attention (and the outputs).
  bool lower_group_query_attention(const Node& n, const std::string& out);
  // ort profile: a residual Add feeding RMSNorm becomes SkipSimplifiedLayerNormalization.
  const Node* fusable_residual(const Node& norm) const;
  std::string bsh(const Value* x);
  const std::vector<const Node*>& consumers(const Value* v) const;
  // Memoized per source value: the first half of a [B, S, R] cos/sin table, and additive masks.
  std::string half_table(const Value* table);
  std::string additive_mask(const Value* mask, DType dtype);

  onnx::GraphProto& g_;
  OnnxOpProfile profile_;
  std::set<const Value*> transposed_;
  std::map<std::pair<const Value*, bool>, std::string> constant_names_;
  std::map<const Value*, std::string> half_tables_;
  std::map<std::pair<const Value*, DType>, std::string> additive_masks_;
  std::vector<Init> inits_;
  std::map<const Value*, std::vector<const Node*>> consumers_;
  std::set<const Value*> graph_outputs_;
  std::set<const Node*> fused_;  // lowered as part of a later node
  std::map<const Value*, std::pair<std::string, std::string>> gqa_lengths_;  // per mask: seqlens_k, total
  int counter_ = 0;
  bool uses_contrib_ = false;
};

}  // namespace hfx
