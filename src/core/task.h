// What an export computes on top of a model's hidden states: transformers' pipeline task names,
// chosen by the config's `task` or from config.json's `architectures` (LlamaForCausalLM ->
// text-generation, LlamaModel -> feature-extraction), recorded in export.json. A frontend builds
// the heads it has and refuses the others by name.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hfx {

enum class Task {
  TextGeneration,       // logits over the vocabulary (a causal LM head)
  FeatureExtraction,    // last_hidden_state (the base model)
  TextClassification,   // logits per sequence
  TokenClassification,  // logits per token
  FillMask,             // a masked LM's logits
  QuestionAnswering,    // start and end logits
  SentenceSimilarity,   // pooled, normalised sentence embeddings
  SpeechRecognition,    // automatic-speech-recognition: an audio encoder and a text decoder (Whisper)
  Text2TextGeneration,  // an encoder-decoder's text in, text out (T5, BART)
  ImageClassification,  // logits per image (ViT)
  ZeroShotImageClassification,  // image-text similarity logits and both embeddings (CLIP)
  ImageTextToText,  // a vision-language model: images and text in, text out (LLaVA)
};

std::string_view task_name(Task task);
std::optional<Task> task_named(std::string_view name);
std::string task_names();
// Whether the task's export is a decode loop (--for-generation).
bool is_generation_task(Task task);  // "text-generation, feature-extraction, ...", for errors
// The task an `architectures` class name implies (its suffix), if any.
std::optional<Task> task_of_architecture(std::string_view architecture);
// The config's task if given, else the first architecture's, else `fallback`.
Task resolve_task(const std::string& configured, const std::vector<std::string>& architectures, Task fallback);

}  // namespace hfx
