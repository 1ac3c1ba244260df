// Lowering of IR ops to OpenVINO opsets. Each op's lowering is a small function registered in
// ops.cpp (HFX_OV_OP); OvLowering holds what they share: ports of values, constants (compressed
// or quantized weights), and the state variables.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "backends/openvino/ir_xml.h"
#include "ir/builder.h"
#include "ir/graph.h"

namespace hfx {

inline const OvNetwork::Attrs kOvNumpy{{"auto_broadcast", "numpy"}};
std::string ov_shape_attr(const Shape& s);
std::string ov_shape_attr(const std::vector<int64_t>& s);

class OvLowering;
// Lowers node `n` whose inputs are at ports `in`; returns the port of its result.
using OvRule = OvPort (*)(OvLowering& l, const Node& n, const std::vector<OvPort>& in);
// For a high-level op: whether this node maps natively (no predicate: always).
using OvNative = bool (*)(const Node& n);
struct OvOpRule {
  OvRule lower = nullptr;
  OvNative native = nullptr;
  uint32_t owned_inputs = 0;  // bit i: the rule fetches input i itself (a layout of its own); in[i] is empty
};
const OvOpRule& ov_rule(OpKind op);
bool register_ov_rule(OpKind op, OvRule lower, OvNative native = nullptr, uint32_t owned_inputs = 0);
// Whether the OpenVINO backend lowers this high-level node itself (else it is decomposed first).
bool ov_maps_natively(const Node& n);

// HFX_OV_OP(Softmax) { return l.result(n, "SoftMax", "opset8", {...}, in); }
#define HFX_OV_OP_RULE(Op, native, owned_inputs)                                                       \
  static OvPort ov_lower_##Op(OvLowering& l, const Node& n, const std::vector<OvPort>& in);            \
  [[maybe_unused]] static const bool ov_registered_##Op =                                              \
      register_ov_rule(OpKind::Op, ov_lower_##Op, native, owned_inputs);                               \
  static OvPort ov_lower_##Op([[maybe_unused]] OvLowering& l, [[maybe_unused]] const Node& n,          \
                              [[maybe_unused]] const std::vector<OvPort>& in)
#define HFX_OV_OP_NATIVE(Op, native) HFX_OV_OP_RULE(Op, native, 0)
#define HFX_OV_OP(Op) HFX_OV_OP_RULE(Op, nullptr, 0)

class OvLowering {
 public:
  // Checkpoint weights are stored as `weight_dtype` (f16/bf16 compression: Const + Convert
  // marked "decompression", the pattern OpenVINO keeps compressed) when it differs from theirs.
  OvLowering(Graph& graph, OvNetwork& net, DType weight_dtype)
      : graph_(graph), b_(graph), net_(net), weight_dtype_(weight_dtype) {}

  void lower_graph();
  // Constants in the order their Const layers were made, for the .bin.
  const std::vector<std::pair<int, const Value*>>& constants() const { return constants_; }
  // True once graph state was lowered to variables (the model then takes beam_idx).
  bool stateful() const { return beam_idx_.layer >= 0; }

  // What the op rules build with.
  OvPort port(const Value* v);
  OvPort i64(const std::vector<int64_t>& data, std::vector<int64_t> shape);
  OvPort i64_vector(const std::vector<int64_t>& data) { return i64(data, {static_cast<int64_t>(data.size())}); }
  OvPort scalar(double v, DType dtype) { return port(b_.scalar(v, dtype)); }
  // A layer named after n's result (+ suffix and a counter for helper layers).
  OvPort op(const std::string& type, const std::string& version, const Node& n, OvNetwork::Attrs data,
            const std::vector<OvPort>& inputs, DType dtype, const Shape& shape, const std::string& suffix = "");
  // A layer with several outputs (types and shapes in order), named after n's result; returns
  // output `which`'s port.
  OvPort op_outputs(const std::string& type, const std::string& version, const Node& n, OvNetwork::Attrs data,
                    const std::vector<OvPort>& inputs, const std::vector<std::pair<DType, Shape>>& outputs, size_t which);
  // The layer that produces n's result.
  OvPort result(const Node& n, const std::string& type, const std::string& version, OvNetwork::Attrs data,
                const std::vector<OvPort>& inputs) {
    return op(type, version, n, std::move(data), inputs, n.outputs[0]->dtype, n.outputs[0]->shape);
  }
  // A constant derived from weight `w` (same dtype, compression as w's), e.g. another layout of it.
  OvPort derived_weight(const Value* w, std::shared_ptr<const ConstantData> data, const std::string& name);
  // A quantized weight's codes as u4/u8 [N, groups, group] or its scales as [N, groups, 1]: the
  // layout the CPU plugin's weight-compression pattern keeps compressed. (port() gives the IR's
  // layout: u8 [N, groups, group * bits / 8] bytes, scales [N, groups].)
  OvPort compressed_weight(const Value* v);
  // Per bool mask, the additive one (0 / lowest) shared by the layers using it.
  OvPort& additive_mask(const Value* mask) { return additive_masks_[mask]; }

 private:
  OvPort constant(const Value* v, const Value* stored, const std::string& element_type, const std::vector<int64_t>& shape,
                  const std::string& precision = "");
  void lower(const Node& n);
  OvPort parameter(const std::string& name, DType dtype, const Shape& shape);
  void lower_state_reads();
  void lower_self_initialised(const StatePair& s);

  Graph& graph_;
  Builder b_;  // makes the small constants (axes, shapes) lowering needs
  OvNetwork& net_;
  std::map<const Value*, OvPort> ports_;
  std::map<const Value*, OvPort> compressed_ports_;
  std::vector<std::pair<int, const Value*>> constants_;
  std::deque<Value> stored_as_;  // compressed views of weights, for the .bin writer
  std::map<const Value*, OvPort> additive_masks_;
  OvPort beam_idx_;
  std::map<const Value*, const StatePair*> initialised_by_;  // a self-initialised state's projection -> its state
  DType weight_dtype_;
  int counter_ = 0;
};

}  // namespace hfx
