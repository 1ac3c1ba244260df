// What the text-encoder families (bert.cpp, modernbert.cpp) share around their graphs: the task
// an export computes, and handing the one forward graph over.
#pragma once
#include <optional>
#include <string>

#include "models/model_builder.h"
#include "models/registry.h"
#include "models/sentence_pooling.h"

namespace hfx {

// The encoder's task: configured, else sentence-similarity for a sentence-transformers
// checkpoint, else its head class's (feature-extraction for the base model). Anything but the
// encoder tasks, and a decode loop, are refused.
Task resolve_encoder_task(const std::string& model_type, const ExportConfig& config,
                          const std::vector<std::string>& architectures,
                          const std::optional<SentencePooling>& pooling, const Checkpoint& ckpt);

// Question answering's outputs from the span logits [batch, sequence, 2]: start_logits and
// end_logits; returns the transformers output class.
const char* span_outputs(Builder& b, Value* spans);

// Puts the finished forward graph into `out`. A head class's own weights (outside `prefix`) are
// not read when only the base model's outputs are exported.
void finish_encoder(ModelBuilder& m, ExportModel& out, const Checkpoint& ckpt, const std::string& prefix,
                    const char* output_type, int64_t layers, const std::optional<SentencePooling>& pooling);

}  // namespace hfx
