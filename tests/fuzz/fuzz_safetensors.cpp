// A safetensors file: header length, JSON header, dtypes, shapes and data offsets. A file it
// accepts must have every tensor's bytes inside the mapping (ASan checks the reads).
#include "fuzz_support.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = hfx::fuzz::scratch() / "model.safetensors";
  hfx::fuzz::write_file(path, data, size);
  hfx::fuzz::expect_clean([&] {
    const hfx::SafetensorsFile file(path);
    unsigned sum = 0;
    for (const hfx::TensorInfo& t : file.tensors())
      if (t.nbytes) sum += static_cast<unsigned>(t.data[0]) + static_cast<unsigned>(t.data[t.nbytes - 1]);
    if (sum == 0xFFFFFFFFu) std::abort();  // keeps the reads
  });
  return 0;
}
