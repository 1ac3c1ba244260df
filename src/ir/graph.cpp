#include "ir/graph.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace hfx {

void Node::fail_attrs() const { fail("internal error: ", op_name(op), " node '", name, "' read with another op's attributes"); }

namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

std::shared_ptr<ConstantData> ConstantData::of_tensor(const TensorView& t, std::shared_ptr<const void> owner) {
  auto c = std::make_shared<ConstantData>();
  c->op = Op::Tensor;
  c->src_dtype = t.dtype;
  c->src_shape = t.shape;
  c->tensor = &t;
  c->owner = std::move(owner);
  return c;
}

std::shared_ptr<ConstantData> ConstantData::of_bytes(std::vector<std::byte> bytes, DType dtype, std::vector<int64_t> shape) {
  auto c = std::make_shared<ConstantData>();
  c->op = Op::Owned;
  c->src_dtype = dtype;
  c->src_shape = std::move(shape);
  c->owned = std::move(bytes);
  return c;
}

std::shared_ptr<ConstantData> ConstantData::stack(std::vector<std::shared_ptr<const ConstantData>> parts) {
  HFX_CHECK(!parts.empty(), "stack of no constants");
  auto c = std::make_shared<ConstantData>();
  c->op = Op::Stack;
  c->src_dtype = parts.front()->src_dtype;
  c->src_shape = parts.front()->src_shape;
  c->src_shape.at(0) = 0;
  for (const auto& p : parts) {
    HFX_CHECK(p->src_dtype == c->src_dtype && p->src_shape.size() == c->src_shape.size() &&
                  std::equal(p->src_shape.begin() + 1, p->src_shape.end(), c->src_shape.begin() + 1),
              "stacked constants differ in dtype or trailing dims");
    c->src_shape[0] += p->src_shape[0];
  }
  c->args = std::move(parts);
  return c;
}

std::shared_ptr<ConstantData> ConstantData::slice_rows(std::shared_ptr<const ConstantData> x, int64_t begin,
                                                       int64_t end) {
  HFX_CHECK(!x->src_shape.empty() && 0 <= begin && begin <= end && end <= x->src_shape[0], "row slice [", begin, ", ",
            end, ") of ", shape_string(x->src_shape));
  auto c = std::make_shared<ConstantData>();
  c->op = Op::SliceRows;
  c->src_dtype = x->src_dtype;
  c->src_shape = x->src_shape;
  c->src_shape[0] = end - begin;
  c->begin = begin;
  c->end = end;
  c->args = {std::move(x)};
  return c;
}

std::shared_ptr<ConstantData> ConstantData::transpose(std::shared_ptr<const ConstantData> x) {
  HFX_CHECK(x->src_shape.size() == 2, "transpose of ", shape_string(x->src_shape));
  auto c = std::make_shared<ConstantData>();
  c->op = Op::Transpose;
  c->src_dtype = x->src_dtype;
  c->src_shape = {x->src_shape[1], x->src_shape[0]};
  c->args = {std::move(x)};
  return c;
}

std::shared_ptr<ConstantData> ConstantData::add_scalar(std::shared_ptr<const ConstantData> x, double scalar) {
  HFX_CHECK(is_float(x->src_dtype), "add_scalar on ", dtype_name(x->src_dtype));
  auto c = std::make_shared<ConstantData>();
  c->op = Op::AddScalar;
  c->src_dtype = DType::F32;
  c->src_shape = x->src_shape;
  c->scalar = scalar;
  c->args = {std::move(x)};
  return c;
}

std::shared_ptr<ConstantData> ConstantData::view(std::shared_ptr<const ConstantData> x, std::vector<int64_t> shape) {
  HFX_CHECK(!shape.empty() && numel_of(shape) == numel_of(x->src_shape), "view of ", shape_string(x->src_shape), " as ",
            shape_string(shape));
  auto c = std::make_shared<ConstantData>();
  c->op = Op::View;
  c->src_dtype = x->src_dtype;
  c->src_shape = std::move(shape);
  const size_t in = x->row_elems(), out = c->row_elems();
  HFX_CHECK(in > 0 && out > 0 && (out % in == 0 || in % out == 0), "view regrouping rows of ", shape_string(x->src_shape));
  c->args = {std::move(x)};
  return c;
}

std::shared_ptr<ConstantData> ConstantData::interleave_rows(std::shared_ptr<const ConstantData> a,
                                                            std::shared_ptr<const ConstantData> b) {
  HFX_CHECK(a->src_shape.size() == 2 && a->src_shape == b->src_shape && a->src_dtype == b->src_dtype,
            "interleave of ", shape_string(a->src_shape), " and ", shape_string(b->src_shape));
  auto c = std::make_shared<ConstantData>();
  c->op = Op::InterleaveRows;
  c->src_dtype = a->src_dtype;
  c->src_shape = {2 * a->src_shape[0], a->src_shape[1]};
  c->args = {std::move(a), std::move(b)};
  return c;
}

std::shared_ptr<ConstantData> ConstantData::strided_rows(std::shared_ptr<const ConstantData> x, int64_t offset,
                                                         int64_t stride) {
  HFX_CHECK(!x->src_shape.empty() && stride > 0 && 0 <= offset && offset < stride && x->src_shape[0] % stride == 0,
            "rows ", offset, "::", stride, " of ", shape_string(x->src_shape));
  auto c = std::make_shared<ConstantData>();
  c->op = Op::StridedRows;
  c->src_dtype = x->src_dtype;
  c->src_shape = x->src_shape;
  c->src_shape[0] /= stride;
  c->begin = offset;
  c->end = stride;
  c->args = {std::move(x)};
  return c;
}

std::shared_ptr<ConstantData> ConstantData::mxfp4(std::shared_ptr<const ConstantData> blocks,
                                                  std::shared_ptr<const ConstantData> scales) {
  HFX_CHECK(blocks->src_dtype == DType::U8 && scales->src_dtype == DType::U8 && blocks->src_shape.size() == 2 &&
                scales->src_shape.size() == 2 && blocks->src_shape[0] == scales->src_shape[0] &&
                blocks->src_shape[1] == 16 * scales->src_shape[1],
            "mxfp4 of ", shape_string(blocks->src_shape), " with scales ", shape_string(scales->src_shape));
  auto c = std::make_shared<ConstantData>();
  c->op = Op::Mxfp4;
  c->src_dtype = DType::F32;
  c->src_shape = {blocks->src_shape[0], 32 * scales->src_shape[1]};
  c->args = {std::move(blocks), std::move(scales)};
  return c;
}

std::shared_ptr<ConstantData> ConstantData::quantize(std::shared_ptr<const ConstantData> x, const WeightQuantization& q,
                                                     bool scales) {
  HFX_CHECK(x->src_shape.size() == 2 && is_float(x->src_dtype) && x->src_shape[1] % q.group_size == 0,
            "quantization of ", shape_string(x->src_shape));
  const int64_t n = x->src_shape[0], groups = x->src_shape[1] / q.group_size;
  auto c = std::make_shared<ConstantData>();
  c->op = Op::Quantize;
  c->src_dtype = scales ? DType::F32 : DType::U8;
  c->src_shape = scales ? std::vector<int64_t>{n, groups} : std::vector<int64_t>{n, groups, q.group_bytes()};
  c->quantized = Quantized{q, scales};
  c->args = {std::move(x)};
  return c;
}

bool ConstantData::from_checkpoint() const {
  if (op == Op::Tensor) return true;
  for (const auto& a : args)
    if (a->from_checkpoint()) return true;
  return false;
}

size_t ConstantData::nbytes() const { return static_cast<size_t>(numel_of(src_shape)) * dtype_size(src_dtype); }

size_t ConstantData::row_elems() const {
  return src_shape.empty() ? 1 : static_cast<size_t>(numel_of(std::vector<int64_t>(src_shape.begin() + 1, src_shape.end())));
}

bool ConstantData::consistent() const {
  switch (op) {
    case Op::Tensor: return tensor && tensor->nbytes == nbytes();
    case Op::Owned: return owned.size() == nbytes();
    default:
      for (const auto& a : args)
        if (!a->consistent()) return false;
      return true;
  }
}

const std::byte* ConstantData::bytes() const {
  if (op == Op::Owned) return owned.data();
  HFX_CHECK(op == Op::Tensor, "contiguous bytes of a constant expression");
  return tensor->data;
}

std::string ConstantData::key() const {
  std::string inner;
  for (const auto& a : args) inner += (inner.empty() ? "" : ",") + a->key();
  switch (op) {
    case Op::Tensor: return str("tensor@", static_cast<const void*>(tensor));
    case Op::Owned: return str("owned@", static_cast<const void*>(this));
    case Op::Stack: return "stack(" + inner + ")";
    case Op::SliceRows: return str("rows[", begin, ":", end, "](", inner, ")");
    case Op::Transpose: return "transpose(" + inner + ")";
    case Op::AddScalar: return str("add(", scalar, ")(", inner, ")");
    case Op::View: return "view" + shape_string(src_shape) + "(" + inner + ")";
    case Op::InterleaveRows: return "interleave(" + inner + ")";
    case Op::StridedRows: return str("rows[", begin, "::", end, "](", inner, ")");
    case Op::Mxfp4: return "mxfp4(" + inner + ")";
    case Op::Quantize:
      return str("quantize(", quantized->scheme.bits, ",", quantized->scheme.group_size, quantized->scales ? ",scales" : "",
                 quantized->scheme.positive_bf16_scales ? ",positive-bf16" : "",
                 quantized->scheme.signed_codes ? ",signed" : "", ")(", inner, ")");
  }
  return inner;
}

const Symbol* Graph::symbol(const std::string& name, int64_t min, int64_t max) {
  for (const auto& s : symbols_)
    if (s.name == name) return &s;
  symbols_.push_back(Symbol{name, min, max});
  return &symbols_.back();
}

namespace {

// x + y and x * y, saturating at INT64_MAX (the "no upper bound" of a dim).
int64_t saturating_add(int64_t x, int64_t y) {
  int64_t r = 0;
  return __builtin_add_overflow(x, y, &r) ? (y > 0 ? INT64_MAX : INT64_MIN) : r;
}
int64_t saturating_mul(int64_t x, int64_t y) {
  int64_t r = 0;
  return __builtin_mul_overflow(x, y, &r) ? INT64_MAX : r;
}

}  // namespace

Dim Graph::dim(const DimExpr& e) {
  if (e.dim) return *e.dim;
  for (const Symbol& s : symbols_)
    if (e.is(Dim(&s))) return Dim(&s);
  Symbol s;
  s.op = e.op, s.a = e.a, s.b = e.b, s.k = e.k;
  const Symbol& a = *e.a;
  auto bound = [&](int64_t x, int64_t y) {  // INT64_MAX (unbounded) stays unbounded
    if (x == INT64_MAX || y == INT64_MAX) return INT64_MAX;
    switch (e.op) {
      case Symbol::Op::Add: return saturating_add(x, y);
      case Symbol::Op::Mul: return saturating_mul(x, y);
      default: return x >= 0 ? x / y : -((-x + y - 1) / y);
    }
  };
  const int64_t other_min = e.b ? e.b->min : e.k, other_max = e.b ? e.b->max : e.k;
  s.min = std::max<int64_t>(0, bound(a.min, other_min));
  s.max = bound(a.max, other_max);
  const std::string k = std::to_string(e.k);
  switch (e.op) {
    case Symbol::Op::Add: s.name = a.name + (e.b ? "+" + e.b->name : e.k < 0 ? k : "+" + k); break;
    case Symbol::Op::Mul: s.name = "(" + a.name + ")*" + (e.b ? "(" + e.b->name + ")" : k); break;
    case Symbol::Op::FloorDiv: s.name = "(" + a.name + ")//" + k; break;
    case Symbol::Op::Free: fail("internal error: a free symbol as an expression");
  }
  // A dim negative for every size in the operands' bounds is an input no call can have.
  if (s.max < 0)
    fail("dim ", s.name, " is negative for every ", a.name, " in [", a.min, ", ", a.max, "] (raise its bounds with --dim)");
  symbols_.push_back(std::move(s));
  return Dim(&symbols_.back());
}

Value* Graph::new_value(DType dtype, Shape shape, std::string name) {
  values_.emplace_back();
  Value* v = &values_.back();
  v->id = static_cast<int>(values_.size());
  v->dtype = dtype;
  v->shape = std::move(shape);
  v->name = name.empty() ? "v" + std::to_string(v->id) : std::move(name);
  return v;
}

Node* Graph::new_node(OpKind op, std::vector<Value*> inputs, OpAttrs attrs, std::string name) {
  nodes_.push_back(Node{op, std::move(inputs), {}, std::move(attrs), std::move(name)});
  return &nodes_.back();
}

std::vector<Value*> Graph::constants() const {
  std::vector<Value*> out;
  std::set<const Value*> seen;
  for (const Node* n : order)
    for (Value* v : n->inputs)
      if (v && v->is_constant() && seen.insert(v).second) out.push_back(v);
  return out;
}

void verify(const Graph& graph) {
  std::set<const Value*> defined;
  std::set<std::string> names;  // graph inputs and node outputs share one namespace
  for (const Value* v : graph.inputs) {
    if (!defined.insert(v).second) fail("IR verifier: input '", v->name, "' listed twice");
    if (v->producer) fail("IR verifier: input '", v->name, "' has a producer");
    if (!names.insert(v->name).second) fail("IR verifier: duplicate input name '", v->name, "'");
  }
  for (const Node* n : graph.order) {
    const std::string at = str("IR verifier: ", op_name(n->op), " node '", n->name, "'");
    for (const Value* in : n->inputs) {
      if (!in) continue;
      if (in->is_constant()) {
        const auto& c = *in->constant;
        if (!c.consistent()) {
          const size_t held = c.op == ConstantData::Op::Owned ? c.owned.size()
                              : c.op == ConstantData::Op::Tensor && c.tensor ? c.tensor->nbytes : 0;
          fail(at, ": constant '", in->name, "' holds ", held, " bytes for shape ", shape_string(c.src_shape),
               c.op == ConstantData::Op::Owned || c.op == ConstantData::Op::Tensor ? "" : " (in an operand)");
        }
        continue;
      }
      if (!defined.count(in)) fail(at, ": uses '", in->name, "' before it is defined");
    }
    if (n->outputs.empty()) fail(at, ": has no outputs");
    std::vector<ValueType> types;
    try {
      types = infer_types(n->op, n->inputs, n->attrs);
    } catch (const Error& e) {
      fail(at, ": ", e.what());
    }
    if (types.size() != n->outputs.size())
      fail(at, ": has ", n->outputs.size(), " outputs, the op ", types.size());
    for (size_t i = 0; i < types.size(); ++i) {
      const Value* out = n->outputs[i];
      if (out->dtype != types[i].dtype || !(out->shape == types[i].shape))
        fail(at, ": output '", out->name, "' is ", dtype_name(out->dtype), " ", shape_string(out->shape), ", the op gives ",
             dtype_name(types[i].dtype), " ", shape_string(types[i].shape));
    }
    for (const Value* out : n->outputs) {
      if (out->producer != n) fail(at, ": output '", out->name, "' names another producer");
      if (!defined.insert(out).second) fail(at, ": redefines '", out->name, "'");
      if (!names.insert(out->name).second) fail(at, ": duplicate value name '", out->name, "'");
      for (const Dim& d : out->shape)
        if (d.is_static() && d.value() < 0) fail(at, ": output '", out->name, "' has a negative dim");
    }
  }
  for (const Value* v : graph.outputs)
    if (!defined.count(v) && !v->is_constant())
      fail("IR verifier: output '", v->name, "' is never produced");
}

std::string_view state_kind_name(StateKind kind) {
  switch (kind) {
    case StateKind::KeyValue: return "key_value";
    case StateKind::CrossKeyValue: return "cross_key_value";
    case StateKind::Recurrent: return "recurrent";
    case StateKind::Convolution: return "convolution";
  }
  return "?";
}

std::string_view state_policy_name(StateUpdatePolicy policy) {
  switch (policy) {
    case StateUpdatePolicy::Append: return "append";
    case StateUpdatePolicy::Slots: return "slots";
    case StateUpdatePolicy::Ring: return "ring";
    case StateUpdatePolicy::WriteOnce: return "write_once";
    case StateUpdatePolicy::Replace: return "replace";
  }
  return "?";
}

}  // namespace hfx
