#include "runners/common/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace hfx {

Sampler::Sampler(const GenerateOptions& o) : o_(o), rng_(o.seeded ? o.seed : std::random_device{}()) {}

int64_t Sampler::operator()(const float* logits, size_t vocab) {
  if (!o_.do_sample) return std::max_element(logits, logits + vocab) - logits;
  std::vector<size_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  const size_t keep = o_.top_k > 0 ? std::min(vocab, static_cast<size_t>(o_.top_k)) : vocab;
  std::vector<double> probs(keep);
  const double top = logits[order[0]] / o_.temperature;
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += probs[i] = std::exp(logits[order[i]] / o_.temperature - top);
  double mass = 0;
  size_t nucleus = 0;
  while (nucleus < keep && (nucleus == 0 || mass < o_.top_p)) mass += probs[nucleus++] / sum;
  probs.resize(nucleus);
  std::discrete_distribution<size_t> pick(probs.begin(), probs.end());
  return static_cast<int64_t>(order[pick(rng_)]);
}

}  // namespace hfx
