#include "core/task.h"

#include <array>
#include <utility>

#include "core/error.h"

namespace hfx {
namespace {

constexpr std::array<std::pair<Task, std::string_view>, 12> kNames = {{
    {Task::TextGeneration, "text-generation"},
    {Task::FeatureExtraction, "feature-extraction"},
    {Task::TextClassification, "text-classification"},
    {Task::TokenClassification, "token-classification"},
    {Task::FillMask, "fill-mask"},
    {Task::QuestionAnswering, "question-answering"},
    {Task::SentenceSimilarity, "sentence-similarity"},
    {Task::SpeechRecognition, "automatic-speech-recognition"},
    {Task::Text2TextGeneration, "text2text-generation"},
    {Task::ImageClassification, "image-classification"},
    {Task::ZeroShotImageClassification, "zero-shot-image-classification"},
    {Task::ImageTextToText, "image-text-to-text"},
}};

// transformers' class-name suffixes, longest first where one ends another ("Model").
constexpr std::array<std::pair<std::string_view, Task>, 10> kSuffixes = {{
    {"ForCausalLM", Task::TextGeneration},
    {"LMHeadModel", Task::TextGeneration},       // GPT2LMHeadModel
    {"DoubleHeadsModel", Task::TextGeneration},  // GPT2DoubleHeadsModel: an LM head beside its choice head
    {"ForSequenceClassification", Task::TextClassification},
    {"ForTokenClassification", Task::TokenClassification},
    {"ForMaskedLM", Task::FillMask},
    {"ForQuestionAnswering", Task::QuestionAnswering},
    {"ForImageClassification", Task::ImageClassification},
    {"TextModel", Task::FeatureExtraction},  // Gemma3TextModel
    {"Model", Task::FeatureExtraction},
}};

}  // namespace

std::string_view task_name(Task task) {
  for (const auto& [t, name] : kNames)
    if (t == task) return name;
  return "?";
}

std::optional<Task> task_named(std::string_view name) {
  for (const auto& [t, n] : kNames)
    if (n == name) return t;
  return std::nullopt;
}

std::string task_names() {
  std::string out;
  for (const auto& entry : kNames) out += (out.empty() ? "" : ", ") + std::string(entry.second);
  return out;
}

bool is_generation_task(Task task) {
  return task == Task::TextGeneration || task == Task::SpeechRecognition || task == Task::Text2TextGeneration ||
         task == Task::ImageTextToText;
}

std::optional<Task> task_of_architecture(std::string_view architecture) {
  for (const auto& [suffix, task] : kSuffixes) {
    if (!architecture.ends_with(suffix)) continue;
    // "...Model" is the base model only when no head names it (Qwen2ForRewardModel is not).
    if (task == Task::FeatureExtraction && architecture.find("For") != std::string_view::npos) return std::nullopt;
    return task;
  }
  return std::nullopt;
}

Task resolve_task(const std::string& configured, const std::vector<std::string>& architectures, Task fallback) {
  if (!configured.empty()) {
    const auto task = task_named(configured);
    HFX_CHECK(task.has_value(), "task '", configured, "' was not validated");
    return *task;
  }
  for (const std::string& a : architectures)
    if (const auto task = task_of_architecture(a)) return *task;
  return fallback;
}

}  // namespace hfx
