#include "ir/builder.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace hfx {

int64_t normalize_axis(int64_t axis, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  const int64_t a = axis < 0 ? axis + r : axis;
  HFX_CHECK(a >= 0 && a < r, "axis ", axis, " for rank ", rank);
  return a;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank, Dim(1));
  for (size_t i = 0; i < rank; ++i) {
    const Dim da = i < rank - a.size() ? Dim(1) : a[i - (rank - a.size())];
    const Dim db = i < rank - b.size() ? Dim(1) : b[i - (rank - b.size())];
    if (da == db || (db.is_static() && db.value() == 1)) {
      out[i] = da;
    } else if (da.is_static() && da.value() == 1) {
      out[i] = db;
    } else {
      fail("internal error: cannot broadcast ", shape_string(a), " with ", shape_string(b));
    }
  }
  return out;
}

std::vector<int64_t> reshape_target(const Shape& in, const Shape& out) {
  std::vector<int64_t> target;
  bool inferred = false;
  for (size_t i = 0; i < out.size(); ++i) {
    const Dim& d = out[i];
    if (d.is_static()) {
      target.push_back(d.value());
    } else if (i < in.size() && in[i] == d) {
      target.push_back(0);
    } else {
      HFX_CHECK(!inferred, "reshape to ", shape_string(out), " has two inferred dims");
      inferred = true;
      target.push_back(-1);
    }
  }
  return target;
}

std::vector<Value*> Builder::emit_all(OpKind op, std::vector<Value*> inputs, OpAttrs attrs) {
  std::vector<ValueType> types;
  try {
    types = infer_types(op, inputs, attrs);
  } catch (const Error& e) {
    fail(e.what(), " at ", scope_.empty() ? "<graph>" : scope_);
  }
  Node* n = g_.new_node(op, std::move(inputs), std::move(attrs), scope_);
  for (ValueType& t : types) {
    Value* out = g_.new_value(t.dtype, std::move(t.shape));
    out->name = (scope_.empty() ? "" : scope_ + "/") + std::string(op_name(op)) + "_" + std::to_string(out->id);
    out->producer = n;
    n->outputs.push_back(out);
  }
  const std::string suffix = std::string(op_name(op)) + "_" + std::to_string(n->outputs.front()->id);
  n->name = n->name.empty() ? n->outputs.front()->name : n->name + "/" + suffix;
  sink_->push_back(n);
  return n->outputs;
}

Value* Builder::emit(OpKind op, std::vector<Value*> inputs, OpAttrs attrs) {
  return emit_all(op, std::move(inputs), std::move(attrs)).front();
}

Value* Builder::input(const std::string& name, DType dtype, Shape shape) {
  Value* v = g_.new_value(dtype, std::move(shape), name);
  g_.inputs.push_back(v);
  return v;
}

void Builder::output(Value* v, const std::string& name) {
  v->name = name;
  g_.outputs.push_back(v);
}

Value* Builder::weight(const TensorView& tensor, DType dtype, std::shared_ptr<const void> owner) {
  Value* v = g_.new_value(dtype, Shape(tensor.shape.begin(), tensor.shape.end()), tensor.name);
  v->constant = ConstantData::of_tensor(tensor, std::move(owner));
  return v;
}

Value* Builder::weight_expr(std::shared_ptr<const ConstantData> expr, DType dtype, const std::string& name) {
  Value* v = g_.new_value(dtype, Shape(expr->src_shape.begin(), expr->src_shape.end()), name);
  v->constant = std::move(expr);
  return v;
}

Value* Builder::missing_weight(const std::string& name, const std::vector<int64_t>& shape, DType dtype) {
  Value* v = g_.new_value(dtype, Shape(shape.begin(), shape.end()), name);
  v->constant = ConstantData::of_bytes({}, dtype, shape);  // no bytes: verify() would refuse it
  return v;
}

Value* Builder::constant(std::vector<std::byte> bytes, DType dtype, std::vector<int64_t> shape,
                         const std::string& hint) {
  Value* v = g_.new_value(dtype, Shape(shape.begin(), shape.end()));
  v->name = (scope_.empty() ? "" : scope_ + "/") + hint + "_" + std::to_string(v->id);
  v->constant = ConstantData::of_bytes(std::move(bytes), dtype, std::move(shape));
  return v;
}

Value* Builder::const_i64(const std::vector<int64_t>& data, std::vector<int64_t> shape) {
  std::vector<std::byte> bytes(data.size() * 8);
  std::memcpy(bytes.data(), data.data(), bytes.size());
  return constant(std::move(bytes), DType::I64, std::move(shape), "const");
}

Value* Builder::const_f32(const std::vector<float>& data, std::vector<int64_t> shape) {
  std::vector<std::byte> bytes(data.size() * 4);
  std::memcpy(bytes.data(), data.data(), bytes.size());
  return constant(std::move(bytes), DType::F32, std::move(shape), "const");
}

Value* Builder::scalar(double v, DType dtype) {
  if (dtype == DType::I64) return const_i64({static_cast<int64_t>(v)});
  std::vector<std::byte> bytes(dtype_size(dtype));
  const float f = static_cast<float>(v);
  convert_floats(&f, DType::F32, bytes.data(), dtype, 1);
  return constant(std::move(bytes), dtype, {}, "scalar");
}

Value* Builder::u8_scalar(uint8_t v) { return constant({static_cast<std::byte>(v)}, DType::U8, {}, "u8"); }

Value* Builder::binary(OpKind op, Value* a, Value* b) { return emit(op, {a, b}); }
Value* Builder::compare(OpKind op, Value* a, Value* b) { return emit(op, {a, b}); }
Value* Builder::logical_and(Value* a, Value* b) { return emit(OpKind::And, {a, b}); }
Value* Builder::logical_not(Value* x) { return emit(OpKind::Not, {x}); }
Value* Builder::logical_or(Value* a, Value* b) { return logical_not(logical_and(logical_not(a), logical_not(b))); }
Value* Builder::unary(OpKind op, Value* x) { return emit(op, {x}); }
Value* Builder::matmul(Value* a, Value* b) { return emit(OpKind::MatMul, {a, b}); }

Value* Builder::softmax(Value* x, int64_t axis) {
  return emit(OpKind::Softmax, {x}, AxisAttrs{normalize_axis(axis, x->rank())});
}

Value* Builder::cumsum(Value* x, int64_t axis) {
  return emit(OpKind::CumSum, {x}, AxisAttrs{normalize_axis(axis, x->rank())});
}

Value* Builder::pad(Value* x, std::vector<int64_t> begin, std::vector<int64_t> end, double value) {
  Shape shape;
  for (size_t i = 0; i < x->rank(); ++i) shape.push_back(g_.dim(dim_plus(x->shape[i], begin.at(i) + end.at(i))));
  return emit(OpKind::Pad, {x}, PadAttrs{std::move(begin), std::move(end), value, std::move(shape)});
}

Value* Builder::conv(Value* x, Value* weight, Value* bias, std::vector<int64_t> strides, std::vector<int64_t> pads,
                     std::vector<int64_t> dilations, int64_t group) {
  Shape shape{x->shape.at(0), weight->shape.at(0)};
  for (size_t i = 0; i + 2 < x->rank(); ++i) {
    const int64_t kernel = weight->shape.at(i + 2).value();
    const int64_t shift = 2 * pads.at(i) - dilations.at(i) * (kernel - 1) - 1;
    if (strides.at(i) == 1) {
      shape.push_back(g_.dim(dim_plus(x->shape[i + 2], shift + 1)));
      continue;
    }
    const Dim padded = g_.dim(dim_plus(x->shape[i + 2], shift));
    shape.push_back(g_.dim(dim_plus(g_.dim(dim_floordiv(padded, strides[i])), 1)));
  }
  std::vector<Value*> inputs{x, weight};
  if (bias) inputs.push_back(bias);
  return emit(OpKind::Conv, std::move(inputs),
              ConvAttrs{std::move(strides), std::move(pads), std::move(dilations), group, std::move(shape)});
}

Value* Builder::reduce(OpKind op, Value* x, std::vector<int64_t> axes, bool keepdims) {
  for (auto& a : axes) a = normalize_axis(a, x->rank());
  return emit(op, {x}, ReduceAttrs{std::move(axes), keepdims});
}

Value* Builder::cast(Value* x, DType dtype) {
  if (x->dtype == dtype) return x;
  return emit(OpKind::Cast, {x}, CastAttrs{dtype});
}

Value* Builder::reshape(Value* x, Shape shape) { return emit(OpKind::Reshape, {x}, ShapeAttrs{std::move(shape)}); }

Value* Builder::transpose(Value* x, std::vector<int64_t> perm) {
  return emit(OpKind::Transpose, {x}, PermAttrs{std::move(perm)});
}

Value* Builder::slice(Value* x, int64_t axis, int64_t start, int64_t end) {
  return emit(OpKind::Slice, {x}, SliceAttrs{normalize_axis(axis, x->rank()), start, end});
}

Value* Builder::concat(const std::vector<Value*>& xs, int64_t axis, std::optional<Dim> axis_dim) {
  HFX_CHECK(!xs.empty(), "empty concat at ", scope_);
  return emit(OpKind::Concat, xs, ConcatAttrs{normalize_axis(axis, xs[0]->rank()), axis_dim});
}

Value* Builder::gather(Value* data, Value* indices, int64_t axis) {
  return emit(OpKind::Gather, {data, indices}, AxisAttrs{normalize_axis(axis, data->rank())});
}

Value* Builder::unsqueeze(Value* x, std::vector<int64_t> axes) {
  const size_t rank = x->rank() + axes.size();
  for (auto& a : axes) a = normalize_axis(a, rank);
  std::sort(axes.begin(), axes.end());
  return emit(OpKind::Unsqueeze, {x}, AxesAttrs{std::move(axes)});
}

Value* Builder::where(Value* cond, Value* a, Value* b) { return emit(OpKind::Where, {cond, a, b}); }

Value* Builder::range(Value* start, Value* limit, Value* delta, Dim length) {
  return emit(OpKind::Range, {start, limit, delta}, RangeAttrs{length});
}

Value* Builder::shape_of(Value* x) { return emit(OpKind::ShapeOf, {x}); }

Value* Builder::expand(Value* x, Value* shape_tensor, Shape shape) {
  return emit(OpKind::Expand, {x, shape_tensor}, ShapeAttrs{std::move(shape)});
}

Value* Builder::scatter_elements(Value* data, Value* indices, Value* updates, int64_t axis) {
  return emit(OpKind::ScatterElements, {data, indices, updates}, AxisAttrs{normalize_axis(axis, data->rank())});
}

Value* Builder::gather_elements(Value* data, Value* indices, int64_t axis) {
  return emit(OpKind::GatherElements, {data, indices}, AxisAttrs{normalize_axis(axis, data->rank())});
}

Value* Builder::linear(Value* x, Value* weight, Value* bias) {
  std::vector<Value*> ins{x, weight};
  if (bias) ins.push_back(bias);
  return emit(OpKind::Linear, std::move(ins));
}

Value* Builder::embedding(Value* weight, Value* ids) { return emit(OpKind::Embedding, {weight, ids}); }

Value* Builder::rms_norm(Value* x, Value* weight, double epsilon) {
  return emit(OpKind::RMSNorm, {x, weight}, NormAttrs{epsilon});
}

Value* Builder::layer_norm(Value* x, Value* weight, Value* bias, double epsilon) {
  std::vector<Value*> ins{x, weight};
  if (bias) ins.push_back(bias);
  return emit(OpKind::LayerNorm, std::move(ins), NormAttrs{epsilon});
}

Value* Builder::rope(Value* x, Value* cos, Value* sin, bool interleaved) {
  return emit(OpKind::RoPE, {x, cos, sin}, RoPEAttrs{interleaved});
}

Value* Builder::rope_table(Value* positions, Value* inv_freq, double scaling, bool sine) {
  return emit(OpKind::RoPETable, {positions, inv_freq}, RoPETableAttrs{scaling, sine});
}

Value* Builder::attention(Value* q, Value* k, Value* v, Value* mask, const AttentionAttrs& attrs, Value* sinks,
                          Value* bias) {
  if (bias) return emit(OpKind::Attention, {q, k, v, mask, sinks, bias}, attrs);
  if (sinks) return emit(OpKind::Attention, {q, k, v, mask, sinks}, attrs);
  return emit(OpKind::Attention, {q, k, v, mask}, attrs);
}

Value* Builder::kv_append(Value* past, Value* fresh, Dim total) {
  return emit(OpKind::KVAppend, {past, fresh}, KVAppendAttrs{total});
}

int64_t Builder::declare_state(StateDecl decl) {
  for (const StateDecl& s : g_.states) HFX_CHECK(s.name != decl.name, "state '", decl.name, "' declared twice");
  g_.states.push_back(std::move(decl));
  return static_cast<int64_t>(g_.states.size()) - 1;
}

Value* Builder::state_read(int64_t state) {
  const StateDecl& s = g_.states.at(static_cast<size_t>(state));
  return emit(OpKind::StateRead, {}, StateAttrs{state, s.dtype, s.shape});
}

Value* Builder::state_update(int64_t state, Value* current, Value* fresh, Value* positions, Shape shape) {
  const StateDecl& s = g_.states.at(static_cast<size_t>(state));
  std::vector<Value*> inputs{current, fresh};
  if (positions) inputs.push_back(positions);
  return emit(OpKind::StateUpdate, std::move(inputs), StateAttrs{state, s.dtype, std::move(shape)});
}

Value* Builder::silu(Value* x) { return emit(OpKind::SiLU, {x}); }

Value* Builder::gelu(Value* x, GeluApproximation approximate) { return emit(OpKind::GELU, {x}, GELUAttrs{approximate}); }

Value* Builder::groups_to_heads(Value* x, int64_t groups, int64_t heads, int64_t axis) {
  if (groups == heads) return x;
  std::vector<int64_t> index(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) index[static_cast<size_t>(h)] = h / (heads / groups);
  return gather(x, const_i64(index, {heads}), axis);
}

std::pair<Value*, Value*> Builder::causal_conv(Value* x, Value* weight, Value* state, Value* bias) {
  std::vector<Value*> inputs{x, weight, state};
  if (bias) inputs.push_back(bias);
  const std::vector<Value*> out = emit_all(OpKind::CausalConv, std::move(inputs));
  return {out[0], out[1]};
}

std::pair<Value*, Value*> Builder::state_space_scan(Value* x, Value* dt, Value* a, Value* b, Value* c, Value* state) {
  const std::vector<Value*> out = emit_all(OpKind::StateSpaceScan, {x, dt, a, b, c, state});
  return {out[0], out[1]};
}

std::pair<Value*, Value*> Builder::gated_delta_rule(Value* q, Value* k, Value* v, Value* decay, Value* beta,
                                                    Value* state, int64_t doublings) {
  const std::vector<Value*> out =
      emit_all(OpKind::GatedDeltaRule, {q, k, v, decay, beta, state}, GatedDeltaRuleAttrs{doublings});
  return {out[0], out[1]};
}

}  // namespace hfx
