// model.safetensors.index.json beside the shards of the seed checkpoint (which the index names):
// its weight_map and whatever else it holds.
#include "fuzz_support.h"
#include "io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = [] {
    const auto d = hfx::fuzz::scratch() / "sharded";
    std::filesystem::create_directories(d);
    for (const auto& entry : std::filesystem::directory_iterator(hfx::fuzz::checkpoint()))
      if (entry.path().extension() == ".safetensors")
        std::filesystem::copy_file(entry.path(), d / entry.path().filename(),
                                   std::filesystem::copy_options::overwrite_existing);
    return d;
  }();
  hfx::fuzz::write_file(dir / "model.safetensors.index.json", data, size);
  hfx::fuzz::expect_clean([&] {
    const hfx::SafetensorsSource source(dir);
    for (const hfx::TensorView* t : source.tensors())
      if (source.find(t->name) != t) std::abort();
  });
  return 0;
}
