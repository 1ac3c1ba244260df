#include "models/sentence_pooling.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "core/shape.h"
#include "io/json_config.h"
#include "models/blocks.h"

namespace hfx {
namespace {

using Mode = SentencePooling::Mode;

// sentence-transformers' mode names, and the boolean keys of its configs before v6.
struct ModeName {
  Mode mode;
  const char* name;
  const char* legacy_key;
};
constexpr ModeName kModes[] = {
    {Mode::Cls, "cls", "pooling_mode_cls_token"},
    {Mode::Max, "max", "pooling_mode_max_tokens"},
    {Mode::Mean, "mean", "pooling_mode_mean_tokens"},
    {Mode::MeanSqrtLen, "mean_sqrt_len_tokens", "pooling_mode_mean_sqrt_len_tokens"},
    {Mode::WeightedMean, "weightedmean", "pooling_mode_weightedmean_tokens"},
    {Mode::LastToken, "lasttoken", "pooling_mode_lasttoken"},
};

Mode mode_named(const JsonConfig& c, const std::string& name) {
  for (const ModeName& m : kModes)
    if (name == m.name) return m.mode;
  c.invalid("pooling_mode", "\"" + name + "\" is not a pooling mode (cls, max, mean, mean_sqrt_len_tokens, "
                                          "weightedmean, lasttoken)");
}

std::vector<Mode> pooling_modes(const JsonConfig& c) {
  std::vector<Mode> modes;
  if (c.has("pooling_mode")) {
    const nlohmann::json& given = c.at("pooling_mode");
    if (given.is_string()) return {mode_named(c, given.get<std::string>())};
    if (!given.is_array()) c.invalid("pooling_mode", "must be a mode name or a list of them");
    for (const auto& m : given) {
      if (!m.is_string()) c.invalid("pooling_mode", "must be a mode name or a list of them");
      modes.push_back(mode_named(c, m.get<std::string>()));
    }
  } else {
    for (const ModeName& m : kModes)
      if (c.boolean(m.legacy_key, false)) modes.push_back(m.mode);
  }
  if (modes.empty()) modes.push_back(Mode::Mean);  // sentence-transformers' fallback when none is set
  return modes;
}

// The last word of a module's type: "sentence_transformers.models.Pooling" -> "Pooling".
std::string module_kind(const std::string& type) { return type.substr(type.rfind('.') + 1); }

// A module folder named relative to the checkpoint, not leaving it.
bool inside_checkpoint(const std::filesystem::path& path) {
  return !path.empty() && path.is_relative() &&
         std::none_of(path.begin(), path.end(), [](const std::filesystem::path& part) { return part == ".."; });
}

// A Dense module's weights, renamed under its folder's name and kept open for as long as the
// graph's constants read them.
struct DenseWeights {
  std::unique_ptr<SafetensorsSource> source;
  TensorView linear, bias, residual;
};

// torch.nn activation classes a Dense module names, as the blocks' activation names ("" : none).
std::string dense_activation(const JsonConfig& c) {
  // sentence-transformers' default is Tanh when the config names none.
  const std::string name = c.string("activation_function", "torch.nn.modules.activation.Tanh");
  static const std::pair<const char*, const char*> kKnown[] = {
      {"torch.nn.modules.linear.Identity", ""},         {"torch.nn.modules.activation.Tanh", "tanh"},
      {"torch.nn.modules.activation.ReLU", "relu"},     {"torch.nn.modules.activation.Sigmoid", "sigmoid"},
      {"torch.nn.modules.activation.GELU", "gelu"},     {"torch.nn.modules.activation.SiLU", "silu"},
  };
  for (const auto& [torch_name, ours] : kKnown)
    if (name == torch_name) return ours;
  c.invalid("activation_function", "\"" + name + "\" is not supported (Identity, Tanh, ReLU, Sigmoid, GELU, SiLU)");
}

// One of the Dense module's tensors, checked and renamed "<folder>.<name>".
TensorView dense_tensor(const SafetensorsSource& source, const std::filesystem::path& folder, const std::string& name,
                        std::vector<int64_t> shape) {
  const TensorView* t = source.find(name);
  if (!t) fail(folder.string(), ": no tensor '", name, "' (the Dense module's weights)");
  if (t->shape != shape)
    fail(folder.string(), ": '", name, "' has shape ", shape_string(t->shape), ", the module's config says ", shape_string(shape));
  TensorView renamed = *t;
  renamed.name = folder.filename().string() + "." + name;
  return renamed;
}

// sentence-transformers' Dense: activation(linear(x)), plus x (or its projection) with use_residual.
Value* dense_module(Builder& b, const std::filesystem::path& folder, Value* x) {
  const std::filesystem::path config_file = folder / "config.json";
  const JsonConfig c(read_json_file(config_file), config_file.string());
  const int64_t in = c.positive("in_features"), out = c.positive("out_features");
  const bool bias = c.boolean("bias", true), residual = c.boolean("use_residual", false);
  const std::string act = dense_activation(c);
  for (const char* key : {"module_input_name", "module_output_name"})
    if (c.string(key, "sentence_embedding") != "sentence_embedding")
      c.invalid(key, "is not supported: hfexport's Dense reads and writes the sentence_embedding");
  const int64_t width = x->shape[1].value();
  if (in != width)
    c.invalid("in_features", str("is ", in, ", but what reaches the module is ", width, " wide"));
  if (!std::filesystem::exists(folder / "model.safetensors") && std::filesystem::exists(folder / "pytorch_model.bin"))
    fail(folder.string(), ": the Dense module's weights are pytorch_model.bin; hfexport reads safetensors "
                          "(re-save the model with sentence-transformers >= 3)");
  auto weights = std::make_shared<DenseWeights>();
  weights->source = std::make_unique<SafetensorsSource>(folder);
  weights->linear = dense_tensor(*weights->source, folder, "linear.weight", {out, in});
  if (bias) weights->bias = dense_tensor(*weights->source, folder, "linear.bias", {out});
  if (residual && in != out) weights->residual = dense_tensor(*weights->source, folder, "residual.weight", {out, in});
  b.set_scope(folder.filename().string());
  const DType t = x->dtype;
  Value* y = b.linear(x, b.weight(weights->linear, t, weights), bias ? b.weight(weights->bias, t, weights) : nullptr);
  if (!act.empty()) y = activation(b, act, y);
  if (residual) y = b.add(y, in == out ? x : b.linear(x, b.weight(weights->residual, t, weights)));
  return y;
}

// Token i of each row where `pick` [batch, sequence] is 1 (one per row, or none: zeros).
Value* picked_token(Builder& b, Value* tokens, Value* pick) {
  return b.reduce(OpKind::ReduceSum, b.mul(tokens, b.unsqueeze(pick, {2})), {1}, false);
}

Value* pool(Builder& b, Mode mode, Value* tokens, Value* mask, Value* mask_i64) {
  const DType t = tokens->dtype;
  Value* expanded = b.unsqueeze(mask, {2});  // [batch, sequence, 1]
  auto clamped = [&](Value* count) { return b.max(count, b.scalar(1e-9, t)); };
  switch (mode) {
    case Mode::Cls:  // the first real token (index 0 with right padding)
    case Mode::LastToken: {  // the last real token
      Value* seen = b.cumsum(mask_i64, 1);
      Value* target = mode == Mode::Cls ? b.const_i64({1}) : b.reduce(OpKind::ReduceSum, mask_i64, {1}, true);
      Value* at = b.logical_and(b.compare(OpKind::Equal, seen, target), b.compare(OpKind::Greater, mask_i64, b.const_i64({0})));
      return picked_token(b, tokens, b.cast(at, t));
    }
    case Mode::Max: {
      Value* lowest = b.scalar(-std::numeric_limits<double>::infinity(), t);
      Value* kept = b.where(b.compare(OpKind::Greater, expanded, b.scalar(0.0, t)), tokens, lowest);
      return b.reduce(OpKind::ReduceMax, kept, {1}, false);
    }
    case Mode::Mean:
    case Mode::MeanSqrtLen: {
      Value* sum = b.reduce(OpKind::ReduceSum, b.mul(tokens, expanded), {1}, false);
      Value* count = clamped(b.reduce(OpKind::ReduceSum, expanded, {1}, false));
      return b.div(sum, mode == Mode::Mean ? count : b.unary(OpKind::Sqrt, count));
    }
    case Mode::WeightedMean: {  // token i weighs i + 1
      Value* count = b.gather(b.shape_of(mask_i64), b.const_i64({1}), 0);
      Value* positions = b.range(b.const_i64({1}), b.add(count, b.const_i64({1})), b.const_i64({1}), mask->shape[1]);
      Value* weights = b.mul(expanded, b.unsqueeze(b.cast(positions, t), {0, 2}));
      Value* sum = b.reduce(OpKind::ReduceSum, b.mul(tokens, weights), {1}, false);
      return b.div(sum, clamped(b.reduce(OpKind::ReduceSum, weights, {1}, false)));
    }
  }
  fail("internal error: pooling mode");
}

}  // namespace

std::optional<SentencePooling> read_sentence_pooling(const Checkpoint& ckpt) {
  const std::filesystem::path modules_file = ckpt.dir() / "modules.json";
  if (ckpt.dir().empty() || !std::filesystem::is_regular_file(modules_file)) return std::nullopt;
  const nlohmann::json modules = read_json_value(modules_file);
  if (!modules.is_array()) fail(modules_file.string(), ": must be a list of modules");
  std::optional<SentencePooling> pooling;
  auto text = [&](const nlohmann::json& module, const char* key) {
    if (!module.is_object() || !module.contains(key) || !module.at(key).is_string())
      fail(modules_file.string(), ": each module must have a string '", key, "'");
    return module.at(key).get<std::string>();
  };
  for (const auto& module : modules) {
    const std::string type = text(module, "type"), path = text(module, "path");
    const std::string kind = module_kind(type);
    if (kind == "Transformer") continue;
    if (kind == "Pooling") {
      const std::filesystem::path config = ckpt.dir() / path / "config.json";
      const JsonConfig c(read_json_file(config), config.string());
      pooling = SentencePooling{pooling_modes(c), false, {}};
      if (!c.boolean("include_prompt", true))
        pooling->unsupported = config.string() + ": include_prompt: false (prompt tokens left out of the pooling) "
                                                 "is not supported";
    } else if (kind == "Normalize" && pooling) {  // L2 over the pooled vector
      pooling->normalize = true;
    } else if (kind == "Dense" && pooling && !pooling->normalize && inside_checkpoint(path)) {
      pooling->dense.push_back(ckpt.dir() / path);
    } else if (pooling && pooling->unsupported.empty()) {
      pooling->unsupported = str(modules_file.string(), ": module '", type, "' (", path.empty() ? "." : path,
                                 ") is not supported here (Transformer, Pooling, then Dense modules, then Normalize are)");
    } else if (!pooling) {
      fail(modules_file.string(), ": module '", type, "' (", path.empty() ? "." : path,
           ") comes before any Pooling module: not a sentence-embedding pipeline hfexport builds");
    }
  }
  return pooling;
}

void write_sentence_transformers_files(const Checkpoint& ckpt, const std::filesystem::path& out) {
  namespace fs = std::filesystem;
  const fs::path modules_file = ckpt.dir() / "modules.json";
  if (ckpt.dir().empty() || !fs::is_regular_file(modules_file)) return;
  nlohmann::json modules = read_json_value(modules_file);
  if (!modules.is_array()) return;  // read_sentence_pooling refused it when the task needed it
  std::vector<fs::path> folders;
  if (fs::is_regular_file(ckpt.dir() / "config_sentence_transformers.json"))
    folders.emplace_back("config_sentence_transformers.json");
  for (auto& module : modules) {  // by reference: the Transformer's path is rewritten in place
    if (!module.is_object() || !module.contains("path") || !module.at("path").is_string()) continue;
    if (module.contains("type") && module.at("type").is_string() &&
        module_kind(module.at("type").get<std::string>()) == "Transformer") {
      module["path"] = "";  // the export's own files
      continue;
    }
    const fs::path path = module.at("path").get<std::string>();  // a module folder inside the checkpoint
    if (inside_checkpoint(path) && fs::is_directory(ckpt.dir() / path)) folders.push_back(path);
  }
  for (const fs::path& name : folders) {
    std::error_code ec;
    fs::copy(ckpt.dir() / name, out / name, fs::copy_options::recursive, ec);
    if (ec) fail((out / name).string(), ": cannot copy ", (ckpt.dir() / name).string(), ": ", ec.message());
  }
  std::ofstream file(out / "modules.json");
  file << modules.dump(2) << "\n";
  if (!file) fail((out / "modules.json").string(), ": cannot write");
}

Task resolve_task_with_pooling(const std::string& configured, const std::vector<std::string>& architectures,
                               Task fallback, const std::optional<SentencePooling>& pooling, const Checkpoint& ckpt) {
  const Task task = configured.empty() && pooling ? Task::SentenceSimilarity
                                                  : resolve_task(configured, architectures, fallback);
  if (task != Task::SentenceSimilarity) return task;
  if (!pooling)
    fail("task: sentence-similarity needs a sentence-transformers checkpoint (modules.json with a Pooling module) in ",
         ckpt.dir().string());
  if (!pooling->unsupported.empty())
    fail(pooling->unsupported, " (--task feature-extraction exports the hidden states without the pooling)");
  return task;
}

nlohmann::json sentence_pooling_json(const std::optional<SentencePooling>& pooling) {
  if (!pooling || !pooling->unsupported.empty() || !pooling->dense.empty()) return nullptr;
  nlohmann::json modes = nlohmann::json::array();
  for (Mode mode : pooling->modes)
    for (const ModeName& m : kModes)
      if (m.mode == mode) modes.push_back(m.name);
  return {{"pooling_mode", modes}, {"normalize", pooling->normalize}};
}

Value* sentence_embedding(Builder& b, const SentencePooling& pooling, Value* tokens, Value* attention_mask) {
  const DType t = tokens->dtype;
  // Without a mask every token counts: ones of the tokens' [batch, sequence].
  Value* mask_i64 = attention_mask;
  if (!mask_i64) {
    Value* batch_sequence = b.gather(b.shape_of(tokens), b.const_i64({0, 1}, {2}), 0);
    mask_i64 = b.expand(b.const_i64({1}), batch_sequence, {tokens->shape[0], tokens->shape[1]});
  }
  Value* mask = b.cast(mask_i64, t);
  std::vector<Value*> parts;
  for (Mode mode : pooling.modes) parts.push_back(pool(b, mode, tokens, mask, mask_i64));
  Value* x = parts.size() == 1 ? parts.front() : b.concat(parts, 1);
  for (const std::filesystem::path& folder : pooling.dense) x = dense_module(b, folder, x);
  if (!pooling.normalize) return x;
  b.set_scope("pooling");
  // F.normalize: x / max(||x||, 1e-12)
  Value* norm = b.unary(OpKind::Sqrt, b.reduce(OpKind::ReduceSum, b.mul(x, x), {1}, true));
  return b.div(x, b.max(norm, b.scalar(1e-12, t)));
}

}  // namespace hfx
