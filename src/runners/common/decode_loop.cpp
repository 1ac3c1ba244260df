#include "runners/common/decode_loop.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "core/error.h"
#include "runners/common/sampler.h"

namespace hfx {

namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point from, Clock::time_point to) { return std::chrono::duration<double>(to - from).count(); }
}  // namespace

std::string GenerationTimes::summary() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "prefill %lld tokens in %.1f ms; decode %lld steps in %.3f s, %.2f tok/s",
                static_cast<long long>(prompt_tokens), prefill_s * 1e3, static_cast<long long>(decode_steps), decode_s,
                decode_s > 0 ? static_cast<double>(decode_steps) / decode_s : 0.0);
  return buf;
}

LoopRules LoopRules::of(const Manifest& manifest) {
  const nlohmann::json& gen = manifest.generation();
  LoopRules rules;
  rules.rebuild_cache_at = gen.value(manifest::key::kRebuildCacheAt, int64_t{0});
  if (gen.value(manifest::key::kMultiTokenDecode, false))
    rules.prefill_chunk = gen.value(manifest::key::kPrefillChunk, int64_t{0});
  return rules;
}

namespace {
// The prompt in one call, or its first `chunk` tokens and then the rest `chunk` at a time.
std::vector<float> prefill(DecodeSession& session, const std::vector<int64_t>& ids, int64_t chunk) {
  const auto n = static_cast<int64_t>(ids.size());
  if (chunk <= 0 || n <= chunk) return session.prefill(ids);
  std::vector<float> logits = session.prefill({ids.begin(), ids.begin() + chunk});
  for (int64_t start = chunk; start < n; start += chunk)
    logits = session.extend({ids.begin() + start, ids.begin() + std::min(n, start + chunk)});
  return logits;
}
}  // namespace

std::vector<int64_t> generate(DecodeSession& session, const GenerateOptions& o, const std::vector<int64_t>& eos,
                              const LoopRules& rules, GenerationTimes* times) {
  Sampler sample(o);
  std::vector<int64_t> out;
  const Clock::time_point start = Clock::now();
  std::vector<float> logits = prefill(session, o.input_ids, rules.prefill_chunk);
  const Clock::time_point prefilled = Clock::now();
  const auto prompt = static_cast<int64_t>(o.input_ids.size());
  if (times) *times = {seconds(start, prefilled), 0, prompt, 0};
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    const int64_t token = sample(logits.data(), logits.size());
    out.push_back(token);
    const bool stop = !o.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end();
    if (stop || step + 1 == o.max_new_tokens) break;
    if (prompt < rules.rebuild_cache_at && prompt + step + 1 == rules.rebuild_cache_at) {
      std::vector<int64_t> sequence = o.input_ids;
      sequence.insert(sequence.end(), out.begin(), out.end());
      logits = prefill(session, sequence, rules.prefill_chunk);
      continue;
    }
    logits = session.step(token);
    if (times) times->decode_steps += 1;
  }
  if (times) times->decode_s = seconds(prefilled, Clock::now());
  return out;
}

void check_sequence_bound(const Manifest& manifest, const GenerateOptions& o) {
  const int64_t limit = manifest.dim_max("total_sequence").value_or(INT64_MAX);
  const auto prompt = static_cast<int64_t>(o.input_ids.size());
  if (prompt + o.max_new_tokens - 1 > limit)
    fail("prompt of ", prompt, " tokens + ", o.max_new_tokens, " new tokens exceeds the exported sequence bound ",
         limit);
}

namespace {
// "2026.4.1-20251-abc" -> "2026.4"
std::string minor_version(std::string_view v) {
  const size_t first = v.find('.');
  if (first == std::string_view::npos) return std::string(v);
  const size_t second = v.find_first_of(".-+", first + 1);
  return std::string(v.substr(0, second));
}
}  // namespace

std::string runtime_drift_warning(const Manifest& manifest, std::string_view package, std::string_view installed) {
  const auto& tested = manifest.data().value("tested_with", nlohmann::json::object());
  const auto it = tested.find(std::string(package));
  if (it == tested.end() || !it->is_string()) return {};
  const std::string version = it->get<std::string>();
  if (minor_version(version) == minor_version(installed)) return {};
  return str("hfexport: warning: this export was tested with ", package, " ", version, ", but ", package, " ",
             installed, " is running: results may differ");
}

int runner_main(int argc, char** argv, std::string_view format, const SessionFactory& open) {
  try {
    const GenerateOptions options = parse_generate_args(argc, argv);
    const Manifest manifest = Manifest::load(options.out_dir);
    if (manifest.format() != format) fail(options.out_dir.string(), ": not an ", format, " export");
    manifest.generation();  // throws unless exported --for-generation
    const std::vector<int64_t> eos = options.ignore_eos ? std::vector<int64_t>{} : manifest.eos_token_ids();
    const std::unique_ptr<DecodeSession> session = open(manifest, options);
    GenerationTimes times;
    const std::vector<int64_t> tokens = generate(*session, options, eos, LoopRules::of(manifest), &times);
    for (size_t i = 0; i < tokens.size(); ++i) std::cout << (i ? " " : "") << tokens[i];
    std::cout << "\n";
    if (options.stats) std::cerr << "hfexport: " << times.summary() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::cerr << "hfexport: error: " << message << "\n";
    return 1;
  }
}

}  // namespace hfx
