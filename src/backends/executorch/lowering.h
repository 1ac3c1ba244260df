// Lowering of IR graphs to ExecuTorch execution plans (one method of a .pte): `.out` kernel calls
// of the runtime's portable/optimized ATen kernels over EValues, symbolic dims as Int EValues the
// prim ops compute (sym_size, executorch_prim::add/sub/mul), and a memory plan of every
// intermediate tensor at its upper-bound size. Each op's lowering is a small function registered in
// ops.cpp (HFX_ET_OP); EtLowering holds what they share.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "backends/aten/dialect.h"
#include "backends/executorch/xnnpack.h"
#include "ir/graph.h"
#include "program_generated.h"

namespace hfx {

namespace etfb = executorch_flatbuffer;

// EValue payloads.
etfb::KernelTypesUnion et_int(int64_t v);
etfb::KernelTypesUnion et_bool(bool v);

// An integer argument: a constant, or an Int EValue a prim op writes at run time; `upper` bounds
// it (tensors are planned at their dims' upper bounds).
struct EtInt {
  std::optional<int64_t> constant;
  int evalue = -1;
  int64_t upper = 0;
  static EtInt of(int64_t v) { return {v, -1, v}; }
};

// What every method of the program shares, each stored once: the constant segment (segment 0;
// data_buffer_idx i is entry i, 0 the runtime's placeholder) and further segments, each a
// delegate's payload or a weight a payload reads by key (Program.named_data).
struct EtConstants {
  struct Entry {
    const Value* value;
    uint64_t offset, bytes;  // within the constant segment
  };
  std::vector<Entry> entries{{nullptr, 0, 0}};
  std::map<std::pair<std::string, DType>, uint32_t> index;  // (ConstantData::key, dtype) -> entry
  uint64_t end = 0;
  uint32_t add(const Value* v, uint64_t bytes);

  struct Segment {
    std::string bytes;            // a payload
    const Value* value = nullptr;  // or a weight
    uint64_t size = 0;
  };
  std::vector<Segment> segments;  // program segment i + 1
  std::vector<std::pair<std::string, uint32_t>> named;  // key -> program segment
  std::map<std::pair<std::string, DType>, std::string> named_key;
  std::deque<Value> converted;  // weights stored in another dtype than the graph's (bf16 scales)
  uint32_t add_payload(std::string bytes);
  // The named-data key of a weight (stored once, in a segment of its own).
  const std::string& add_named(const Value* v, uint64_t bytes);
  // The key of a constant the export makes up (stored once per content).
  const std::string& add_named_bytes(std::string bytes);
  std::map<std::string, std::string> made_key;  // content -> key
  std::set<std::string> named_names;
};

// A dynamically quantized linear's weights as XNNPACK reads them (see quantized_weights).
struct XnnQuantizedWeights {
  XnnWeight codes, scales;
  std::optional<XnnWeight> bias;
  int bits = 4;
  int64_t group_size = 0;
};

class EtLowering;
using EtRule = void (*)(EtLowering& l, const Node& n);
using EtNative = bool (*)(const Node& n);
struct EtOpRule {
  EtRule lower = nullptr;
  EtNative native = nullptr;
};
// The op's rule: its own, else the ATen table's (backends/aten) for a primitive.
const EtOpRule& et_rule(OpKind op);
bool register_et_rule(OpKind op, EtRule lower, EtNative native = nullptr);
// Lowers n as the ATen table's call (what a high-level op registers to keep it).
void et_lower_aten(EtLowering& l, const Node& n);
// Whether the ExecuTorch backend lowers this high-level node itself (else it is decomposed first).
bool et_maps_natively(const Node& n);

#define HFX_ET_OP_NATIVE(Op, native)                                                                  \
  static void et_lower_##Op(EtLowering& l, const Node& n);                                            \
  [[maybe_unused]] static const bool et_registered_##Op = register_et_rule(OpKind::Op, et_lower_##Op, native); \
  static void et_lower_##Op([[maybe_unused]] EtLowering& l, [[maybe_unused]] const Node& n)
#define HFX_ET_OP(Op) HFX_ET_OP_NATIVE(Op, nullptr)
// A high-level op this backend keeps, lowered by the ATen table.
#define HFX_ET_ATEN_OP(Op) \
  [[maybe_unused]] static const bool et_registered_##Op = register_et_rule(OpKind::Op, et_lower_aten)

class EtLowering {
 public:
  // `bytes_of` is how many bytes the writer stores for a constant (its dtype may be converted).
  // `xnnpack`: float32 linears are delegated to XNNPACK (one XnnpackBackend payload each).
  // `planned_io` false: the method's inputs and outputs get no planned memory (the caller's
  // buffers are used as they are; outputs are bound with Method::set_output_data_ptr).
  // `hfexport_kernels`: attention runs hfexport's own kernel (hfexport::sdpa.out, a library the
  // caller loads: src/runners/executorch/kernels), reading the cache in place.
  EtLowering(const Graph& graph, std::string method, EtConstants& constants, uint64_t (*bytes_of)(const Value&),
             bool xnnpack = false, bool planned_io = true, bool hfexport_kernels = false, bool static_cache = false);
  // Whether this attention node runs hfexport::sdpa.out (float32, no sinks, a [B, 1, S, T] mask).
  bool runs_hfexport_attention(const Node& n) const;

  // A static cache (input.<name> -> ScatterElements at the positions -> output.<name>) is written
  // in place. With planned I/O it is a mutable buffer of the method, kept between execute()
  // calls: neither an input nor an output. Without, it is the caller's: an input, and returned
  // as outputs [cache x N, the graph's outputs, cache x N] (ExecuTorch's zero-copy interface:
  // the caller binds output N + 1 + i onto cache input i).
  bool updates_in_place(const Node& n) const { return in_place_.count(&n) != 0; }
  bool is_buffer(const Value* v) const { return buffers_.count(v) != 0; }
  bool returned(const Value* output) const { return !in_place_outputs_.count(output); }
  // The state inputs updated in place, in input order (the order of the cache outputs).
  const std::vector<const Value*>& cache_inputs() const { return cache_inputs_; }
  // The in-place update of a static cache: the buffer's rows at the (batch 1) positions.
  void update_in_place(const Node& n);
  // A cache whose every reader is XNNPACK attention (mutable buffers only) is read up to its
  // filled slots, 0 .. the last position written this call, not all max_cache_len: the update's
  // result is a copy of those slots (slice_copy with a run-time end), which XNNPACK takes with a
  // dynamic slot count.
  bool reads_filled_slots(const Value* cache) const { return filled_slot_reads_.count(cache) != 0; }
  // additive_mask's [1, 1, groups * S, T] of attention over the filled slots: T those slots.
  int filled_slots_mask(const Value* mask, int64_t groups);
  // Whether a Linear the XNNPACK partition left (float16) runs as a delegate of its own, and its
  // lowering as one. (8da4w / 8da8w linears are the partition's QuantizedLinear rule.)
  bool delegates(const Node& n) const;
  void delegate_linear(const Node& n);
  // 8da4w / 8da8w weights: the codes as they are, the scales as XNNPACK reads them.
  XnnQuantizedWeights quantized_weights(const Node& n);
  // A constant an XNNPACK payload reads from the program's named data: a graph's, or float32
  // values the export makes up. (Not the payload's own constant data, which the runtime frees
  // once the delegate is built, while elementwise nodes still read their constants.)
  XnnWeight named_weight(const Value* v);
  XnnWeight named_floats(const std::vector<float>& data, const std::vector<int64_t>& dims);
  // Consecutive nodes XNNPACK runs (xnnpack_lowering.cpp) as one delegate: what they read from
  // outside are its inputs, what is read after them its outputs.
  void delegate_group(const std::vector<const Node*>& group);
  // Whether v's data is read by a node outside `group` or returned by the method.
  bool read_outside(const Value* v, const std::set<const Node*>& group) const;
  uint32_t add_payload(std::string bytes) { return constants_.add_payload(std::move(bytes)); }
  // The delegate in payload `segment` called on `args` (its inputs, then its outputs).
  void emit_delegate(uint32_t segment, std::vector<int> args);
  // The attention mask [B, 1, S, T] (true: attend) as float32 to add to the scores (0 or the
  // lowest float), repeated for `groups` query heads per kv head: [B, 1, groups * S, T]. Made once
  // per mask and group count, by kernels.
  int additive_mask(const Value* mask, int64_t groups);

  // Lowers every node and plans memory; then take_plan() is the method.
  void lower_graph();
  std::unique_ptr<etfb::ExecutionPlanT> take_plan();

  // What the op rules build with. EValues are indices into the plan's values.
  int in(const Node& n, size_t i) { return tensor(n.inputs.at(i)); }
  int tensor(const Value* v);
  int int_value(int64_t v);
  int int_value(const EtInt& v) { return v.constant ? int_value(*v.constant) : v.evalue; }
  int bool_value(bool v);
  int double_value(double v);
  int string_value(const std::string& v);
  int null_value();
  int int_list(const std::vector<EtInt>& items);
  int int_list(const std::vector<int64_t>& items);
  int tensor_list(const std::vector<int>& tensors);
  int optional_tensor_list(const std::vector<int>& tensors);  // -1: None
  // A new planned tensor of `dtype` whose dims are at most `dims`' upper bounds.
  int new_tensor(DType dtype, const std::vector<EtInt>& dims);
  std::vector<EtInt> bounds(const Shape& shape) const;  // no instructions: upper bounds only
  // Emits `name.overload(args..., outs..., outs...)` (ATen's out-variant convention).
  void kernel(std::string_view name, std::string_view overload, std::vector<int> args, const std::vector<int>& outs);
  // An in-place kernel (`name_`): it writes and returns its first argument.
  void kernel_in_place(std::string_view name, std::string_view overload, std::vector<int> args);
  // `source` seen with other dims of the same element count: a tensor with no memory of its own
  // that executorch_prim::et_view points at the source's data when it runs (no copy). The memory
  // plan keeps the source alive while any view of it is read.
  int view(int source, const std::vector<EtInt>& dims, DType dtype);
  // A kernel whose single result is a new tensor; returns it.
  int call(std::string_view name, std::string_view overload, std::vector<int> args, DType dtype,
           const std::vector<EtInt>& dims);
  // The kernel's result is n's output.
  void result(const Node& n, std::string_view name, std::string_view overload, std::vector<int> args);
  // n's output as the out variant of the ATen table's call for n (backends/aten): every argument
  // of the kernel's schema by position, defaults written out (the runtime reads them so).
  void aten(const Node& n) { aten(n, aten_rule(n.op)(n)); }
  void aten(const Node& n, const AtenCall& call);
  void define(const Value* v, int evalue) { tensors_[v] = evalue; }

  EtInt sym_int(const Dim& d);
  std::vector<EtInt> sym_ints(const Shape& shape);
  int sym_list(const Shape& shape) { return int_list(sym_ints(shape)); }
  // `a op b` (op: add, sub, mul) as a prim op, folded when both are constants.
  EtInt arith(std::string_view op, const EtInt& a, const EtInt& b);
  // Shape arithmetic: the integers of an int64 value computed from shapes (null if a tensor).
  const std::vector<EtInt>* shape_value(const Value* v);

 private:
  int add_value(etfb::KernelTypesUnion val);
  std::vector<int64_t> upper_dims(const Value* v) const;
  void emit_xnnpack(uint32_t segment, const Value* x, const Value* y);
  bool lower_shape_arithmetic(const Node& n);
  int materialize(const Value* v, const std::vector<EtInt>& ints);
  int aten_arg(const AtenArg& a, const Node& n);
  int schema_value(const AtenSchemaArg& arg, const std::string& value);
  int constant_tensor(const Value* v);
  int input_tensor(const Value* v);
  void plan_memory();
  void add_outputs();
  int unplanned(int id);
  void plan_in_place_updates();
  void plan_replaced_state(const StatePair& pair);
  void plan_filled_slot_reads();
  EtInt filled_slots(const Value* positions, int64_t slots);
  std::set<const Node*> needed_nodes() const;
  void note_readers(const std::set<const Node*>& needed);
  int operator_index(std::string_view name, std::string_view overload);

  const Graph& graph_;
  EtConstants& constants_;
  uint64_t (*bytes_of_)(const Value&);
  bool xnnpack_;
  bool planned_io_;
  bool hfexport_kernels_;
  bool static_cache_;  // replaced state lives in the method (else it is passed in and out)
  std::unique_ptr<etfb::ExecutionPlanT> plan_;
  std::vector<std::unique_ptr<etfb::InstructionT>> instructions_;
  std::map<std::pair<std::string, std::string>, int> operators_;
  std::map<const Value*, int> tensors_;
  std::map<const Value*, std::vector<EtInt>> shape_values_;
  std::map<const Symbol*, EtInt> symbol_ints_;
  std::map<int64_t, int> ints_;
  std::map<uint32_t, int> constant_values_;  // data_buffer_idx -> EValue
  std::map<const Node*, const Value*> in_place_;  // update -> the positions it writes at
  std::map<const Value*, int> buffers_;            // state input -> its buffer (-1 until made)
  std::set<const Value*> in_place_outputs_;
  std::vector<const StatePair*> replaced_;  // Replace state: copied into its buffer at the end
  std::vector<const Value*> cache_inputs_;
  std::vector<int> planned_;                 // tensors the memory plan places
  std::set<int> pinned_;                     // buffers: alive across calls, never shared
  std::map<int, uint64_t> planned_bytes_;
  std::map<int, int> view_sources_;          // a view -> the tensor whose memory it uses
  std::map<const Value*, std::vector<const Node*>> readers_;  // the nodes that read a value's data
  std::map<std::pair<const Value*, int64_t>, int> additive_masks_;
  std::set<const Value*> filled_slot_reads_;   // cache updates whose readers see the filled slots
  std::optional<EtInt> filled_slots_;          // the last position written this call + 1
  std::map<std::pair<const Value*, int64_t>, int> filled_masks_;
};

}  // namespace hfx
