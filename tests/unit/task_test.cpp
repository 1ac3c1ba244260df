// Which task config.json's architectures imply, and the config's task over them.
#include <gtest/gtest.h>

#include "core/task.h"

namespace hfx {
namespace {

TEST(Task, FromArchitectures) {
  EXPECT_EQ(task_of_architecture("LlamaForCausalLM"), Task::TextGeneration);
  EXPECT_EQ(task_of_architecture("GPT2LMHeadModel"), Task::TextGeneration);
  EXPECT_EQ(task_of_architecture("GPT2DoubleHeadsModel"), Task::TextGeneration);
  EXPECT_EQ(task_of_architecture("LlamaModel"), Task::FeatureExtraction);
  EXPECT_EQ(task_of_architecture("Gemma3TextModel"), Task::FeatureExtraction);
  EXPECT_EQ(task_of_architecture("BertForSequenceClassification"), Task::TextClassification);
  EXPECT_EQ(task_of_architecture("BertForMaskedLM"), Task::FillMask);
  EXPECT_EQ(task_of_architecture("Qwen2ForRewardModel"), std::nullopt);  // a head, not the base model
  EXPECT_EQ(task_of_architecture("Qwen2VLForConditionalGeneration"), std::nullopt);
}

TEST(Task, ConfiguredTaskWinsThenArchitecturesThenFallback) {
  EXPECT_EQ(resolve_task("feature-extraction", {"LlamaForCausalLM"}, Task::TextGeneration), Task::FeatureExtraction);
  EXPECT_EQ(resolve_task("", {"Qwen2ForRewardModel", "LlamaModel"}, Task::TextGeneration), Task::FeatureExtraction);
  EXPECT_EQ(resolve_task("", {}, Task::TextGeneration), Task::TextGeneration);
  EXPECT_EQ(task_named("fill-mask"), Task::FillMask);
  EXPECT_EQ(task_named("translation"), std::nullopt);
}

}  // namespace
}  // namespace hfx
