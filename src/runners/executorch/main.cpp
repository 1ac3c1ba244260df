// hfexport-executorch-generate: the decode loop for .pte exports on ExecuTorch's C++ runtime (the
// executorch wheel's libexecutorch.so and kernel libraries, no torch). The static cache is either a
// set of mutable buffers of the `forward` method (planned memory the host zeroes once and the
// method keeps between execute() calls), or, in --no-alloc-graph-io exports, buffers of the host's
// that each call binds as cache input i and as output N + 1 + i, which the method writes in place.
// A dynamic cache is passed as the past and comes back as the present.
// `hfexport generate OUT_DIR ...` hands .pte exports to it.
#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
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

}  // namespace

// What the runtime last logged as an error (see et_pal_emit_log_message below).
std::string& last_runtime_error() {
  static std::string message;
  return message;
}

namespace {

[[noreturn]] void fail_with_runtime_error(const std::string& what, et::Error e) {
  const std::string said = last_runtime_error();
  fail(what, ": ExecuTorch error 0x", std::hex, static_cast<int>(e), said.empty() ? "" : " (" + said + ")");
}

template <typename T>
T take(et::Result<T>&& r, const std::string& what) {
  if (!r.ok()) fail_with_runtime_error(what, r.error());
  return std::move(r.get());
}

void check(et::Error e, const std::string& what) {
  if (e != et::Error::Ok) fail_with_runtime_error(what, e);
}

// The program, mapped: weights are read from the page cache as kernels touch them, never copied.
struct EtProgram {
  explicit EtProgram(const std::string& path)
      : loader(take(MmapDataLoader::from(path.c_str(), MmapDataLoader::MlockConfig::NoMlock), path)),
        program(take(et::Program::load(&loader, et::Program::Verification::InternalConsistency), path)) {}
  MmapDataLoader loader;
  et::Program program;
};

// A loaded method with its planned arenas, zeroed: a mutable buffer's initial state (ExecuTorch
// does not store one).
class EtMethod {
 public:
  EtMethod(et::Program& program, const std::string& name, const std::string& path)
      : meta_(take(program.method_meta(name.c_str()), path + ": " + name)) {
    for (size_t i = 0; i < meta_.num_memory_planned_buffers(); ++i)
      arenas_.emplace_back(take(meta_.memory_planned_buffer_size(i), path), 0);
    for (auto& a : arenas_) spans_.emplace_back(a.data(), a.size());
    planned_ = std::make_unique<et::HierarchicalAllocator>(et::Span<et::Span<uint8_t>>(spans_.data(), spans_.size()));
    memory_ = std::make_unique<et::MemoryManager>(&method_allocator_, planned_.get(), &temp_allocator_);
    method_.emplace(take(program.load_method(name.c_str(), memory_.get()), path + ": " + name));
  }
  et::Method& operator*() { return *method_; }
  et::Method* operator->() { return &*method_; }
  const et::MethodMeta& meta() const { return meta_; }

 private:
  et::MethodMeta meta_;
  MallocMemoryAllocator method_allocator_, temp_allocator_;
  std::vector<std::vector<uint8_t>> arenas_;
  std::vector<et::Span<uint8_t>> spans_;
  std::unique_ptr<et::HierarchicalAllocator> planned_;
  std::unique_ptr<et::MemoryManager> memory_;
  std::optional<et::Method> method_;
};

// The last row's logits of a [batch 1, query, vocab] output.
std::vector<float> last_logits(const executorch::aten::Tensor& logits) {
  const auto vocab = static_cast<size_t>(logits.size(logits.dim() - 1));
  const float* last = logits.const_data_ptr<float>() + (static_cast<size_t>(logits.numel()) - vocab);
  return {last, last + vocab};
}

std::string program_of(const Manifest& manifest, std::string_view component) {
  return manifest.component(component).value(manifest::key::kProgram, "forward");
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
    method_name_ = program_of(manifest, manifest::component::kDecode);
    // forward(tokens, cache_position), as ExecuTorch's LLM runner calls it: no mask, no positions.
    const nlohmann::json& inputs = manifest.component(manifest::component::kDecode).at("inputs");
    cache_position_form_ = inputs.size() == 2 && inputs[1].value("name", "") == "cache_position";
    program_.emplace(path_);
    method_.emplace(program_->program, method_name_, path_);
    if (callers_cache) {
      bind_cache(method_->meta());
    } else {
      // One call at the last slot: attention over the method's cache reads only the filled
      // slots, and XNNPACK re-plans a delegate's memory whenever a call outgrows the largest
      // shapes it has seen (every step of a first request); this sizes it for the whole cache.
      // Any request writes that slot before a query may read it.
      run({0}, {max_cache_len_ - 1});
    }
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

  std::vector<float> extend(const std::vector<int64_t>& ids) override {
    const auto n = static_cast<int64_t>(ids.size());
    if (next_ + n > max_cache_len_) fail("prompt exceeds max_cache_len ", max_cache_len_);
    std::vector<int64_t> positions(ids.size());
    std::iota(positions.begin(), positions.end(), next_);
    next_ += n;
    return run(ids, positions);
  }

 private:
  // One call: the tokens, a [1, 1, query, max_cache_len] mask (slot <= position) and the positions;
  // or the tokens and their cache positions.
  std::vector<float> run(std::vector<int64_t> ids, std::vector<int64_t> positions) {
    const auto query = static_cast<int32_t>(ids.size());
    if (cache_position_form_) {
      auto input_ids = executorch::extension::from_blob(ids.data(), {1, query}, ScalarType::Long);
      auto cache_position = executorch::extension::from_blob(positions.data(), {query}, ScalarType::Long);
      check((*method_)->set_input(et::EValue(*input_ids), 0), path_ + ": input_ids");
      check((*method_)->set_input(et::EValue(*cache_position), 1), path_ + ": cache_position");
      check((*method_)->execute(), path_ + ": " + method_name_);
      return last_logits((*method_)->get_output(0).toTensor());
    }
    mask_.assign(static_cast<size_t>(query * max_cache_len_), 0);
    for (int32_t q = 0; q < query; ++q)
      for (int64_t s = 0; s <= positions[static_cast<size_t>(q)]; ++s) mask_[static_cast<size_t>(q * max_cache_len_ + s)] = 1;
    auto input_ids = executorch::extension::from_blob(ids.data(), {1, query}, ScalarType::Long);
    auto mask = executorch::extension::from_blob(mask_.data(), {1, 1, query, static_cast<int32_t>(max_cache_len_)},
                                                 ScalarType::Bool);
    auto position_ids = executorch::extension::from_blob(positions.data(), {1, query}, ScalarType::Long);
    check((*method_)->set_input(et::EValue(*input_ids), 0), path_ + ": input_ids");
    check((*method_)->set_input(et::EValue(*mask), 1), path_ + ": attention_mask");
    check((*method_)->set_input(et::EValue(*position_ids), 2), path_ + ": position_ids");
    const size_t n = caches_.size();
    for (size_t i = 0; i < n; ++i) {
      check((*method_)->set_input(et::EValue(*caches_[i].tensor), 3 + i), path_ + ": cache input " + std::to_string(i));
      check((*method_)->set_output_data_ptr(caches_[i].bytes.data(), caches_[i].bytes.size(), n + 1 + i),
            path_ + ": cache output " + std::to_string(n + 1 + i));
    }
    if (n) {
      logits_.resize(logits_bytes_ / sizeof(float));
      check((*method_)->set_output_data_ptr(logits_.data(), logits_bytes_, n), path_ + ": logits");
    }
    check((*method_)->execute(), path_ + ": " + method_name_);
    return last_logits((*method_)->get_output(n).toTensor());
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
  bool cache_position_form_ = false;
  std::optional<EtProgram> program_;
  std::optional<EtMethod> method_;
  std::vector<uint8_t> mask_;  // bool
};

// A dynamic cache: `prefill` (or, multi-token, `forward` over an empty past) returns the present
// keys and values; each step passes them back as the past and gets them one row longer.
// Which of the decode method's inputs (by index) are states each call replaces whole, as the
// manifest's states say: a recurrent state is 4-D like a KV cache, so rank cannot tell them apart.
std::vector<bool> replaced_inputs(const Manifest& manifest, size_t count) {
  const nlohmann::json& decode = manifest.component(manifest::component::kDecode);
  std::vector<std::string> replaced;
  for (const nlohmann::json& s : decode.value(manifest::key::kStates, nlohmann::json::array()))
    if (s.value("policy", "") == "replace") replaced.push_back(s.value("input", ""));
  const nlohmann::json& inputs = decode.at(manifest::key::kInputs);
  std::vector<bool> out(count, false);
  for (size_t i = 0; i < count && i < inputs.size(); ++i)
    out[i] = std::find(replaced.begin(), replaced.end(), inputs[i].value("name", "")) != replaced.end();
  return out;
}

class DynamicSession final : public DecodeSession {
 public:
  explicit DynamicSession(const Manifest& manifest) : path_(manifest.file_of(manifest::component::kDecode).string()) {
    program_.emplace(path_);
    decode_.emplace(program_->program, program_of(manifest, manifest::component::kDecode), path_);
    if (manifest.has_component(manifest::component::kPrefill))
      prefill_.emplace(program_->program, program_of(manifest, manifest::component::kPrefill), path_);
    const et::MethodMeta& meta = decode_->meta();
    const std::vector<bool> replaced = replaced_inputs(manifest, meta.num_inputs());
    for (size_t i = 3; i < meta.num_inputs(); ++i) {
      const et::TensorInfo info = take(meta.input_tensor_meta(i), path_ + ": past input");
      const ScalarType type = info.scalar_type();
      const size_t rank = info.sizes().size();
      if ((!replaced[i] && rank != 4) ||
          (type != ScalarType::Float && type != ScalarType::Half && type != ScalarType::BFloat16))
        fail(path_, ": decode input ", i, " is neither a float [batch, heads, past, head_dim] cache nor a float "
             "state each call replaces (convolution, recurrent)");
      Past& p = past_.emplace_back();
      p.sizes.assign(info.sizes().begin(), info.sizes().end());
      p.sizes[0] = 1;
      p.grows = !replaced[i];
      p.type = type;
    }
  }

  std::vector<float> prefill(const std::vector<int64_t>& ids) override {
    for (Past& p : past_) {
      p.data.clear();
      if (!p.grows) p.data.resize(p.bytes());  // a replaced state starts as zeros
    }
    length_ = 0;
    std::vector<int64_t> positions(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) positions[i] = static_cast<int64_t>(i);
    return run(prefill_ ? *prefill_ : *decode_, ids, positions, !prefill_);
  }

  std::vector<float> step(int64_t token) override { return extend({token}); }

  std::vector<float> extend(const std::vector<int64_t>& ids) override {
    std::vector<int64_t> positions(ids.size());
    std::iota(positions.begin(), positions.end(), length_);
    return run(*decode_, ids, positions, true);
  }

 private:
  struct Past {
    // A KV cache's [1, heads, length, head_dim], whose length grows by each call's tokens; or a
    // state each call replaces whole (convolution [1, channels, kernel - 1], recurrent [1, heads, k, v]).
    std::vector<executorch::aten::SizesType> sizes;
    bool grows = true;
    ScalarType type = ScalarType::Float;  // the export's dtype
    std::vector<std::byte> data;
    size_t bytes() const {
      size_t n = type == ScalarType::Float ? 4 : 2;
      for (const auto d : sizes) n *= static_cast<size_t>(d);
      return n;
    }
  };

  // ids, an all-ones mask over the past and the new tokens, their positions (and the past);
  // the presents (outputs 1...) become the past.
  std::vector<float> run(EtMethod& method, std::vector<int64_t> ids, std::vector<int64_t> positions, bool with_past) {
    using executorch::extension::from_blob;
    const auto query = static_cast<int32_t>(ids.size());
    std::vector<int64_t> mask(static_cast<size_t>(length_ + query), 1);
    auto input_ids = from_blob(ids.data(), {1, query}, ScalarType::Long);
    auto attention_mask = from_blob(mask.data(), {1, static_cast<int32_t>(mask.size())}, ScalarType::Long);
    auto position_ids = from_blob(positions.data(), {1, query}, ScalarType::Long);
    check(method->set_input(et::EValue(*input_ids), 0), path_ + ": input_ids");
    check(method->set_input(et::EValue(*attention_mask), 1), path_ + ": attention_mask");
    check(method->set_input(et::EValue(*position_ids), 2), path_ + ": position_ids");
    std::vector<executorch::extension::TensorPtr> past;
    if (with_past)
      for (size_t i = 0; i < past_.size(); ++i) {
        Past& p = past_[i];
        std::vector<executorch::aten::SizesType> sizes = p.sizes;
        if (p.grows) sizes[2] = static_cast<executorch::aten::SizesType>(length_);
        past.push_back(from_blob(p.data.data(), std::move(sizes), p.type));
        check(method->set_input(et::EValue(*past.back()), 3 + i), path_ + ": past input " + std::to_string(i));
      }
    check(method->execute(), path_ + ": execute");
    for (size_t i = 0; i < past_.size(); ++i) {
      const executorch::aten::Tensor present = method->get_output(1 + i).toTensor();
      const auto* data = static_cast<const std::byte*>(present.const_data_ptr());
      past_[i].data.assign(data, data + present.nbytes());
    }
    length_ += query;
    return last_logits(method->get_output(0).toTensor());
  }

  std::string path_;
  int64_t length_ = 0;
  std::optional<EtProgram> program_;
  std::optional<EtMethod> decode_, prefill_;
  std::vector<Past> past_;
};

}  // namespace
}  // namespace hfx

// ExecuTorch's platform log sink (a weak symbol of the runtime, replaced here): Info and Debug
// lines (cpuinfo probing on every start) are dropped; an error's words are kept for the one-line
// message of the call that failed; a fatal one is printed, as the runtime aborts after it.
extern "C" void et_pal_emit_log_message(et_timestamp_t, et_pal_log_level_t level, const char*, const char*, size_t,
                                        const char* message, size_t length) {
  if (level == et_pal_log_level_t::kError) hfx::last_runtime_error().assign(message, length);
  if (level == et_pal_log_level_t::kFatal) std::fprintf(stderr, "executorch: %.*s\n", static_cast<int>(length), message);
}

int main(int argc, char** argv) {
  executorch::runtime::runtime_init();
  return hfx::runner_main(argc, argv, "executorch", [](const hfx::Manifest& manifest, const hfx::GenerateOptions& o)
                                                        -> std::unique_ptr<hfx::DecodeSession> {
    if (manifest.cache() == hfx::manifest::cache::kDynamic) {
      hfx::check_sequence_bound(manifest, o);
      return std::make_unique<hfx::DynamicSession>(manifest);
    }
    const int64_t max_cache_len = manifest.generation().value(hfx::manifest::key::kMaxCacheLen, int64_t{0});
    const auto length = static_cast<int64_t>(o.input_ids.size());
    if (length + o.max_new_tokens - 1 > max_cache_len)
      hfx::fail("prompt of ", length, " tokens + ", o.max_new_tokens, " new tokens exceeds max_cache_len ", max_cache_len);
    return std::make_unique<hfx::ExecutorchSession>(manifest);
  });
}
