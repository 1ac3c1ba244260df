#include "backends/aten/schema.h"

#include <map>

#include "core/error.h"

namespace hfx {
namespace {

// The functional overloads the IR's ops lower to, and the out variants ExecuTorch's kernels are
// (including the *_copy forms of view ops and the decomposed softmax / to), verbatim from
// native_functions.yaml (return types dropped).
constexpr std::string_view kSchemas[] = {
    "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1)",
    "add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out)",
    "sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1)",
    "sub.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out)",
    "mul.Tensor(Tensor self, Tensor other)",
    "mul.out(Tensor self, Tensor other, *, Tensor(a!) out)",
    "div.Tensor(Tensor self, Tensor other)",
    "div.out(Tensor self, Tensor other, *, Tensor(a!) out)",
    "div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode)",
    "div.out_mode(Tensor self, Tensor other, *, str? rounding_mode, Tensor(a!) out)",
    "remainder.Tensor(Tensor self, Tensor other)",
    "remainder.Tensor_out(Tensor self, Tensor other, *, Tensor(a!) out)",
    "pow.Tensor_Tensor(Tensor self, Tensor exponent)",
    "pow.Tensor_Tensor_out(Tensor self, Tensor exponent, *, Tensor(a!) out)",
    "maximum(Tensor self, Tensor other)",
    "maximum.out(Tensor self, Tensor other, *, Tensor(a!) out)",
    "minimum(Tensor self, Tensor other)",
    "minimum.out(Tensor self, Tensor other, *, Tensor(a!) out)",
    "eq.Tensor(Tensor self, Tensor other)",
    "eq.Tensor_out(Tensor self, Tensor other, *, Tensor(a!) out)",
    "lt.Tensor(Tensor self, Tensor other)",
    "lt.Tensor_out(Tensor self, Tensor other, *, Tensor(a!) out)",
    "le.Tensor(Tensor self, Tensor other)",
    "le.Tensor_out(Tensor self, Tensor other, *, Tensor(a!) out)",
    "gt.Tensor(Tensor self, Tensor other)",
    "gt.Tensor_out(Tensor self, Tensor other, *, Tensor(a!) out)",
    "logical_and(Tensor self, Tensor other)",
    "logical_and.out(Tensor self, Tensor other, *, Tensor(a!) out)",
    "bitwise_and.Tensor(Tensor self, Tensor other)",
    "bitwise_and.Tensor_out(Tensor self, Tensor other, *, Tensor(a!) out)",
    "bitwise_right_shift.Tensor(Tensor self, Tensor other)",
    "bitwise_right_shift.Tensor_out(Tensor self, Tensor other, *, Tensor(a!) out)",
    "matmul(Tensor self, Tensor other)",
    "neg(Tensor self)",
    "neg.out(Tensor self, *, Tensor(a!) out)",
    "sqrt(Tensor self)",
    "sqrt.out(Tensor self, *, Tensor(a!) out)",
    "reciprocal(Tensor self)",
    "reciprocal.out(Tensor self, *, Tensor(a!) out)",
    "exp(Tensor self)",
    "exp.out(Tensor self, *, Tensor(a!) out)",
    "log(Tensor self)",
    "log.out(Tensor self, *, Tensor(a!) out)",
    "tanh(Tensor self)",
    "tanh.out(Tensor self, *, Tensor(a!) out)",
    "erf(Tensor self)",
    "erf.out(Tensor self, *, Tensor(a!) out)",
    "cos(Tensor self)",
    "cos.out(Tensor self, *, Tensor(a!) out)",
    "sin(Tensor self)",
    "sin.out(Tensor self, *, Tensor(a!) out)",
    "sigmoid(Tensor self)",
    "sigmoid.out(Tensor self, *, Tensor(a!) out)",
    "logical_not(Tensor self)",
    "logical_not.out(Tensor self, *, Tensor(a!) out)",
    "silu(Tensor self)",
    "softplus(Tensor self, Scalar beta=1, Scalar threshold=20)",
    "gelu(Tensor self, *, str approximate='none')",
    "gelu.out(Tensor self, *, str approximate='none', Tensor(a!) out)",
    "constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0)",
    "constant_pad_nd.out(Tensor self, SymInt[] pad, Scalar value=0, *, Tensor(a!) out)",
    "convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, "
    "bool transposed, SymInt[] output_padding, SymInt groups)",
    "convolution.out(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, "
    "bool transposed, SymInt[] output_padding, SymInt groups, *, Tensor(a!) out)",
    "cumsum(Tensor self, int dim, *, ScalarType? dtype=None)",
    "cumsum.out(Tensor self, int dim, *, ScalarType? dtype=None, Tensor(a!) out)",
    "softmax.int(Tensor self, int dim, ScalarType? dtype=None)",
    "_softmax.out(Tensor self, int dim, bool half_to_float, *, Tensor(a!) out)",
    "mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)",
    "mean.out(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None, Tensor(a!) out)",
    "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)",
    "sum.IntList_out(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None, Tensor(a!) out)",
    "amax(Tensor self, int[1] dim=[], bool keepdim=False)",
    "amax.out(Tensor self, int[1] dim=[], bool keepdim=False, *, Tensor(a!) out)",
    "topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True)",
    "topk.values(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True, *, Tensor(a!) values, "
    "Tensor(b!) indices)",
    "to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None)",
    "_to_copy.out(Tensor self, *, bool non_blocking=False, MemoryFormat? memory_format=None, Tensor(a!) out)",
    "reshape(Tensor(a) self, SymInt[] shape)",
    "expand(Tensor(a) self, SymInt[] size, *, bool implicit=False)",
    "expand_copy.out(Tensor self, SymInt[] size, *, bool implicit=False, Tensor(a!) out)",
    "permute(Tensor(a) self, int[] dims)",
    "permute_copy.out(Tensor self, int[] dims, *, Tensor(a!) out)",
    "slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1)",
    "slice_copy.Tensor_out(Tensor self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1, *, "
    "Tensor(a!) out)",
    "cat(Tensor[] tensors, int dim=0)",
    "cat.out(Tensor[] tensors, int dim=0, *, Tensor(a!) out)",
    "index.Tensor(Tensor self, Tensor?[] indices)",
    "index.Tensor_out(Tensor self, Tensor?[] indices, *, Tensor(a!) out)",
    "where.self(Tensor condition, Tensor self, Tensor other)",
    "where.self_out(Tensor condition, Tensor self, Tensor other, *, Tensor(a!) out)",
    "arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None)",
    "arange.start_out(Scalar start, Scalar end, Scalar step=1, *, Tensor(a!) out)",
    "scatter.src(Tensor self, int dim, Tensor index, Tensor src)",
    "gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False)",
    "gather.out(Tensor self, int dim, Tensor index, *, bool sparse_grad=False, Tensor(a!) out)",
    "scatter.src_out(Tensor self, int dim, Tensor index, Tensor src, *, Tensor(a!) out)",
    "linear(Tensor input, Tensor weight, Tensor? bias=None)",
    "linear.out(Tensor input, Tensor weight, Tensor? bias=None, *, Tensor(a!) out)",
    "embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False)",
    "embedding.out(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, "
    "bool sparse=False, *, Tensor(a!) out)",
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

AtenSchemaArg parse_arg(std::string_view text, bool keyword) {
  AtenSchemaArg arg;
  arg.keyword = keyword;
  if (const size_t eq = text.find('='); eq != std::string_view::npos) {
    arg.default_value = std::string(trim(text.substr(eq + 1)));
    text = trim(text.substr(0, eq));
  }
  const size_t space = text.rfind(' ');
  HFX_CHECK(space != std::string_view::npos, "internal error: ATen schema argument '", text, "' has no name");
  arg.type = std::string(trim(text.substr(0, space)));
  arg.name = std::string(text.substr(space + 1));
  arg.out = arg.type.find('!') != std::string::npos;
  return arg;
}

}  // namespace

bool AtenSchemaArg::tensor_option() const {
  return type == "ScalarType?" || type == "ScalarType" || type == "Layout?" || type == "Device?" ||
         (type == "bool?" && name == "pin_memory");
}

const AtenSchemaArg* AtenSchema::arg(std::string_view name) const {
  for (const AtenSchemaArg& a : args)
    if (a.name == name) return &a;
  return nullptr;
}

bool AtenSchema::is_out_variant() const {
  for (const AtenSchemaArg& a : args)
    if (a.out) return true;
  return false;
}

AtenSchema parse_aten_schema(std::string_view text) {
  const size_t open = text.find('('), close = text.rfind(')');
  HFX_CHECK(open != std::string_view::npos && close > open, "internal error: ATen schema '", text, "' is malformed");
  AtenSchema schema;
  const std::string_view name = text.substr(0, open);
  const size_t dot = name.find('.');
  schema.op = std::string(name.substr(0, dot));
  schema.overload = dot == std::string_view::npos ? "default" : std::string(name.substr(dot + 1));
  bool keyword = false;
  std::string_view rest = text.substr(open + 1, close - open - 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item == "*") keyword = true;
    else schema.args.push_back(parse_arg(item, keyword));
  }
  return schema;
}

namespace {

const std::map<std::string, AtenSchema, std::less<>>& schemas() {
  static const std::map<std::string, AtenSchema, std::less<>> table = [] {
    std::map<std::string, AtenSchema, std::less<>> out;
    for (std::string_view text : kSchemas) {
      AtenSchema s = parse_aten_schema(text);
      const std::string key = s.qualified();
      HFX_CHECK(out.emplace(key, std::move(s)).second, "internal error: ATen schema ", key, " listed twice");
    }
    return out;
  }();
  return table;
}

}  // namespace

const AtenSchema& aten_schema(std::string_view qualified) {
  const auto it = schemas().find(qualified);
  HFX_CHECK(it != schemas().end(), "internal error: no ATen schema for ", qualified);
  return it->second;
}

std::vector<const AtenSchema*> aten_schemas() {
  std::vector<const AtenSchema*> out;
  for (const auto& [name, schema] : schemas()) out.push_back(&schema);
  return out;
}

}  // namespace hfx
