#include <utility>

#include "backends/backend.h"
#include "core/error.h"

namespace hfx {
namespace {

const std::pair<const char*, std::unique_ptr<Backend> (*)()> kBackends[] = {
    {"onnx", make_onnx_backend},
    {"openvino", make_openvino_backend},
};

}  // namespace

std::vector<std::string> supported_formats() {
  std::vector<std::string> out;
  for (const auto& [name, make] : kBackends) out.emplace_back(name);
  return out;
}

std::unique_ptr<Backend> make_backend(const std::string& format) {
  for (const auto& [name, make] : kBackends)
    if (format == name) return make();
  std::string list;
  for (const auto& f : supported_formats()) list += (list.empty() ? "" : ", ") + f;
  fail("--format: '", format, "' is not supported (supported: ", list, ")");
}

}  // namespace hfx
