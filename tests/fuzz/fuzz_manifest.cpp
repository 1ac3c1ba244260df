// export.json as the C++ runners read it: Manifest::load's checks, then every accessor the
// runners call and the shared decode-loop checks.
#include "fuzz_support.h"
#include "io/manifest.h"
#include "runners/common/decode_loop.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = hfx::fuzz::scratch();
  hfx::fuzz::write_file(dir / "export.json", data, size);
  hfx::fuzz::expect_clean([&] {
    const hfx::Manifest m = hfx::Manifest::load(dir);
    (void)m.format();
    namespace component = hfx::manifest::component;
    for (const std::string_view c : {component::kModel, component::kPrefill, component::kDecode})
      if (m.has_component(c)) {
        (void)m.component(c);
        (void)m.file_of(c);
      }
    (void)m.dim_max("total_sequence");
    (void)m.eos_token_ids();
    (void)hfx::runtime_drift_warning(m, "onnxruntime", "1.32.0");
    if (m.for_generation()) {
      (void)m.generation();
      (void)m.cache();
      hfx::GenerateOptions options;
      options.input_ids = {1, 2, 3};
      hfx::check_sequence_bound(m, options);
    }
  });
  return 0;
}
