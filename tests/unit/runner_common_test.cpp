// The C++ runners' shared parts: arguments, sampler, and the decode loop over a scripted session.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "runners/common/decode_loop.h"
#include "runners/common/options.h"
#include "runners/common/sampler.h"
#include "test_util.h"

namespace hfx {
namespace {

using test::error_of;

GenerateOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "runner");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_generate_args(static_cast<int>(argv.size()), argv.data());
}

TEST(RunnerOptions, ParsesEveryOption) {
  const GenerateOptions o = parse({"out", "--input-ids", "1, 2,3", "--max-new-tokens", "5", "--ignore-eos",
                                   "--do-sample", "--temperature", "0.5", "--top-k", "3", "--top-p", "0.9", "--seed", "7"});
  EXPECT_EQ(o.out_dir, "out");
  EXPECT_EQ(o.input_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(o.max_new_tokens, 5);
  EXPECT_TRUE(o.ignore_eos && o.do_sample && o.seeded);
  EXPECT_EQ(o.top_k, 3);
  EXPECT_EQ(o.seed, 7u);
}

TEST(RunnerOptions, BadArgumentsNameTheOption) {
  EXPECT_HAS(error_of([] { parse({"out"}); }), "--input-ids is required");
  EXPECT_HAS(error_of([] { parse({"out", "--input-ids", "1,x"}); }), "--input-ids");
  EXPECT_HAS(error_of([] { parse({"out", "--input-ids", ","}); }), "no token ids");
  EXPECT_HAS(error_of([] { parse({"out", "--input-ids", "1", "--max-new-tokens", "0"}); }), "--max-new-tokens");
  EXPECT_HAS(error_of([] { parse({"out", "--input-ids", "1", "--max-new-tokens", "abc"}); }), "not a number");
  EXPECT_HAS(error_of([] { parse({"out", "--input-ids", "1", "--top-p", "0"}); }), "--top-p");
  EXPECT_HAS(error_of([] { parse({"out", "--input-ids", "1", "--wat"}); }), "unknown option --wat");
  EXPECT_HAS(error_of([] { parse({"--input-ids", "1"}); }), "OUT_DIR");
}

TEST(RunnerSampler, GreedyAndSeededSampling) {
  GenerateOptions o;
  const std::vector<float> logits{0.1f, 3.0f, 0.2f, 2.9f};
  EXPECT_EQ(Sampler(o)(logits.data(), logits.size()), 1);
  o.do_sample = true;
  o.top_k = 2;  // only tokens 1 and 3 can come out
  o.seeded = true;
  o.seed = 42;
  Sampler a(o), b(o);
  for (int i = 0; i < 50; ++i) {
    const int64_t t = a(logits.data(), logits.size());
    EXPECT_TRUE(t == 1 || t == 3);
    EXPECT_EQ(t, b(logits.data(), logits.size()));  // same seed, same draws
  }
}

// Emits the scripted argmax token at each call; records what the loop fed it.
class ScriptedSession final : public DecodeSession {
 public:
  explicit ScriptedSession(std::vector<int64_t> script) : script_(std::move(script)) {}
  std::vector<float> prefill(const std::vector<int64_t>& ids) override {
    prompt = ids;
    return next();
  }
  std::vector<float> step(int64_t token) override {
    fed.push_back(token);
    return next();
  }
  std::vector<float> extend(const std::vector<int64_t>& ids) override {
    extended.push_back(ids);
    return next();
  }
  std::vector<int64_t> prompt, fed;
  std::vector<std::vector<int64_t>> extended;

 private:
  std::vector<float> next() {
    std::vector<float> logits(8, 0.0f);
    logits[static_cast<size_t>(script_.at(calls_++))] = 1.0f;
    return logits;
  }
  std::vector<int64_t> script_;
  size_t calls_ = 0;
};

TEST(RunnerDecodeLoop, StopsAtEosOrMaxNewTokens) {
  GenerateOptions o;
  o.input_ids = {5, 6};
  o.max_new_tokens = 4;
  ScriptedSession until_eos({3, 4, 2, 7, 7});
  EXPECT_EQ(generate(until_eos, o, {2}), (std::vector<int64_t>{3, 4, 2}));
  EXPECT_EQ(until_eos.prompt, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(until_eos.fed, (std::vector<int64_t>{3, 4}));  // the eos token is never fed back

  o.ignore_eos = true;
  ScriptedSession all({3, 4, 2, 7, 7});
  EXPECT_EQ(generate(all, o, {2}), (std::vector<int64_t>{3, 4, 2, 7}));
  EXPECT_EQ(all.fed.size(), 3u);  // no step after the last token
}

TEST(RunnerDecodeLoop, FeedsALongPromptInChunks) {
  GenerateOptions o;
  o.input_ids = {1, 2, 3, 4, 5, 6, 7};
  o.max_new_tokens = 2;
  o.ignore_eos = true;
  ScriptedSession chunked({0, 0, 3, 4});
  EXPECT_EQ(generate(chunked, o, {}, {.prefill_chunk = 3}), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(chunked.prompt, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(chunked.extended, (std::vector<std::vector<int64_t>>{{4, 5, 6}, {7}}));
  EXPECT_EQ(chunked.fed, (std::vector<int64_t>{3}));

  ScriptedSession short_prompt({3, 4});  // no longer than a chunk: one call
  EXPECT_EQ(generate(short_prompt, o, {}, {.prefill_chunk = 7}), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(short_prompt.prompt, o.input_ids);
  EXPECT_TRUE(short_prompt.extended.empty());
}

TEST(RunnerDecodeLoop, PrefillChunkOnlyWhereTheStepTakesSeveralTokens) {
  auto rules = [](bool several) {
    return LoopRules::of(Manifest(nlohmann::json{
        {"format", "onnx"},
        {"components", nlohmann::json::object()},
        {"generation", {{"multi_token_decode", several}, {"prefill_chunk", 64}, {"rebuild_cache_at_length", 9}}}}));
  };
  EXPECT_EQ(rules(true).prefill_chunk, 64);
  EXPECT_EQ(rules(false).prefill_chunk, 0);  // a one-token step: the prompt goes to prefill whole
  EXPECT_EQ(rules(false).rebuild_cache_at, 9);
}

TEST(RunnerDecodeLoop, SequenceBound) {
  const Manifest m(nlohmann::json{{"format", "openvino"}, {"components", nlohmann::json::object()},
                                  {"dims", {{"total_sequence", {{"min", 1}, {"max", 8}}}}}});
  GenerateOptions o;
  o.input_ids = {1, 2, 3, 4, 5};
  o.max_new_tokens = 4;
  EXPECT_NO_THROW(check_sequence_bound(m, o));
  o.max_new_tokens = 5;
  EXPECT_HAS(error_of([&] { check_sequence_bound(m, o); }), "exceeds the exported sequence bound 8");
}

TEST(RunnerVersions, WarnsOnlyWhenTheMinorVersionDiffers) {
  const Manifest m(nlohmann::json{{"format", "openvino"}, {"components", nlohmann::json::object()},
                                  {"tested_with", {{"openvino", "2026.4.1"}}}});
  EXPECT_EQ(runtime_drift_warning(m, "openvino", "2026.4.0-20363-abc"), "");
  EXPECT_HAS(runtime_drift_warning(m, "openvino", "2026.3.0-1-abc"),
             "tested with openvino 2026.4.1, but openvino 2026.3.0-1-abc");
  EXPECT_EQ(runtime_drift_warning(m, "onnxruntime", "1.0.0"), "");  // nothing recorded for it
}

}  // namespace
}  // namespace hfx
