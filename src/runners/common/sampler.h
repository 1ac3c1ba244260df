// Greedy, or sampling with temperature, top-k and top-p from a seeded generator.
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>

#include "runners/common/options.h"

namespace hfx {

class Sampler {
 public:
  explicit Sampler(const GenerateOptions& o);
  int64_t operator()(const float* logits, size_t vocab);

 private:
  GenerateOptions o_;
  std::mt19937_64 rng_;
};

}  // namespace hfx
