#include "core/export_config.h"

#include "core/task.h"

#include <set>

#include "core/error.h"

namespace hfx {

using nlohmann::json;

std::string json_field(std::string_view field) { return std::string(field); }

namespace {

const char* quantization_weights(int bits) { return bits == 4 ? "int4" : bits == 8 ? "int8" : nullptr; }

const char* compute_name(WeightQuantization::Compute c) {
  switch (c) {
    case WeightQuantization::Compute::Auto: return "auto";
    case WeightQuantization::Compute::Int8: return "int8";
    case WeightQuantization::Compute::Float: return "float";
  }
  return "auto";
}

// Typed reads of one JSON object, every error naming where the object came from and the key.
class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) fail(where_, ": must be a JSON object");
  }
  // Unknown keys are mistakes (a misspelt option must not be ignored).
  void only(std::initializer_list<const char*> known) const {
    const std::set<std::string> names(known.begin(), known.end());
    for (const auto& [key, value] : j_.items())
      if (!names.count(key)) fail(where_, ": unknown key '", key, "'");
  }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& at(const char* key) const { return j_.at(key); }
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_string()) fail(where_, ": '", key, "' must be a string");
    return at(key).get<std::string>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_boolean()) fail(where_, ": '", key, "' must be true or false");
    return at(key).get<bool>();
  }
  int64_t integer(const char* key, int64_t fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_number_integer()) fail(where_, ": '", key, "' must be an integer");
    return at(key).get<int64_t>();
  }
  Fields object(const char* key) const { return Fields(has(key) ? at(key) : kEmpty, where_ + "." + key); }
  const std::string& where() const { return where_; }
  const json& raw() const { return j_; }

 private:
  static inline const json kEmpty = json::object();
  const json& j_;
  std::string where_;
};

WeightQuantization parse_quantization(const Fields& q) {
  q.only({"weights", "group_size", "compute"});
  WeightQuantization out;
  const std::string weights = q.string("weights", "");
  if (weights == "int4") out.bits = 4;
  else if (weights == "int8") out.bits = 8;
  else if (!weights.empty()) fail(q.where(), ": 'weights' must be \"int4\" or \"int8\", got \"", weights, "\"");
  out.group_size = q.integer("group_size", out.group_size);
  const std::string compute = q.string("compute", "auto");
  if (compute == "int8") out.compute = WeightQuantization::Compute::Int8;
  else if (compute == "float") out.compute = WeightQuantization::Compute::Float;
  else if (compute != "auto") fail(q.where(), ": 'compute' must be \"auto\", \"int8\" or \"float\", got \"", compute, "\"");
  return out;
}

}  // namespace

ExportConfig ExportConfig::from_json(const json& j, const std::string& where) {
  const Fields f(j, where);
  f.only(
      {"format", "export_format", "dtype", "dynamic", "dims", "inputs", "task", "generation", "quantization", "backend"});
  ExportConfig c;
  // AutoExportConfig.from_dict spells it export_format.
  c.format = f.string("format", f.string("export_format", c.format));
  const std::string dtype = f.string("dtype", "float32");
  const auto parsed = dtype_from_name(dtype);
  if (!parsed || !is_float(*parsed) || *parsed == DType::F64)
    fail(where, ": 'dtype' must be float32, float16 or bfloat16, got \"", dtype, "\"");
  c.dtype = *parsed;
  c.dynamic = f.boolean("dynamic", true);
  const Fields dims = f.object("dims");
  for (const auto& [name, range] : dims.raw().items()) {
    const Fields r(range, dims.where() + "." + name);
    r.only({"min", "max"});
    c.dims[name] = {r.integer("min", 1), r.integer("max", INT64_MAX)};
  }
  if (f.has("inputs")) {
    const json& names = f.at("inputs");
    if (!names.is_array()) fail(where, ": 'inputs' must be a list of input names");
    for (const json& name : names) {
      if (!name.is_string()) fail(where, ": 'inputs' must be a list of input names");
      c.inputs.push_back(name.get<std::string>());
    }
  }
  c.task = f.string("task", "");
  const Fields g = f.object("generation");
  g.only({"enabled", "cache_implementation", "max_cache_len", "multi_token_decode", "batch_size"});
  // Naming a cache implementation or decode mode asks for generation components.
  const bool implied = g.has("cache_implementation") || g.boolean("multi_token_decode", false);
  c.generation.enabled = g.boolean("enabled", implied);
  c.generation.cache_implementation = g.string("cache_implementation", c.generation.cache_implementation);
  c.generation.max_cache_len = g.integer("max_cache_len", 0);
  c.generation.multi_token_decode = g.boolean("multi_token_decode", false);
  c.generation.batch_size = g.integer("batch_size", 1);
  c.quantization = parse_quantization(f.object("quantization"));
  if (f.has("backend")) {
    if (!f.at("backend").is_object()) fail(where, ": 'backend' must be a JSON object");
    c.backend = f.at("backend");
  }
  return c;
}

json ExportConfig::to_json() const {
  json dims_json = json::object();
  for (const auto& [name, r] : dims) dims_json[name] = {{"min", r.min}, {"max", r.max}};
  json q = {{"weights", nullptr}, {"group_size", quantization.group_size}, {"compute", compute_name(quantization.compute)}};
  if (const char* w = quantization_weights(quantization.bits)) q["weights"] = w;
  json out = {{"format", format},
          {"dtype", std::string(dtype_name(dtype))},
          {"dynamic", dynamic},
          {"dims", dims_json},
          {"generation",
           {{"enabled", generation.enabled},
            {"cache_implementation", generation.cache_implementation},
            {"max_cache_len", generation.max_cache_len},
            {"multi_token_decode", generation.multi_token_decode},
            {"batch_size", generation.batch_size}}},
          {"quantization", q},
          {"backend", backend}};
  if (!inputs.empty()) out["inputs"] = inputs;  // absent when unset: earlier manifests stay as they were
  if (!task.empty()) out["task"] = task;
  return out;
}

void ExportConfig::validate(const FieldSpelling& spell) const {
  const GenerationConfig& g = generation;
  const std::string cache = spell("generation.cache_implementation");
  if (g.cache_implementation != "dynamic" && g.cache_implementation != "static")
    fail(cache, ": '", g.cache_implementation, "' is not a cache implementation (dynamic, static)");
  if (!g.enabled && (g.multi_token_decode || g.static_cache()))
    fail(g.multi_token_decode ? spell("generation.multi_token_decode") : cache, " needs ", spell("generation.enabled"));
  const std::string max_len = spell("generation.max_cache_len"), batch = spell("generation.batch_size");
  if (g.static_cache() && g.max_cache_len <= 0) fail(cache, " needs ", max_len, " N (N > 0)");
  if (!g.static_cache() && g.max_cache_len != 0) fail(max_len, " applies only with ", cache);
  if (g.batch_size <= 0) fail(batch, " must be positive, got ", g.batch_size);
  if (!g.static_cache() && g.batch_size != 1) fail(batch, " applies only with ", cache, " (other graphs take any batch)");

  const WeightQuantization& q = quantization;
  const std::string group = spell("quantization.group_size");
  if (!q.enabled() && (q.group_size != WeightQuantization{}.group_size || q.compute != WeightQuantization::Compute::Auto))
    fail(group, " and ", spell("quantization.compute"), " apply only with ", spell("quantization.weights"));
  check_weight_quantization(q, spell("quantization.weights"), group);

  if (!inputs.empty()) {
    const std::set<std::string> unique(inputs.begin(), inputs.end());
    if (unique.size() != inputs.size()) fail(spell("inputs"), ": an input is named twice");
    // The step ExecuTorch's LLM runners call: tokens (a vision-language model's text decoder: their
    // embeddings) and their cache slots.
    const bool cache_position_form =
        g.static_cache() && (unique == std::set<std::string>{"input_ids", "cache_position"} ||
                             unique == std::set<std::string>{"inputs_embeds", "cache_position"});
    if (g.enabled && !cache_position_form)
      fail(spell("inputs"), " applies only to the plain forward, or is input_ids,cache_position (inputs_embeds,"
           "cache_position for a vision-language model) with a static cache (generation components take every input)");
  }
  if (!task.empty()) {
    const auto t = task_named(task);
    if (!t) fail(spell("task"), ": '", task, "' is not a task (", task_names(), ")");
    if (g.enabled && !is_generation_task(*t))
      fail(spell("generation.enabled"), " exports a decode loop, which task ", task, " does not have");
  }
  for (const auto& [name, r] : dims)
    if (r.min < 0 || r.min > r.max)
      fail(spell("dims"), ": '", name, "' needs 0 <= min <= max, got [", r.min, ", ", r.max, "]");
}

DimRange ExportConfig::dim(const std::string& name, DimRange defaults) const {
  const auto it = dims.find(name);
  if (it != dims.end()) return it->second;
  return defaults;
}

}  // namespace hfx
