#include "backends/executorch/out_variants.h"

#include <map>

#include "core/error.h"

namespace hfx {
namespace {

struct Row {
  std::string_view functional, kernel;
  std::vector<std::pair<std::string, std::string>> fixed;
};

const std::vector<Row>& rows() {
  static const std::vector<Row> table = {
      {"add.Tensor", "add.out", {}},
      {"sub.Tensor", "sub.out", {}},
      {"mul.Tensor", "mul.out", {}},
      {"div.Tensor", "div.out", {}},
      {"div.Tensor_mode", "div.out_mode", {}},
      {"remainder.Tensor", "remainder.Tensor_out", {}},
      {"pow.Tensor_Tensor", "pow.Tensor_Tensor_out", {}},
      {"maximum.default", "maximum.out", {}},
      {"minimum.default", "minimum.out", {}},
      {"eq.Tensor", "eq.Tensor_out", {}},
      {"lt.Tensor", "lt.Tensor_out", {}},
      {"le.Tensor", "le.Tensor_out", {}},
      {"gt.Tensor", "gt.Tensor_out", {}},
      {"logical_and.default", "logical_and.out", {}},
      {"bitwise_and.Tensor", "bitwise_and.Tensor_out", {}},
      {"bitwise_right_shift.Tensor", "bitwise_right_shift.Tensor_out", {}},
      {"neg.default", "neg.out", {}},
      {"sqrt.default", "sqrt.out", {}},
      {"reciprocal.default", "reciprocal.out", {}},
      {"exp.default", "exp.out", {}},
      {"log.default", "log.out", {}},
      {"tanh.default", "tanh.out", {}},
      {"erf.default", "erf.out", {}},
      {"cos.default", "cos.out", {}},
      {"sin.default", "sin.out", {}},
      {"sigmoid.default", "sigmoid.out", {}},
      {"logical_not.default", "logical_not.out", {}},
      {"gelu.default", "gelu.out", {}},
      {"constant_pad_nd.default", "constant_pad_nd.out", {}},
      {"convolution.default", "convolution.out", {}},
      {"cumsum.default", "cumsum.out", {}},
      {"softmax.int", "_softmax.out", {{"half_to_float", "False"}}},  // the edge dialect's decomposition
      {"mean.dim", "mean.out", {}},
      {"sum.dim_IntList", "sum.IntList_out", {}},
      {"amax.default", "amax.out", {}},
      {"topk.default", "topk.values", {}},
      {"to.dtype", "_to_copy.out", {}},  // the dtype is the out tensor's
      {"expand.default", "expand_copy.out", {}},
      {"permute.default", "permute_copy.out", {}},
      {"slice.Tensor", "slice_copy.Tensor_out", {}},
      {"cat.default", "cat.out", {}},
      {"index.Tensor", "index.Tensor_out", {}},
      {"where.self", "where.self_out", {}},
      {"arange.start_step", "arange.start_out", {}},  // the dtype is the out tensor's
      {"scatter.src", "scatter.src_out", {}},
      {"gather.default", "gather.out", {}},
      {"linear.default", "linear.out", {}},
      {"embedding.default", "embedding.out", {}},
  };
  return table;
}

}  // namespace

const EtOutVariant& et_out_variant(std::string_view functional) {
  static const std::map<std::string, EtOutVariant, std::less<>> variants = [] {
    std::map<std::string, EtOutVariant, std::less<>> out;
    for (const Row& r : rows()) {
      const AtenSchema& kernel = aten_schema(r.kernel);
      for (const auto& [name, value] : r.fixed)
        HFX_CHECK(kernel.arg(name), "internal error: ", r.kernel, " has no argument '", name, "'");
      out[std::string(r.functional)] = {&kernel, r.fixed};
    }
    return out;
  }();
  const auto it = variants.find(functional);
  HFX_CHECK(it != variants.end(), "internal error: executorch: no out variant for aten::", functional);
  return it->second;
}

}  // namespace hfx
