// A sentence-transformers checkpoint's sentence embedding (its modules.json: the Transformer, then
// Pooling and optionally Normalize), read once and built into the graph after the encoder, so that
// the export's `sentence_embedding` is what SentenceTransformer.encode returns.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "ir/builder.h"

namespace hfx {

struct SentencePooling {
  // In sentence-transformers' order of concatenation (the order its config lists them).
  enum class Mode { Cls, Max, Mean, MeanSqrtLen, WeightedMean, LastToken };
  std::vector<Mode> modes;
  bool normalize = false;
  // Why the sentence embedding cannot be built (a Dense module, a prompt left out of the
  // pooling); empty: it can. The checkpoint's other tasks still export.
  std::string unsupported;
};

// Refuses, naming the module, a pooling whose sentence embedding cannot be built.
void check_buildable(const SentencePooling& pooling);

// export.json's record of it: {"pooling_mode": [names], "normalize": bool}.
nlohmann::json sentence_pooling_json(const SentencePooling& pooling);

// The pooling of the sentence-transformers model in `ckpt`'s directory (modules.json with a Pooling
// module), or none. Modules that change the numbers and are not built (Dense, a prompt left out of
// the pooling) are recorded in `unsupported`.
std::optional<SentencePooling> read_sentence_pooling(const Checkpoint& ckpt);

// [batch, hidden * modes] from the token embeddings [batch, sequence, hidden] and the attention
// mask [batch, sequence] (int64; null: every token counts).
Value* sentence_embedding(Builder& b, const SentencePooling& pooling, Value* tokens, Value* attention_mask);

}  // namespace hfx
