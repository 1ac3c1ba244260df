// Shared frontend machinery: the list of tensors an architecture expects, checked against the
// checkpoint before any graph is built, and named access to them while building.
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
  ModelBuilder(const Checkpoint& ckpt, const BuildOptions& opt);

  // Declares a tensor the architecture reads, with the shape the config implies.
  void expect(const std::string& name, std::vector<int64_t> shape);
  // A tensor that may be present but is not read (e.g. lm_head.weight with tied embeddings).
  void tolerate(const std::string& name) { tolerated_.insert(name); }
  // Throws one Error naming the first missing, unexpected, mis-shaped or mis-typed tensor.
  void check_checkpoint() const;

  Value* weight(const std::string& name);  // a declared tensor, as a lazy constant
  Builder& b() { return builder_; }
  Graph& graph() { return *graph_; }
  const BuildOptions& options() const { return opt_; }
  std::unique_ptr<Graph> finish();

 private:
  const Checkpoint& ckpt_;
  BuildOptions opt_;
  std::unique_ptr<Graph> graph_;
  Builder builder_;
  std::map<std::string, std::vector<int64_t>> expected_;
  std::set<std::string> tolerated_;
  std::map<std::string, Value*> weights_;
};

}  // namespace hfx
