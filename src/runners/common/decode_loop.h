// The decode-loop interface every C++ runner implements (prefill, step) and the loop on top of it
// (sampling, eos, max new tokens), plus the main() every runner program shares.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/manifest.h"
#include "runners/common/options.h"

namespace hfx {

// One runtime's session over an exported generation model, batch 1.
class DecodeSession {
 public:
  virtual ~DecodeSession() = default;
  // Runs the prompt; returns the last position's logits.
  virtual std::vector<float> prefill(const std::vector<int64_t>& input_ids) = 0;
  // Feeds one new token; returns its logits.
  virtual std::vector<float> step(int64_t token) = 0;
  // Feeds several tokens after the ones before in one call (a multi-token step graph); returns
  // the last one's logits. Only called where the manifest says the step graph takes several.
  virtual std::vector<float> extend(const std::vector<int64_t>& ids) = 0;
};

// What the manifest's generation block asks of the loop.
struct LoopRules {
  // When the sequence first reaches this length (the manifest's rebuild_cache_at_length; 0:
  // never), the whole sequence is run again from an empty cache, as transformers' generate does
  // for longrope.
  int64_t rebuild_cache_at = 0;
  // A longer prompt is fed in calls of at most this many tokens (prefill_chunk; 0: one call).
  int64_t prefill_chunk = 0;
  static LoopRules of(const Manifest& manifest);
};

// Where a generation's time went (--stats).
struct GenerationTimes {
  double prefill_s = 0, decode_s = 0;  // the prompt's call(s); every step after them
  int64_t prompt_tokens = 0, decode_steps = 0;
  std::string summary() const;  // "prefill 32 tokens in 41.2 ms; decode 64 steps in 2.10 s, 30.5 tok/s"
};

// The new tokens: at most max_new_tokens, ending at the first eos unless ignore_eos.
std::vector<int64_t> generate(DecodeSession& session, const GenerateOptions& options,
                              const std::vector<int64_t>& eos_token_ids, const LoopRules& rules = {},
                              GenerationTimes* times = nullptr);

// Refuses a prompt + new tokens longer than the export's sequence bound (total_sequence).
void check_sequence_bound(const Manifest& manifest, const GenerateOptions& options);

// The warning for running `package` at version `installed` on an export the manifest says was
// tested with another minor version of it (tested_with); empty when they agree or nothing is recorded.
std::string runtime_drift_warning(const Manifest& manifest, std::string_view package, std::string_view installed);

using SessionFactory = std::function<std::unique_ptr<DecodeSession>(const Manifest&, const GenerateOptions&)>;

// Parses the arguments, opens the export (which must be of `format`, made --for-generation),
// generates and prints the new ids on one line; errors: one line on stderr, exit 1.
int runner_main(int argc, char** argv, std::string_view format, const SessionFactory& open);

}  // namespace hfx
