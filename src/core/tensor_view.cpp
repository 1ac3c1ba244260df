#include "core/tensor_view.h"

#include "core/error.h"

namespace hfx {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void MemoryTensorSource::add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data,
                             size_t nbytes) {
  auto t = std::make_unique<TensorView>();
  t->name = name;
  t->dtype = dtype;
  t->shape = std::move(shape);
  t->data = static_cast<const std::byte*>(data);
  t->nbytes = nbytes;
  for (int64_t d : t->shape)
    if (d < 0) fail(where_, ": tensor '", name, "' has a negative dim");
  if (static_cast<size_t>(t->numel()) * dtype_size(dtype) != nbytes)
    fail(where_, ": tensor '", name, "' holds ", nbytes, " bytes, its dtype and shape need ",
         static_cast<size_t>(t->numel()) * dtype_size(dtype));
  if (!tensors_.emplace(name, std::move(t)).second) fail(where_, ": tensor '", name, "' given twice");
}

const TensorView* MemoryTensorSource::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second.get();
}

std::vector<const TensorView*> MemoryTensorSource::tensors() const {
  std::vector<const TensorView*> out;
  for (const auto& [name, t] : tensors_) out.push_back(t.get());
  return out;
}

}  // namespace hfx
