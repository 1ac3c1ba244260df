// Typed attributes of the IR ops: one struct per attribute shape, with its defaults. ops.def names
// the struct each op carries; nodes hold it in OpAttrs and consumers read it with
// Node::attrs_as<T>(), so a name or a default is spelled once.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace hfx {

struct NoAttrs {};
struct AxisAttrs {
  int64_t axis = 0;  // normalised (non-negative) by the builder
};
struct AxesAttrs {
  std::vector<int64_t> axes;  // normalised, sorted (Unsqueeze)
};
struct ReduceAttrs {
  std::vector<int64_t> axes;  // empty: all axes
  bool keepdims = true;
};
struct CastAttrs {
  DType to = DType::F32;
};
struct ShapeAttrs {
  Shape shape;  // the result's shape (Reshape, Expand targets; symbolic dims allowed)
};
struct PermAttrs {
  std::vector<int64_t> perm;
};
struct SliceAttrs {
  int64_t axis = 0, start = 0, end = INT64_MAX;  // static bounds; end INT64_MAX: to the end
};
struct ConcatAttrs {
  int64_t axis = 0;
  std::optional<Dim> axis_dim;  // the result's dim on `axis` when it is symbolic (e.g. past + new = total)
};
struct RangeAttrs {
  Dim length{int64_t{0}};
};
struct QuantizedLinearAttrs {
  int64_t bits = 4, group_size = 32;
  bool int8_compute = false;  // the runtime may quantize activations to int8 (see core/quantize.h)
};
struct TopKAttrs {
  int64_t k = 1;
  bool indices = false;  // the result: the values (false) or their int64 indices
};
// Routing: softmax over the experts' logits (float32), the top_k, renormalised to sum 1 when
// `normalize`. Experts: y = act(g) * (u + beta) with act(g) = g * sigmoid(alpha g), gate g and up u
// clamped at +-limit (g from above only) when limit > 0: SwiGLU, and gpt-oss's clamped form.
struct MoEAttrs {
  int64_t top_k = 2;
  bool normalize = true;
  double alpha = 1.0, beta = 0.0, limit = 0.0;
  // Routing: softmax over the logits, or each expert's sigmoid (LFM2-MoE); the top-k chosen by
  // the scores plus the optional selection-bias input (the weights stay the unbiased scores);
  // renormalised by their sum + normalize_epsilon; times routed_scaling.
  bool sigmoid_routing = false;
  double normalize_epsilon = 0.0, routed_scaling = 1.0;
  // Softmax routing with nothing added: what onnxruntime's and OpenVINO's fused MoE compute.
  bool plain_softmax_routing() const { return !sigmoid_routing && normalize_epsilon == 0.0 && routed_scaling == 1.0; }
};
struct QuantizedMoEAttrs {
  MoEAttrs moe;
  QuantizedLinearAttrs quant;
};
struct NormAttrs {
  double epsilon = 1e-6;
};
struct RoPEAttrs {
  bool interleaved = false;  // rotate pairs (x0, x1) rather than halves
};
struct RoPETableAttrs {
  double scaling = 1.0;  // HF's attention_scaling (yarn, longrope)
  bool sine = false;     // the sin table (else cos)
};
struct AttentionAttrs {
  double scale = 1.0;
  double softcap = 0.0;  // tanh logit softcapping (0: none)
  // The mask hides every later key from a query: a kernel that applies the causal rule itself
  // (onnxruntime's GroupQueryAttention) may take the node. False for bidirectional attention.
  bool causal = true;
};
struct KVAppendAttrs {
  Dim total{int64_t{0}};  // past + fresh, symbolic
};
enum class GeluApproximation { None, Tanh };
struct GELUAttrs {
  GeluApproximation approximate = GeluApproximation::None;
};

// The reference decomposition's triangular solve: a product of `doublings` factors, exact for calls
// of up to 2^doublings tokens (gated_deltanet.cpp sets it from the longest call the graph serves).
struct GatedDeltaRuleAttrs {
  int64_t doublings = 0;
};

// Constant padding: `begin` / `end` elements added on each axis; `shape` is the result's (symbolic
// dims padded are derived dims, made by the builder).
struct PadAttrs {
  std::vector<int64_t> begin, end;
  double value = 0;
  Shape shape;
};
// Convolution over the spatial axes after [batch, channels] (1-D: Whisper's and Mamba's, 2-D:
// vision patches), the same padding at both ends of each; `shape` is the result's.
struct ConvAttrs {
  std::vector<int64_t> strides, pads, dilations;
  int64_t group = 1;
  Shape shape;
};

struct StateAttrs {
  int64_t state = 0;           // index into Graph::states
  DType dtype = DType::F32;    // the result's type: the state as read, or as updated
  Shape shape;
};

using OpAttrs = std::variant<NoAttrs, AxisAttrs, AxesAttrs, ReduceAttrs, CastAttrs, ShapeAttrs, PermAttrs, SliceAttrs,
                             ConcatAttrs, RangeAttrs, QuantizedLinearAttrs, NormAttrs, RoPEAttrs, RoPETableAttrs, AttentionAttrs,
                             KVAppendAttrs, GELUAttrs, StateAttrs, TopKAttrs, MoEAttrs, QuantizedMoEAttrs,
                             PadAttrs, ConvAttrs, GatedDeltaRuleAttrs>;

}  // namespace hfx
