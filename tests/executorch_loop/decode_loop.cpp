// The documented ExecuTorch decode loop for a zero-copy static cache: the program's `forward`
// takes [input_ids, attention_mask, position_ids, cache x N] and returns [cache x N, logits,
// mutated cache x N]; the host allocates each cache buffer once (zeroed, from method_meta), and
// every call sets all inputs, binds mutated cache output N + 1 + i onto cache buffer i and the
// logits onto a host buffer with set_output_data_ptr, and executes. The whole prompt goes in one
// call, then one token per call, greedy.
//
// Besides the tokens (stdout, one line), it checks after every call that the cache was written in
// place: each cache output's data is the host's buffer, the slots this call wrote changed, the
// slots earlier calls wrote are byte-identical to what they were, and no slot past them was
// touched. Any violation: a message on stderr, exit 1.
//
//   documented_decode_loop model.pte PROMPT_IDS(comma-separated) NEW_TOKENS
#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace et = executorch::runtime;
using executorch::aten::ScalarType;
using executorch::aten::SizesType;
using executorch::extension::FileDataLoader;
using executorch::extension::MallocMemoryAllocator;
using executorch::extension::from_blob;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "documented_decode_loop: %s\n", what.c_str());
  std::exit(1);
}

void ok(et::Error e, const std::string& what) {
  if (e != et::Error::Ok) die(what + ": error 0x" + std::to_string(static_cast<int>(e)));
}

template <typename T>
T ok(et::Result<T>&& r, const std::string& what) {
  if (!r.ok()) die(what + ": error 0x" + std::to_string(static_cast<int>(r.error())));
  return std::move(r.get());
}

// A cache buffer of the host's, [batch, heads, slots, head_dim], and what the check remembers.
struct Cache {
  std::vector<uint8_t> bytes;
  std::vector<SizesType> sizes;
  ScalarType dtype;
  std::vector<uint8_t> before;  // the buffer before the current call
};

// Bytes of slot `s` across every (batch, head): the check compares these ranges.
bool slot_equal(const Cache& c, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int64_t s) {
  const size_t row = c.bytes.size() / static_cast<size_t>(c.sizes[0] * c.sizes[1] * c.sizes[2]);
  for (int64_t bh = 0; bh < c.sizes[0] * c.sizes[1]; ++bh) {
    const size_t at = (static_cast<size_t>(bh * c.sizes[2] + s)) * row;
    if (std::memcmp(a.data() + at, b.data() + at, row) != 0) return false;
  }
  return true;
}

std::vector<int64_t> parse_ids(const char* text) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) ids.push_back(std::stoll(item));
  if (ids.empty()) die("no prompt ids");
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) die("usage: documented_decode_loop model.pte PROMPT_IDS NEW_TOKENS");
  const std::vector<int64_t> prompt = parse_ids(argv[2]);
  const int new_tokens = std::atoi(argv[3]);

  et::runtime_init();
  FileDataLoader loader = ok(FileDataLoader::from(argv[1]), "FileDataLoader");
  et::Program program = ok(et::Program::load(&loader), "Program::load");
  const et::MethodMeta meta = ok(program.method_meta("forward"), "method_meta");

  // The method allocator, and one arena per planned buffer.
  MallocMemoryAllocator method_allocator, temp_allocator;
  std::vector<std::vector<uint8_t>> arenas;
  std::vector<et::Span<uint8_t>> spans;
  for (size_t i = 0; i < meta.num_memory_planned_buffers(); ++i)
    arenas.emplace_back(ok(meta.memory_planned_buffer_size(i), "memory_planned_buffer_size"), 0);
  for (auto& a : arenas) spans.emplace_back(a.data(), a.size());
  et::HierarchicalAllocator planned({spans.data(), spans.size()});
  et::MemoryManager memory(&method_allocator, &planned, &temp_allocator);
  et::Method method = ok(program.load_method("forward", &memory), "load_method");

  // Inputs [input_ids, attention_mask, position_ids, cache x N]; the mask's last dim is the cache length.
  const size_t n = meta.num_inputs() - 3;
  const int64_t max_cache_len = ok(meta.input_tensor_meta(1), "attention_mask meta").sizes()[3];
  std::vector<Cache> caches(n);
  for (size_t i = 0; i < n; ++i) {
    const et::TensorInfo info = ok(meta.input_tensor_meta(3 + i), "cache meta");
    caches[i].bytes.assign(info.nbytes(), 0);
    caches[i].sizes.assign(info.sizes().begin(), info.sizes().end());
    caches[i].dtype = info.scalar_type();
    if (caches[i].sizes.size() != 4 || caches[i].sizes[2] != max_cache_len) die("cache input is not [B, H, slots, D]");
  }
  if (meta.num_outputs() != 2 * n + 1) die("outputs are not [cache x N, logits, cache x N]");
  std::vector<float> logits(ok(meta.output_tensor_meta(n), "logits meta").nbytes() / sizeof(float));

  std::vector<int64_t> tokens;
  std::vector<int64_t> ids = prompt;
  int64_t position = 0;
  for (int call = 0; call < new_tokens; ++call) {
    const auto query = static_cast<SizesType>(ids.size());
    std::vector<int64_t> positions(ids.size());
    for (size_t q = 0; q < ids.size(); ++q) positions[q] = position + static_cast<int64_t>(q);
    std::vector<uint8_t> mask(static_cast<size_t>(query * max_cache_len), 0);  // bool: slot <= position
    for (SizesType q = 0; q < query; ++q)
      for (int64_t s = 0; s <= positions[static_cast<size_t>(q)]; ++s) mask[static_cast<size_t>(q * max_cache_len + s)] = 1;
    auto input_ids = from_blob(ids.data(), {1, query}, ScalarType::Long);
    auto attention_mask = from_blob(mask.data(), {1, 1, query, static_cast<SizesType>(max_cache_len)}, ScalarType::Bool);
    auto position_ids = from_blob(positions.data(), {1, query}, ScalarType::Long);
    ok(method.set_input(et::EValue(*input_ids), 0), "set_input input_ids");
    ok(method.set_input(et::EValue(*attention_mask), 1), "set_input attention_mask");
    ok(method.set_input(et::EValue(*position_ids), 2), "set_input position_ids");
    std::vector<executorch::extension::TensorPtr> cache_tensors;
    for (size_t i = 0; i < n; ++i) {
      Cache& c = caches[i];
      c.before = c.bytes;
      cache_tensors.push_back(from_blob(c.bytes.data(), c.sizes, c.dtype));
      ok(method.set_input(et::EValue(*cache_tensors.back()), 3 + i), "set_input cache");
      ok(method.set_output_data_ptr(c.bytes.data(), c.bytes.size(), n + 1 + i), "set_output_data_ptr cache");
    }
    ok(method.set_output_data_ptr(logits.data(), logits.size() * sizeof(float), n), "set_output_data_ptr logits");
    ok(method.execute(), "execute");

    // Written in place: the outputs are the host's buffers; this call's slots changed, earlier
    // ones did not, later ones are still zero.
    const int64_t end = position + query;
    for (size_t i = 0; i < n; ++i) {
      const Cache& c = caches[i];
      for (size_t out : {i, n + 1 + i})
        if (method.get_output(out).toTensor().const_data_ptr() != c.bytes.data())
          die("cache output " + std::to_string(out) + " is not the host's buffer");
      const std::vector<uint8_t> zeros(c.bytes.size(), 0);
      for (int64_t s = 0; s < max_cache_len; ++s) {
        const bool same = slot_equal(c, c.bytes, c.before, s);
        if (s < position && !same) die("cache " + std::to_string(i) + " slot " + std::to_string(s) + " was rewritten");
        if (s >= position && s < end && same) die("cache " + std::to_string(i) + " slot " + std::to_string(s) + " was not written");
        if (s >= end && !slot_equal(c, c.bytes, zeros, s))
          die("cache " + std::to_string(i) + " slot " + std::to_string(s) + " past the sequence was written");
      }
    }
    const executorch::aten::Tensor out = method.get_output(n).toTensor();
    if (out.const_data_ptr() != logits.data()) die("logits are not the host's buffer");
    const auto vocab = static_cast<size_t>(out.size(out.dim() - 1));
    const float* last = logits.data() + (static_cast<size_t>(out.numel()) - vocab);
    const int64_t next = std::max_element(last, last + vocab) - last;
    tokens.push_back(next);
    position = end;
    ids = {next};
  }
  for (size_t i = 0; i < tokens.size(); ++i) std::printf("%s%lld", i ? " " : "", static_cast<long long>(tokens[i]));
  std::printf("\n");
  return 0;
}
