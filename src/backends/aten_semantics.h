// Where ATen's argument conventions differ from the IR's (ONNX's), written once for the backends
// that call ATen ops (.pt2, ExecuTorch).
#pragma once
#include <cstdint>
#include <vector>

#include "ir/attrs.h"

namespace hfx {

// constant_pad_nd's `pad` runs from the last axis: (begin, end) of the last, then of the one
// before, ..., down to the first padded axis.
inline std::vector<int64_t> aten_pad_list(const PadAttrs& p) {
  size_t first = 0;
  while (first < p.begin.size() && p.begin[first] == 0 && p.end[first] == 0) ++first;
  std::vector<int64_t> out;
  for (size_t i = p.begin.size(); i-- > first;) {
    out.push_back(p.begin[i]);
    out.push_back(p.end[i]);
  }
  return out;
}

}  // namespace hfx
