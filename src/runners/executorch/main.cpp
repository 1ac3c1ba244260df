// hfexport-executorch-generate: the decode loop for .pte exports on ExecuTorch's C++ runtime (the
// executorch wheel's libexecutorch.so and kernel libraries, no torch). The static cache is either a
// set of mutable buffers of the `forward` method (planned memory the host zeroes once and the
// method keeps between execute() calls), or, in --no-alloc-graph-io exports, buffers of the host's
// that each call binds as cache input i and as output N + 1 + i, which the method writes in place.
// `hfexport generate OUT_DIR ...` hands .pte exports to it.
#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "runners/common/decode_loop.h"

namespace hfx {
namespace {

namespace et = executorch::runtime;
using executorch::aten::ScalarType;
using executorch::extension::MallocMemoryAllocator;
using executorch::extension::MmapDataLoader;

template <typename T>
T take(et::Result<T>&& r, const std::string& what) {
  if (!r.ok()) fail(what, ": ExecuTorch error 0x", std::hex, static_cast<int>(r.error()));
  return std::move(r.get());
}

void check(et::Error e, const std::string& what) {
  if (e != et::Error::Ok) fail(what, ": ExecuTorch error 0x", std::hex, static_cast<int>(e));
}

class ExecutorchSession final : public DecodeSession {
 public:
  explicit ExecutorchSession(const Manifest& manifest)
      : path_(manifest.file_of(manifest::component::kDecode).string()) {
    const nlohmann::json& gen = manifest.generation();
    const bool callers_cache = manifest.cache() == manifest::cache::kStatic && gen.value(manifest::key::kSharesBuffer, false);
    if ((manifest.cache() != manifest::cache::kStateful && !callers_cache) || !gen.contains(manifest::key::kMaxCacheLen))
      fail(path_, ": not an ExecuTorch export with a static cache");
    max_cache_len_ = gen.at(manifest::key::kMaxCacheLen).get<int64_t>();
    method_name_ = manifest.component(manifest::component::kDecode).value(manifest::key::kProgram, "forward");
    et::runtime_init();
    // Weights are read from the page cache as kernels touch them, never copied.
    loader_.emplace(take(MmapDataLoader::from(path_.c_str(), MmapDataLoader::MlockConfig::NoMlock), path_));
    program_.emplace(take(et::Program::load(&*loader_, et::Program::Verification::InternalConsistency), path_));
    const et::MethodMeta meta = take(program_->method_meta(method_name_.c_str()), path_ + ": " + method_name_);
    // Zeroed: the cache's initial state (ExecuTorch does not store one).
    for (size_t i = 0; i < meta.num_memory_planned_buffers(); ++i)
      arenas_.emplace_back(take(meta.memory_planned_buffer_size(i), path_), 0);
    for (auto& a : arenas_) spans_.emplace_back(a.data(), a.size());
    planned_ = std::make_unique<et::HierarchicalAllocator>(et::Span<et::Span<uint8_t>>(spans_.data(), spans_.size()));
    memory_ = std::make_unique<et::MemoryManager>(&method_allocator_, planned_.get(), &temp_allocator_);
    method_.emplace(take(program_->load_method(method_name_.c_str(), memory_.get()), path_ + ": " + method_name_));
    if (callers_cache) bind_cache(meta);
  }

  std::vector<float> prefill(const std::vector<int64_t>& ids) override {
    if (static_cast<int64_t>(ids.size()) > max_cache_len_)
      fail("prompt of ", ids.size(), " tokens exceeds max_cache_len ", max_cache_len_);
    std::vector<int64_t> positions(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) positions[i] = static_cast<int64_t>(i);
    next_ = static_cast<int64_t>(ids.size());
    return run(ids, positions);
  }

  std::vector<float> step(int64_t token) override {
    if (next_ >= max_cache_len_) fail("generation reached the cache length ", max_cache_len_);
    return run({token}, {next_++});
  }

 private:
  // One call: the tokens, a [1, 1, query, max_cache_len] mask (slot <= position) and the positions.
  std::vector<float> run(std::vector<int64_t> ids, std::vector<int64_t> positions) {
    const auto query = static_cast<int32_t>(ids.size());
    mask_.assign(static_cast<size_t>(query * max_cache_len_), 0);
    for (int32_t q = 0; q < query; ++q)
      for (int64_t s = 0; s <= positions[static_cast<size_t>(q)]; ++s) mask_[static_cast<size_t>(q * max_cache_len_ + s)] = 1;
    auto input_ids = executorch::extension::from_blob(ids.data(), {1, query}, ScalarType::Long);
    auto mask = executorch::extension::from_blob(mask_.data(), {1, 1, query, static_cast<int32_t>(max_cache_len_)},
                                                 ScalarType::Bool);
    auto position_ids = executorch::extension::from_blob(positions.data(), {1, query}, ScalarType::Long);
    check(method_->set_input(et::EValue(*input_ids), 0), path_ + ": input_ids");
    check(method_->set_input(et::EValue(*mask), 1), path_ + ": attention_mask");
    check(method_->set_input(et::EValue(*position_ids), 2), path_ + ": position_ids");
    const size_t n = caches_.size();
    for (size_t i = 0; i < n; ++i) {
      check(method_->set_input(et::EValue(*caches_[i].tensor), 3 + i), path_ + ": cache input " + std::to_string(i));
      check(method_->set_output_data_ptr(caches_[i].bytes.data(), caches_[i].bytes.size(), n + 1 + i),
            path_ + ": cache output " + std::to_string(n + 1 + i));
    }
    if (n) {
      logits_.resize(logits_bytes_ / sizeof(float));
      check(method_->set_output_data_ptr(logits_.data(), logits_bytes_, n), path_ + ": logits");
    }
    check(method_->execute(), path_ + ": " + method_name_);
    const executorch::aten::Tensor logits = method_->get_output(n).toTensor();
    const auto vocab = static_cast<size_t>(logits.size(logits.dim() - 1));
    const float* last = logits.const_data_ptr<float>() + (static_cast<size_t>(logits.numel()) - vocab);
    return {last, last + vocab};
  }

  // The caller's cache: a zeroed buffer per cache input (inputs 3...), bound in place each call.
  void bind_cache(const et::MethodMeta& meta) {
    for (size_t i = 3; i < meta.num_inputs(); ++i) {
      const et::TensorInfo info = take(meta.input_tensor_meta(i), path_ + ": cache input");
      Cache& c = caches_.emplace_back();
      c.bytes.assign(info.nbytes(), 0);
      std::vector<executorch::aten::SizesType> sizes(info.sizes().begin(), info.sizes().end());
      c.tensor = executorch::extension::from_blob(c.bytes.data(), std::move(sizes), info.scalar_type());
    }
    logits_bytes_ = take(meta.output_tensor_meta(caches_.size()), path_ + ": logits").nbytes();
  }

  struct Cache {
    std::vector<uint8_t> bytes;
    executorch::extension::TensorPtr tensor;
  };
  std::vector<Cache> caches_;
  std::vector<float> logits_;
  size_t logits_bytes_ = 0;
  std::string path_, method_name_;
  int64_t max_cache_len_ = 0, next_ = 0;
  std::optional<MmapDataLoader> loader_;
  std::optional<et::Program> program_;
  MallocMemoryAllocator method_allocator_, temp_allocator_;
  std::vector<std::vector<uint8_t>> arenas_;
  std::vector<et::Span<uint8_t>> spans_;
  std::unique_ptr<et::HierarchicalAllocator> planned_;
  std::unique_ptr<et::MemoryManager> memory_;
  std::optional<et::Method> method_;
  std::vector<uint8_t> mask_;  // bool
};

}  // namespace
}  // namespace hfx

int main(int argc, char** argv) {
  return hfx::runner_main(argc, argv, "executorch", [](const hfx::Manifest& manifest, const hfx::GenerateOptions& o) {
    const int64_t max_cache_len = manifest.generation().value(hfx::manifest::key::kMaxCacheLen, int64_t{0});
    const auto length = static_cast<int64_t>(o.input_ids.size());
    if (length + o.max_new_tokens - 1 > max_cache_len)
      hfx::fail("prompt of ", length, " tokens + ", o.max_new_tokens, " new tokens exceeds max_cache_len ", max_cache_len);
    return std::make_unique<hfx::ExecutorchSession>(manifest);
  });
}
