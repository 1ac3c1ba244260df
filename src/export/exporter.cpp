#include "export/exporter.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "backends/backend.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/output_dir.h"
#include "models/registry.h"

namespace hfx {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Files copied next to the export so that it is self-contained.
constexpr const char* kCompanionFiles[] = {
    "config.json",         "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "tokenizer.model",    "vocab.json",     "merges.txt",
    "added_tokens.json",   "chat_template.jinja",    "chat_template.json"};

json shape_json(const Shape& shape) {
  json out = json::array();
  for (const Dim& d : shape) {
    if (d.is_static()) out.push_back(d.value());
    else out.push_back(d.symbol()->name);
  }
  return out;
}

json tensors_json(const std::vector<TensorSpec>& specs) {
  json out = json::array();
  for (const auto& s : specs)
    out.push_back({{"name", s.name}, {"dtype", std::string(dtype_name(s.dtype))}, {"shape", shape_json(s.shape)}});
  return out;
}

void progress(const std::string& message) {
  if (::isatty(STDERR_FILENO)) std::cerr << "\r\033[K" << message << std::flush;
}

void check_generation_options(const GenerationOptions& g) {
  if (!g.enabled && (g.multi_token || g.static_cache))
    fail(g.multi_token ? "--multi-token-decode" : "--static-cache", " needs --for-generation");
  if (g.static_cache && g.max_cache_len <= 0) fail("--static-cache needs --max-cache-len N (N > 0)");
  if (!g.static_cache && g.max_cache_len != 0) fail("--max-cache-len applies only with --static-cache");
  if (g.batch_size <= 0) fail("--batch-size must be positive, got ", g.batch_size);
  if (!g.static_cache && g.batch_size != 1) fail("--batch-size applies only with --static-cache (other graphs take any batch)");
}

// Token ids that end generation: generation_config.json wins over config.json, as in transformers.
json eos_token_ids(const Checkpoint& ckpt) {
  json ids = json::array();
  const JsonConfig* sources[] = {ckpt.generation_config() ? &*ckpt.generation_config() : nullptr, &ckpt.config()};
  for (const JsonConfig* src : sources) {
    if (!src || !src->has("eos_token_id")) continue;
    const json& v = src->at("eos_token_id");
    if (v.is_number_integer()) ids.push_back(v);
    else if (v.is_array())
      for (const auto& id : v)
        if (id.is_number_integer()) ids.push_back(id);
    break;
  }
  return ids;
}

json generation_json(const GenerationOptions& g, const ExportModel& model, const Checkpoint& ckpt,
                     const json& cache_pairs, bool stateful) {
  json out = {{"cache", stateful ? "stateful" : g.static_cache ? "static" : "dynamic"},
              {"multi_token_decode", g.static_cache || g.multi_token},
              {"cache_pairs", cache_pairs},
              {"eos_token_id", eos_token_ids(ckpt)}};
  json components = json::array();
  for (const Component& c : model.components) components.push_back(c.name);
  out["components"] = components;
  if (g.static_cache) {
    out["max_cache_len"] = g.max_cache_len;
    out["batch_size"] = g.batch_size;
  }
  const auto& gen = ckpt.generation_config();
  for (const char* key : {"bos_token_id", "pad_token_id"})
    if (gen && gen->has(key)) out[key] = gen->at(key);
  return out;
}

}  // namespace

void run_export(const ExportRequest& req) {
  const Checkpoint ckpt(req.model_dir);
  const std::string model_type = ckpt.config().string("model_type", "");
  if (model_type.empty()) fail(ckpt.config().where(), ": required key 'model_type' is missing");
  const ArchBuilder build = find_arch(model_type);
  std::unique_ptr<Backend> backend = make_backend(req.format);
  const BackendOptions backend_options{req.dtype, req.generation.static_cache, req.op_profile, req.quantize};
  backend->check_options(backend_options);

  progress("hfexport: building graph");
  check_generation_options(req.generation);
  GenerationOptions generation = req.generation;
  if (generation.enabled && backend->single_generation_graph()) generation.multi_token = true;
  ExportModel model = build(ckpt, BuildOptions{backend->graph_dtype(backend_options), generation});
  AtomicOutputDir out(req.out_dir, req.overwrite);

  json manifest = {{"schema_version", 1},
                   {"producer", std::string("hfexport ") + HFEXPORT_VERSION},
                   {"format", req.format},
                   {"dtype", std::string(dtype_name(req.dtype))},
                   {"source",
                    {{"model_type", model.model_type},
                     {"architectures", model.architectures},
                     {"dtype", std::string(dtype_name(ckpt.dominant_float_dtype()))}}}};
  json components = json::object();
  json dims = json::object();
  json cache_pairs = json::array();
  bool stateful = false;
  std::string quantized_compute;  // as the backend resolved it
  for (Component& c : model.components) {
    progress("hfexport: writing " + c.name);
    for (const Symbol& s : c.graph->symbols()) dims[s.name] = {{"min", s.min}, {"max", s.max}};
    const WrittenComponent w = backend->write(c.name, *c.graph, out.path(), backend_options);
    components[c.name] = {{"file", w.file},
                          {"data_files", w.extra_files},
                          {"inputs", tensors_json(w.inputs)},
                          {"outputs", tensors_json(w.outputs)}};
    stateful = stateful || w.stateful;
    quantized_compute = w.quantization.int8_compute ? "int8" : "float";
    if (req.quantize.enabled())
      components[c.name]["quantized_linears"] = {{"quantized", w.quantization.quantized},
                                                 {"kept_float", w.quantization.kept_float}};
    if (c.name == "decode")
      for (const StatePair& state : c.graph->states) {
        if (w.stateful) cache_pairs.push_back({{"name", state.name}, {"variable", state.name}});
        else cache_pairs.push_back({{"name", state.name}, {"input", state.input->name}, {"output", state.output->name}});
      }
  }
  manifest["components"] = components;
  if (req.quantize.enabled())
    manifest["quantization"] = {{"weights", "int" + std::to_string(req.quantize.bits)},
                                {"group_size", req.quantize.group_size},
                                {"scheme", "symmetric, per group of input features, round to nearest even"},
                                {"compute", quantized_compute}};
  manifest["dims"] = dims;
  if (req.generation.enabled)
    manifest["generation"] = generation_json(generation, model, ckpt, cache_pairs, stateful);
  {
    std::ofstream f(out.path() / "export.json");
    f << manifest.dump(2) << "\n";
    if (!f.flush()) fail((out.path() / "export.json").string(), ": cannot write");
  }
  for (const char* name : kCompanionFiles) {
    const fs::path src = ckpt.dir() / name;
    std::error_code ec;
    if (fs::exists(src) && !fs::copy_file(src, out.path() / name, ec))
      fail(src.string(), ": cannot copy into the export: ", ec.message());
  }
  out.commit();
  progress("");
}

void inspect_export(const fs::path& out_dir) {
  const fs::path manifest_path = out_dir / "export.json";
  if (!fs::exists(manifest_path)) fail(out_dir.string(), ": not an hfexport output (no export.json)");
  const JsonConfig m(read_json_file(manifest_path), manifest_path.string());
  std::cout << "format: " << m.string("format", "?") << "  dtype: " << m.string("dtype", "?")
            << "  producer: " << m.string("producer", "?") << "\n";
  if (const auto source = m.object("source"))
    std::cout << "source: " << source->string("model_type", "?") << " (" << source->string("dtype", "?") << ")\n";
  if (const auto dims = m.object("dims"))
    for (const auto& [name, d] : dims->json().items())
      std::cout << "dim " << name << ": [" << d.value("min", 0) << ", " << d.value("max", 0) << "]\n";
  const auto components = m.object("components");
  if (!components) fail(manifest_path.string(), ": no components");
  for (const auto& [name, c] : components->json().items()) {
    std::cout << "component " << name << ": " << c.value("file", "?") << "\n";
    for (const char* dir : {"inputs", "outputs"})
      for (const auto& t : c.value(dir, json::array()))
        std::cout << "  " << (dir[0] == 'i' ? "in  " : "out ") << t.value("name", "?") << " "
                  << t.value("dtype", "?") << " " << t.value("shape", json::array()).dump() << "\n";
  }
}

}  // namespace hfx
