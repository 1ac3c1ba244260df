// A sentence-transformers checkpoint's sentence embedding (its modules.json: the Transformer, then
// Pooling and optionally Normalize), read once and built into the graph after the encoder, so that
// the export's `sentence_embedding` is what SentenceTransformer.encode returns.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/task.h"
#include "io/checkpoint.h"
#include "ir/builder.h"

namespace hfx {

struct SentencePooling {
  // In sentence-transformers' order of concatenation (the order its config lists them).
  enum class Mode { Cls, Max, Mean, MeanSqrtLen, WeightedMean, LastToken };
  std::vector<Mode> modes;
  bool normalize = false;
  // The Dense modules after the pooling, in order (EmbeddingGemma's projections): their folders,
  // whose config and weights are read as the graph is built.
  std::vector<std::filesystem::path> dense;
  // Why the sentence embedding cannot be built (a prompt left out of the pooling, a module of
  // another kind); empty: it can. The checkpoint's other tasks still export.
  std::string unsupported;
};

// The export's task: `configured`, else sentence-similarity for a sentence-transformers checkpoint
// (`pooling` set), else what `architectures` implies (`fallback`). Sentence-similarity is refused
// without a pooling, or with one it cannot build (naming the module).
Task resolve_task_with_pooling(const std::string& configured, const std::vector<std::string>& architectures,
                               Task fallback, const std::optional<SentencePooling>& pooling, const Checkpoint& ckpt);

// export.json's record of it, {"pooling_mode": [names], "normalize": bool}; null without a pooling
// that can be built, or with Dense modules (a pipeline pooling the hidden states itself would
// leave their projections out).
nlohmann::json sentence_pooling_json(const std::optional<SentencePooling>& pooling);

// The pooling of the sentence-transformers model in `ckpt`'s directory (modules.json with a Pooling
// module), or none. Modules that change the numbers and are not built (a prompt left out of the
// pooling, a module other than Pooling, Dense and Normalize) are recorded in `unsupported`.
std::optional<SentencePooling> read_sentence_pooling(const Checkpoint& ckpt);

// Makes `out` (an export folder) a sentence-transformers model folder with the model at its root:
// modules.json (the Transformer module's path emptied: the export is that module), and
// config_sentence_transformers.json and every other module's folder copied. SentenceTransformer(
// OUT, backend="onnx" | "openvino") then loads the export. Nothing for a checkpoint that is not one.
void write_sentence_transformers_files(const Checkpoint& ckpt, const std::filesystem::path& out);

// [batch, width] from the token embeddings [batch, sequence, hidden] and the attention mask
// [batch, sequence] (int64; null: every token counts): pooled (hidden * modes), through the Dense
// modules, normalized.
Value* sentence_embedding(Builder& b, const SentencePooling& pooling, Value* tokens, Value* attention_mask);

}  // namespace hfx
