#include "models/model_builder.h"

#include <algorithm>

#include "core/error.h"

namespace hfx {

ModelBuilder::ModelBuilder(const Checkpoint& ckpt, const ExportConfig& config)
    : ckpt_(ckpt), config_(config), graph_(std::make_unique<Graph>()), builder_(*graph_) {}

Dim ModelBuilder::dim(const std::string& name, int64_t min, int64_t max) {
  dim_names_.insert(name);
  const DimRange r = config_.dim(name, {min, max});
  if (r.min == r.max) return Dim(r.min);
  if (!config_.dynamic)
    fail("export config: dynamic is false, so dim '", name, "' needs a fixed size (dims.", name, " with min = max)");
  return Dim(graph_->symbol(name, r.min, r.max));
}

void ModelBuilder::tolerate_outside(const std::vector<std::string>& kept) {
  for (const TensorView* t : ckpt_.tensors())
    if (std::none_of(kept.begin(), kept.end(), [&](const std::string& p) { return t->name.starts_with(p); }))
      tolerate(t->name);
}

void ModelBuilder::check_checkpoint() const {
  std::vector<std::string> problems;
  for (const auto& [name, shape] : expected_) {
    const TensorView* t = ckpt_.find(name);
    if (!t) {
      problems.push_back(str(ckpt_.where(), ": missing tensor '", name, "' (expected shape ",
                             shape_string(shape), ")"));
    } else if (t->shape != shape) {
      problems.push_back(str(t->location(), ": tensor '", name, "' has shape ",
                             shape_string(t->shape), ", expected ", shape_string(shape)));
    } else if (const auto raw = raw_.find(name); raw != raw_.end()) {
      if (t->dtype != raw->second)
        problems.push_back(str(t->location(), ": tensor '", name, "' has dtype ", dtype_name(t->dtype), ", expected ",
                               dtype_name(raw->second)));
    } else if (!is_float(t->dtype) || t->dtype == DType::F64) {
      problems.push_back(str(t->location(), ": tensor '", name, "' has dtype ",
                             dtype_name(t->dtype), ", expected float32, float16 or bfloat16"));
    }
  }
  for (const TensorView* t : ckpt_.tensors()) {
    const bool rotary_cache = t->name.ends_with(".rotary_emb.inv_freq");  // old checkpoints carry it
    if (!expected_.count(t->name) && !tolerated_.count(t->name) && !rotary_cache)
      problems.push_back(str(t->location(), ": unexpected tensor '", t->name, "' (shape ",
                             shape_string(t->shape), ") is not part of this architecture"));
  }
  if (problems.empty()) return;
  std::string more = problems.size() > 1 ? str(" (and ", problems.size() - 1, " more tensor problems)") : "";
  fail(problems.front(), more);
}

// The name a checkpoint stores `name` under: itself, or for a LayerNorm the TF-era gamma / beta
// names some BERT-family checkpoints still carry (transformers renames them as it loads).
std::string ModelBuilder::stored_name(const std::string& name) const {
  if (ckpt_.find(name)) return name;
  for (const auto& [hf, old] : {std::pair{"LayerNorm.weight", "LayerNorm.gamma"}, std::pair{"LayerNorm.bias", "LayerNorm.beta"}})
    if (name.ends_with(hf)) {
      const std::string legacy = name.substr(0, name.size() - std::string_view(hf).size()) + old;
      if (ckpt_.find(legacy)) return legacy;
    }
  for (const auto& [fragment, old] : legacy_names_)
    if (const size_t at = name.find(fragment); at != std::string::npos) {
      const std::string legacy = name.substr(0, at) + old + name.substr(at + fragment.size());
      if (ckpt_.find(legacy)) return legacy;
    }
  return name;
}

Value* ModelBuilder::weight(const std::string& hf_name, std::vector<int64_t> shape) {
  const std::string name = stored_name(hf_name);
  if (const auto it = weights_.find(name); it != weights_.end()) {
    HFX_CHECK(expected_.at(name) == shape, "weight '", name, "' declared with two shapes");
    return it->second;
  }
  expected_[name] = shape;
  const TensorView* t = ckpt_.find(name);
  Value* v = t && t->shape == shape ? builder_.weight(*t, config_.dtype) : builder_.missing_weight(name, shape, config_.dtype);
  weights_[name] = v;
  return v;
}

Value* ModelBuilder::rows(Value* weight, int64_t begin, int64_t end) {
  return builder_.weight_expr(ConstantData::slice_rows(weight->constant, begin, end), weight->dtype,
                              str(weight->name, "[", begin, ":", end, "]"));
}

Value* ModelBuilder::transposed(Value* weight) {
  return builder_.weight_expr(ConstantData::transpose(weight->constant), weight->dtype, weight->name + ".T");
}

Value* ModelBuilder::row_blocks(Value* weight, int64_t stride, int64_t offset, int64_t length, int64_t count) {
  std::vector<std::shared_ptr<const ConstantData>> blocks;
  for (int64_t i = 0; i < count; ++i)
    blocks.push_back(ConstantData::slice_rows(weight->constant, i * stride + offset, i * stride + offset + length));
  return builder_.weight_expr(ConstantData::stack(std::move(blocks)), weight->dtype,
                              str(weight->name, "[", offset, "::", stride, "]"));
}

Value* ModelBuilder::stack(const std::vector<Value*>& weights) {
  std::vector<std::shared_ptr<const ConstantData>> parts;
  for (const Value* w : weights) parts.push_back(w->constant);
  return builder_.weight_expr(ConstantData::stack(std::move(parts)), weights.front()->dtype,
                              str("stack(", weights.front()->name, ",...)"));
}

Value* ModelBuilder::view(Value* weight, std::vector<int64_t> shape, std::string name) {
  if (name.empty()) name = str(weight->name, shape_string(shape));
  return builder_.weight_expr(ConstantData::view(weight->constant, shape), weight->dtype, name);
}

Value* ModelBuilder::interleave_rows(Value* a, Value* b) {
  return builder_.weight_expr(ConstantData::interleave_rows(a->constant, b->constant), a->dtype,
                              str("interleave(", a->name, ",", b->name, ")"));
}

Value* ModelBuilder::mxfp4(const std::string& blocks, const std::string& scales, std::vector<int64_t> scales_shape) {
  std::vector<int64_t> blocks_shape = scales_shape;
  blocks_shape.push_back(16);
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < scales_shape.size(); ++i) rows *= scales_shape[i];
  const int64_t groups = scales_shape.back();
  // Each part as [rows, columns] bytes; a missing or mis-shaped one (check_checkpoint reports it)
  // as zeros meanwhile.
  auto raw = [&](const std::string& name, const std::vector<int64_t>& shape, int64_t cols) {
    expected_[name] = shape;
    raw_[name] = DType::U8;
    const TensorView* t = ckpt_.find(name);
    if (!t || t->shape != shape || t->dtype != DType::U8)
      return ConstantData::of_bytes(std::vector<std::byte>(static_cast<size_t>(rows * cols)), DType::U8, {rows, cols});
    return ConstantData::view(ConstantData::of_tensor(*t), {rows, cols});
  };
  return builder_.weight_expr(ConstantData::mxfp4(raw(blocks, blocks_shape, groups * 16), raw(scales, scales_shape, groups)),
                              config_.dtype,
                              blocks.substr(0, blocks.size() - std::string("_blocks").size()));
}

Value* ModelBuilder::plus(Value* weight, double scalar) {
  return builder_.weight_expr(ConstantData::add_scalar(weight->constant, scalar), weight->dtype,
                              str(weight->name, "+", scalar));
}

std::unique_ptr<Graph> ModelBuilder::finish() {
  check_checkpoint();
  return std::move(graph_);
}

std::vector<std::string> ModelBuilder::taken_inputs(const std::vector<std::string>& declared,
                                                  const std::vector<std::string>& defaults) const {
  if (config_.inputs.empty()) return defaults;
  for (const std::string& name : config_.inputs)
    if (std::find(declared.begin(), declared.end(), name) == declared.end()) {
      std::string list;
      for (const std::string& d : declared) list += (list.empty() ? "" : ", ") + d;
      fail("inputs: '", name, "' is not an input of this model (it takes ", list, ")");
    }
  return config_.inputs;
}

}  // namespace hfx
