// What every fuzz target shares: the input written to a file of a scratch directory (the parsers
// read files, as they do for users), and the rule that bad input may only fail as hfx::Error —
// one line for the user. Anything else escaping (a std::exception of a library, a crash, a
// sanitizer report) is a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace hfx::fuzz {

// A directory of this process's own under TMPDIR (a tmpfs in CI keeps the writes cheap).
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(tmp ? tmp : "/tmp") / ("hfx-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// A checkpoint directory the targets build on: HFX_FUZZ_CHECKPOINT (scripts/fuzz.sh makes a tiny
// one with transformers).
inline std::filesystem::path checkpoint() {
  const char* dir = std::getenv("HFX_FUZZ_CHECKPOINT");
  if (!dir) {
    std::fprintf(stderr, "set HFX_FUZZ_CHECKPOINT to a small checkpoint directory\n");
    std::abort();
  }
  return dir;
}

// Runs fn; hfx::Error is the expected way to refuse input, anything else aborts (a finding).
template <class Fn>
void expect_clean(Fn&& fn) {
  try {
    fn();
  } catch (const hfx::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "finding: an exception other than hfx::Error escaped: %s\n", e.what());
    std::abort();
  }
}

}  // namespace hfx::fuzz
