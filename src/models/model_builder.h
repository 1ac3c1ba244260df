// Shared frontend machinery: each weight is declared where it is used (name + the shape the
// config implies) and returned as a lazy constant; once the graph is built, the declarations are
// checked against the checkpoint, before any backend writes a byte.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "ir/builder.h"
#include "models/registry.h"

namespace hfx {

class ModelBuilder {
 public:
  ModelBuilder(const Checkpoint& ckpt, const ExportConfig& config);

  // Declares a tensor the architecture reads, with the shape the config implies, and returns it
  // as a lazy constant of the graph dtype. A missing or mis-shaped tensor yields a stand-in of
  // the declared shape, so building goes on; check_checkpoint() then reports it.
  Value* weight(const std::string& name, std::vector<int64_t> shape);
  // The same, when `present` (e.g. the config enables a bias); else nothing is declared.
  Value* weight_if(bool present, const std::string& name, std::vector<int64_t> shape) {
    return present ? weight(name, std::move(shape)) : nullptr;
  }
  // Transforms of a declared weight, evaluated while the weight streams to the backend's file:
  // rows [begin, end) (one projection of a fused qkv / gate_up weight), the transpose (GPT-2's
  // Conv1D stores [in, out]), and w + scalar (Gemma's RMSNorm scale 1 + w).
  Value* rows(Value* weight, int64_t begin, int64_t end);
  Value* transposed(Value* weight);
  // `count` blocks of `length` rows, block i starting at row i * stride + offset (one projection
  // of GPT-NeoX's per-head fused query_key_value).
  Value* row_blocks(Value* weight, int64_t stride, int64_t offset, int64_t length, int64_t count);
  Value* plus(Value* weight, double scalar);
  // Weights stacked along dim 0, one weight's bytes under another shape, rows of two weights
  // interleaved (MoE experts: per-expert checkpoints stacked, gate and up rows interleaved).
  Value* stack(const std::vector<Value*>& weights);
  Value* view(Value* weight, std::vector<int64_t> shape, std::string name = "");
  Value* interleave_rows(Value* a, Value* b);
  // MXFP4 blocks [..., G, 16] u8 and E8M0 scales [..., G] u8 (gpt-oss's expert checkpoints) as the
  // weights they encode, [rows, G * 32] of the graph dtype, rows = the product of the leading dims.
  Value* mxfp4(const std::string& blocks, const std::string& scales, std::vector<int64_t> scales_shape);
  // Whether the checkpoint holds `name` (for layouts that vary between checkpoints of one family).
  bool has(const std::string& name) const { return ckpt_.find(name) != nullptr; }
  // The shape the checkpoint stores `name` in (empty when it has no such tensor).
  std::vector<int64_t> stored_shape(const std::string& name) const {
    const TensorView* t = ckpt_.find(name);
    return t ? t->shape : std::vector<int64_t>{};
  }
  // A tensor whose HF name holds `fragment` is read under the name with `legacy` in its place
  // when only that one is stored (as a family's load hook renames them in transformers).
  void accept_legacy_name(std::string fragment, std::string legacy) { legacy_names_.emplace_back(std::move(fragment), std::move(legacy)); }
  // A tensor that may be present but is not read (e.g. lm_head.weight with tied embeddings).
  void tolerate(const std::string& name) { tolerated_.insert(stored_name(name)); }
  // Tolerates every tensor of the checkpoint outside the modules under `kept` (the other parts of
  // a checkpoint this graph is one part of).
  void tolerate_outside(const std::vector<std::string>& kept);
  // Throws one Error naming the first missing, unexpected, mis-shaped or mis-typed tensor.
  void check_checkpoint() const;

  // A dim of the graph's interface: static when the config fixes it (min == max), else a symbol
  // with the configured bounds or [min, max]. Refused when the config is not dynamic and leaves
  // the dim free.
  Dim dim(const std::string& name, int64_t min, int64_t max);
  // The dim names dim() was asked for (the driver rejects configured dims no graph has).
  const std::set<std::string>& dim_names() const { return dim_names_; }

  Builder& b() { return builder_; }
  Graph& graph() { return *graph_; }
  const ExportConfig& config() const { return config_; }
  // Checks the checkpoint against the declarations and hands over the graph.
  std::unique_ptr<Graph> finish();
  // The forward's inputs this export takes: the configured ones (--inputs), each of which must be
  // one of `declared` (else an error naming them all), or `defaults` when none are configured.
  std::vector<std::string> taken_inputs(const std::vector<std::string>& declared,
                                        const std::vector<std::string>& defaults) const;

 private:
  std::string stored_name(const std::string& name) const;

  const Checkpoint& ckpt_;
  const ExportConfig& config_;
  std::unique_ptr<Graph> graph_;
  Builder builder_;
  std::map<std::string, std::vector<int64_t>> expected_;
  std::map<std::string, DType> raw_;  // declared tensors that are not floats (MXFP4 bytes)
  std::set<std::string> tolerated_;
  std::vector<std::pair<std::string, std::string>> legacy_names_;
  std::map<std::string, Value*> weights_;
  std::set<std::string> dim_names_;
};

}  // namespace hfx
