#include "models/encoder.h"

#include <algorithm>

#include "core/error.h"

namespace hfx {

Task resolve_encoder_task(const std::string& model_type, const ExportConfig& config,
                          const std::vector<std::string>& architectures,
                          const std::optional<SentencePooling>& pooling, const Checkpoint& ckpt) {
  const Task task = resolve_task_with_pooling(config.task, architectures, Task::FeatureExtraction, pooling, ckpt);
  constexpr Task kTasks[] = {Task::FeatureExtraction, Task::SentenceSimilarity, Task::TextClassification,
                             Task::TokenClassification, Task::FillMask, Task::QuestionAnswering};
  if (std::find(std::begin(kTasks), std::end(kTasks), task) == std::end(kTasks))
    fail("task: ", model_type, " exports feature-extraction, sentence-similarity, text-classification, "
         "token-classification, fill-mask or question-answering, not ", task_name(task),
         config.task.empty() ? " (from config.json's architectures; give --task)" : "");
  if (config.generation.enabled) fail("task: ", model_type, " is an encoder: it has no decode loop (--for-generation)");
  return task;
}

const char* span_outputs(Builder& b, Value* spans) {
  b.output(b.gather(spans, b.const_i64({0}), 2), "start_logits");
  b.output(b.gather(spans, b.const_i64({1}), 2), "end_logits");
  return "QuestionAnsweringModelOutput";
}

void finish_encoder(ModelBuilder& m, ExportModel& out, const Checkpoint& ckpt, const std::string& prefix,
                    const char* output_type, int64_t layers, const std::optional<SentencePooling>& pooling) {
  out.sentence_pooling = sentence_pooling_json(pooling);
  const bool base_outputs = out.task == Task::FeatureExtraction || out.task == Task::SentenceSimilarity;
  if (base_outputs && !prefix.empty())
    for (const TensorView* t : ckpt.tensors())
      if (!t->name.starts_with(prefix)) m.tolerate(t->name);
  std::unique_ptr<Graph> graph = m.finish();
  graph->output_type = std::string("transformers.modeling_outputs.") + output_type;
  graph->num_layers = layers;
  out.dims.insert(m.dim_names().begin(), m.dim_names().end());
  out.components.push_back({Role::Forward, std::move(graph)});
}

}  // namespace hfx
