// Granite's four scalars, shared by granite and granitemoehybrid: embeddings times
// embedding_multiplier, residual branches times residual_multiplier, attention scores times
// attention_multiplier (in place of 1/sqrt(head_dim)), logits divided by logits_scaling.
#pragma once
#include "models/decoder.h"

namespace hfx {

void read_granite_multipliers(const JsonConfig& c, DecoderConfig& cfg);

}  // namespace hfx
