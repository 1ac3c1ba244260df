// ExecuTorch runs ATen's out variants: the kernel each functional ATen call becomes (as
// ExecuTorch's to_out_variant pass picks it, with the *_copy forms of view ops and the edge
// dialect's decompositions of softmax and to), and the values it passes for arguments the
// functional call lacks.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/aten/schema.h"

namespace hfx {

struct EtOutVariant {
  const AtenSchema* kernel = nullptr;  // "add.out"
  std::vector<std::pair<std::string, std::string>> fixed;  // argument -> value, as a schema default
};

// The out variant of a functional overload ("add.Tensor"); an internal error if unlisted.
const EtOutVariant& et_out_variant(std::string_view functional);

}  // namespace hfx
