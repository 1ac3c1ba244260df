// config.json (or, with HFX_FUZZ_FILE=generation_config.json, that file) of the seed checkpoint,
// through a whole export: the family's frontend reads every key it knows, the passes and the ONNX
// writer run on what it built, export.json records the token ids.
#include "core/export_config.h"
#include "export/exporter.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* file = std::getenv("HFX_FUZZ_FILE") ? std::getenv("HFX_FUZZ_FILE") : "config.json";
  static const std::filesystem::path dir = [] {
    const auto d = hfx::fuzz::scratch() / "checkpoint";
    std::filesystem::copy(hfx::fuzz::checkpoint(), d, std::filesystem::copy_options::recursive |
                                                          std::filesystem::copy_options::overwrite_existing);
    return d;
  }();
  hfx::fuzz::write_file(dir / file, data, size);
  const auto out = hfx::fuzz::scratch() / "out";
  hfx::fuzz::expect_clean([&] {
    hfx::ExportConfig config;
    config.generation.enabled = std::getenv("HFX_FUZZ_GENERATION") != nullptr;
    hfx::run_export(dir, out, config, {.overwrite = true});
  });
  return 0;
}
