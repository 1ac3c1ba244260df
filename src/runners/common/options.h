// The arguments every C++ runner takes: `OUT_DIR --input-ids 1,2,3 [--max-new-tokens N]
// [--ignore-eos] [--do-sample [--temperature T] [--top-k K] [--top-p P] [--seed S]]`, the same as
// the Python runner's `hfexport generate`.
#pragma once
#include <cstdint>
#include <filesystem>
#include <vector>

namespace hfx {

struct GenerateOptions {
  std::filesystem::path out_dir;
  std::vector<int64_t> input_ids;
  int64_t max_new_tokens = 32;
  bool ignore_eos = false, do_sample = false;
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  bool seeded = false;
  bool stats = false;  // --stats: prefill and decode times on stderr
};

// argv[0] is the program; throws Error (one line) for anything malformed.
GenerateOptions parse_generate_args(int argc, char** argv);

}  // namespace hfx
