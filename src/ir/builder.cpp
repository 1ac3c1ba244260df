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

Value* Builder::emit(OpKind op, std::vector<Value*> inputs, Attrs attrs, DType dtype, Shape shape) {
  Node* n = g_.new_node(op, std::move(inputs), std::move(attrs), scope_);
  Value* out = g_.new_value(dtype, std::move(shape));
  out->name = (scope_.empty() ? "" : scope_ + "/") + std::string(op_name(op)) + "_" + std::to_string(out->id);
  out->producer = n;
  n->outputs.push_back(out);
  if (n->name.empty()) n->name = out->name;
  else n->name += "/" + std::string(op_name(op)) + "_" + std::to_string(out->id);
  sink_->push_back(n);
  return out;
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

Value* Builder::weight(const TensorInfo& tensor, DType dtype) {
  auto c = std::make_shared<ConstantData>();
  c->src_dtype = tensor.dtype;
  c->src_shape = tensor.shape;
  c->parts = {&tensor};
  Shape shape(tensor.shape.begin(), tensor.shape.end());
  Value* v = g_.new_value(dtype, std::move(shape), tensor.name);
  v->constant = std::move(c);
  return v;
}

Value* Builder::missing_weight(const std::string& name, const std::vector<int64_t>& shape, DType dtype) {
  auto c = std::make_shared<ConstantData>();
  c->src_dtype = dtype;
  c->src_shape = shape;
  Value* v = g_.new_value(dtype, Shape(shape.begin(), shape.end()), name);
  v->constant = std::move(c);
  return v;
}

Value* Builder::constant(std::vector<std::byte> bytes, DType dtype, std::vector<int64_t> shape,
                         const std::string& hint) {
  auto c = std::make_shared<ConstantData>();
  c->src_dtype = dtype;
  c->src_shape = shape;
  c->owned = std::move(bytes);
  Value* v = g_.new_value(dtype, Shape(shape.begin(), shape.end()));
  v->name = (scope_.empty() ? "" : scope_ + "/") + hint + "_" + std::to_string(v->id);
  v->constant = std::move(c);
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

Value* Builder::binary(OpKind op, Value* a, Value* b) {
  HFX_CHECK(a->dtype == b->dtype, op_name(op), " dtypes ", dtype_name(a->dtype), " vs ",
            dtype_name(b->dtype), " at ", scope_);
  return emit(op, {a, b}, {}, a->dtype, broadcast_shapes(a->shape, b->shape));
}

Value* Builder::compare(OpKind op, Value* a, Value* b) {
  HFX_CHECK(a->dtype == b->dtype, "compare dtypes at ", scope_);
  return emit(op, {a, b}, {}, DType::Bool, broadcast_shapes(a->shape, b->shape));
}

Value* Builder::logical_and(Value* a, Value* b) {
  HFX_CHECK(a->dtype == DType::Bool && b->dtype == DType::Bool, "And needs bools at ", scope_);
  return emit(OpKind::And, {a, b}, {}, DType::Bool, broadcast_shapes(a->shape, b->shape));
}

Value* Builder::logical_not(Value* x) { return emit(OpKind::Not, {x}, {}, DType::Bool, x->shape); }

Value* Builder::unary(OpKind op, Value* x) { return emit(op, {x}, {}, x->dtype, x->shape); }

Value* Builder::matmul(Value* a, Value* b) {
  HFX_CHECK(a->rank() >= 2 && b->rank() >= 2 && a->dtype == b->dtype, "MatMul operands at ", scope_);
  HFX_CHECK(a->shape.back() == b->shape[b->rank() - 2], "MatMul inner dims ", shape_string(a->shape),
            " x ", shape_string(b->shape), " at ", scope_);
  const Shape batch_a(a->shape.begin(), a->shape.end() - 2);
  const Shape batch_b(b->shape.begin(), b->shape.end() - 2);
  Shape out = broadcast_shapes(batch_a, batch_b);
  out.push_back(a->shape[a->rank() - 2]);
  out.push_back(b->shape.back());
  return emit(OpKind::MatMul, {a, b}, {}, a->dtype, std::move(out));
}

Value* Builder::softmax(Value* x, int64_t axis) {
  return emit(OpKind::Softmax, {x}, {{"axis", normalize_axis(axis, x->rank())}}, x->dtype, x->shape);
}

Value* Builder::reduce(OpKind op, Value* x, std::vector<int64_t> axes, bool keepdims) {
  for (auto& a : axes) a = normalize_axis(a, x->rank());
  Shape out;
  for (size_t i = 0; i < x->rank(); ++i) {
    const bool reduced =
        axes.empty() || std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) != axes.end();
    if (!reduced) out.push_back(x->shape[i]);
    else if (keepdims) out.push_back(Dim(1));
  }
  return emit(op, {x}, {{"axes", axes}, {"keepdims", int64_t{keepdims}}}, x->dtype, std::move(out));
}

Value* Builder::cast(Value* x, DType dtype) {
  if (x->dtype == dtype) return x;
  return emit(OpKind::Cast, {x}, {}, dtype, x->shape);
}

Value* Builder::reshape(Value* x, Shape shape) {
  return emit(OpKind::Reshape, {x}, {}, x->dtype, std::move(shape));
}

Value* Builder::transpose(Value* x, std::vector<int64_t> perm) {
  HFX_CHECK(perm.size() == x->rank(), "Transpose perm rank at ", scope_);
  Shape out;
  for (int64_t p : perm) out.push_back(x->shape[static_cast<size_t>(p)]);
  return emit(OpKind::Transpose, {x}, {{"perm", perm}}, x->dtype, std::move(out));
}

Value* Builder::slice(Value* x, int64_t axis, int64_t start, int64_t end) {
  axis = normalize_axis(axis, x->rank());
  Shape out = x->shape;
  const Dim d = x->shape[static_cast<size_t>(axis)];
  if (d.is_static()) {
    const int64_t s = std::clamp(start < 0 ? start + d.value() : start, int64_t{0}, d.value());
    const int64_t e = std::clamp(end < 0 ? end + d.value() : end, int64_t{0}, d.value());
    out[static_cast<size_t>(axis)] = Dim(std::max<int64_t>(0, e - s));
  } else if (start < 0 && end == INT64_MAX) {  // the last -start entries (the dim must hold them)
    out[static_cast<size_t>(axis)] = Dim(-start);
  } else {
    HFX_CHECK(start == 0 && end == INT64_MAX, "slice of symbolic dim at ", scope_);
  }
  return emit(OpKind::Slice, {x}, {{"axis", axis}, {"start", start}, {"end", end}}, x->dtype,
              std::move(out));
}

Value* Builder::concat(const std::vector<Value*>& xs, int64_t axis, std::optional<Dim> axis_dim) {
  HFX_CHECK(!xs.empty(), "empty concat at ", scope_);
  axis = normalize_axis(axis, xs[0]->rank());
  Shape out = xs[0]->shape;
  const auto a = static_cast<size_t>(axis);
  for (size_t i = 1; i < xs.size(); ++i) {
    HFX_CHECK(xs[i]->rank() == out.size() && xs[i]->dtype == xs[0]->dtype, "concat operands at ", scope_);
    for (size_t j = 0; j < out.size(); ++j)
      if (j != a) HFX_CHECK(xs[i]->shape[j] == out[j], "concat dims at ", scope_);
    if (!axis_dim) {
      HFX_CHECK(out[a].is_static() && xs[i]->shape[a].is_static(), "concat of symbolic axis at ", scope_);
      out[a] = Dim(out[a].value() + xs[i]->shape[a].value());
    }
  }
  if (axis_dim) out[a] = *axis_dim;
  return emit(OpKind::Concat, xs, {{"axis", axis}}, xs[0]->dtype, std::move(out));
}

Value* Builder::gather(Value* data, Value* indices, int64_t axis) {
  axis = normalize_axis(axis, data->rank());
  Shape out(data->shape.begin(), data->shape.begin() + axis);
  out.insert(out.end(), indices->shape.begin(), indices->shape.end());
  out.insert(out.end(), data->shape.begin() + axis + 1, data->shape.end());
  return emit(OpKind::Gather, {data, indices}, {{"axis", axis}}, data->dtype, std::move(out));
}

Value* Builder::unsqueeze(Value* x, std::vector<int64_t> axes) {
  const size_t rank = x->rank() + axes.size();
  for (auto& a : axes) a = normalize_axis(a, rank);
  std::sort(axes.begin(), axes.end());
  Shape out;
  size_t src = 0;
  for (size_t i = 0; i < rank; ++i) {
    if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) != axes.end()) out.push_back(Dim(1));
    else out.push_back(x->shape[src++]);
  }
  return emit(OpKind::Unsqueeze, {x}, {{"axes", axes}}, x->dtype, std::move(out));
}

Value* Builder::where(Value* cond, Value* a, Value* b) {
  HFX_CHECK(cond->dtype == DType::Bool && a->dtype == b->dtype, "Where operands at ", scope_);
  return emit(OpKind::Where, {cond, a, b}, {}, a->dtype,
              broadcast_shapes(cond->shape, broadcast_shapes(a->shape, b->shape)));
}

Value* Builder::range(Value* start, Value* limit, Value* delta, Dim length) {
  return emit(OpKind::Range, {start, limit, delta}, {}, start->dtype, {length});
}

Value* Builder::shape_of(Value* x) {
  return emit(OpKind::ShapeOf, {x}, {}, DType::I64, {Dim(static_cast<int64_t>(x->rank()))});
}

Value* Builder::expand(Value* x, Value* shape_tensor, Shape shape) {
  HFX_CHECK(shape_tensor->dtype == DType::I64 && shape_tensor->rank() == 1, "Expand shape at ", scope_);
  return emit(OpKind::Expand, {x, shape_tensor}, {}, x->dtype, std::move(shape));
}

Value* Builder::scatter_elements(Value* data, Value* indices, Value* updates, int64_t axis) {
  HFX_CHECK(data->rank() == indices->rank() && indices->shape == updates->shape && data->dtype == updates->dtype,
            "ScatterElements operands at ", scope_);
  return emit(OpKind::ScatterElements, {data, indices, updates}, {{"axis", normalize_axis(axis, data->rank())}},
              data->dtype, data->shape);
}

Value* Builder::linear(Value* x, Value* weight, Value* bias) {
  HFX_CHECK(weight->rank() == 2 && x->shape.back() == weight->shape[1], "Linear ", shape_string(x->shape),
            " x ", shape_string(weight->shape), " at ", scope_);
  Shape out = x->shape;
  out.back() = weight->shape[0];
  std::vector<Value*> ins{x, weight};
  if (bias) ins.push_back(bias);
  return emit(OpKind::Linear, std::move(ins), {}, x->dtype, std::move(out));
}

Value* Builder::embedding(Value* weight, Value* ids) {
  Shape out = ids->shape;
  out.push_back(weight->shape[1]);
  return emit(OpKind::Embedding, {weight, ids}, {}, weight->dtype, std::move(out));
}

Value* Builder::rms_norm(Value* x, Value* weight, double epsilon) {
  HFX_CHECK(weight->rank() == 1 && weight->shape[0] == x->shape.back(), "RMSNorm weight at ", scope_);
  return emit(OpKind::RMSNorm, {x, weight}, {{"epsilon", epsilon}}, x->dtype, x->shape);
}

Value* Builder::rope(Value* x, Value* cos, Value* sin, bool interleaved) {
  HFX_CHECK(x->rank() == 4 && cos->rank() == 3, "RoPE ranks at ", scope_);
  return emit(OpKind::RoPE, {x, cos, sin}, {{"interleaved", int64_t{interleaved}}}, x->dtype, x->shape);
}

Value* Builder::attention(Value* q, Value* k, Value* v, Value* mask, double scale, double softcap) {
  HFX_CHECK(q->rank() == 4 && k->rank() == 4 && v->rank() == 4, "Attention ranks at ", scope_);
  HFX_CHECK(q->shape[1].value() % k->shape[1].value() == 0, "Attention heads at ", scope_);
  Shape out = q->shape;
  out[3] = v->shape[3];
  return emit(OpKind::Attention, {q, k, v, mask}, {{"scale", scale}, {"softcap", softcap}}, q->dtype,
              std::move(out));
}

Value* Builder::kv_append(Value* past, Value* fresh, Dim total) {
  HFX_CHECK(past->rank() == 4 && fresh->rank() == 4 && past->dtype == fresh->dtype, "KVAppend at ", scope_);
  Shape out = past->shape;
  out[2] = total;
  return emit(OpKind::KVAppend, {past, fresh}, {}, past->dtype, std::move(out));
}

Value* Builder::silu(Value* x) { return emit(OpKind::SiLU, {x}, {}, x->dtype, x->shape); }

Value* Builder::gelu(Value* x, const std::string& approximate) {
  return emit(OpKind::GELU, {x}, {{"approximate", approximate}}, x->dtype, x->shape);
}

}  // namespace hfx
