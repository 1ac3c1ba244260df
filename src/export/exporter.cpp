#include "export/exporter.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "backends/backend.h"
#include "core/error.h"
#include "core/progress.h"
#include "io/checkpoint.h"
#include "io/output_dir.h"
#include "io/manifest.h"
#include "models/registry.h"
#include "models/sentence_pooling.h"

namespace hfx {

namespace fs = std::filesystem;
using nlohmann::json;
namespace key = manifest::key;

namespace {

// Files copied next to the export so that it is self-contained.
constexpr const char* kCompanionFiles[] = {
    "config.json",         "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "tokenizer.model",    "vocab.json",     "merges.txt",
    "added_tokens.json",   "chat_template.jinja",    "chat_template.json",
    "sentence_bert_config.json",  // sentence-transformers' max_seq_length and do_lower_case
    "preprocessor_config.json",  // a feature extractor's or image processor's settings
    "processor_config.json"};    // a multimodal processor's (LLaVA's image token and patch size)

json shape_json(const Shape& shape) {
  json out = json::array();
  for (const Dim& d : shape) {
    if (d.is_static()) out.push_back(d.value());
    else out.push_back(d.symbol()->name);
  }
  return out;
}

// Every state a component carries: what it is, how a call updates it, and where it enters and
// leaves the component (the runtime's variable for a stateful component).
json states_json(const Graph& graph, const WrittenComponent& written) {
  auto has = [](const std::vector<TensorSpec>& specs, const Value* v) {
    return v && std::any_of(specs.begin(), specs.end(), [&](const TensorSpec& t) { return t.name == v->name; });
  };
  json out = json::array();
  for (const StatePair& pair : graph.state_pairs) {
    const auto decl = std::find_if(graph.states.begin(), graph.states.end(),
                                   [&](const StateDecl& s) { return s.name == pair.name; });
    HFX_CHECK(decl != graph.states.end(), "state pair ", pair.name, " has no declaration");
    json s = {{"name", pair.name}, {"kind", state_kind_name(decl->kind)}, {"policy", state_policy_name(decl->update)}};
    if (decl->update == StateUpdatePolicy::Ring) s["window"] = decl->window;
    const bool input = has(written.inputs, pair.input), output = has(written.outputs, pair.output);
    if (input) s["input"] = pair.input->name;
    if (output) s["output"] = pair.output->name;
    // Carried without an input: the runtime keeps it (an OpenVINO variable, a .pte method buffer);
    // an input without its output: the caller's tensor, updated in place.
    if ((pair.carried() || pair.self_initialised()) && !input) s["variable"] = pair.name;
    if (pair.carried() && input && !output) s["in_place"] = true;
    out.push_back(std::move(s));
  }
  return out;
}

json tensors_json(const std::vector<TensorSpec>& specs) {
  json out = json::array();
  for (const auto& s : specs)
    out.push_back({{"name", s.name}, {"dtype", std::string(dtype_name(s.dtype))}, {"shape", shape_json(s.shape)}});
  return out;
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

// bos_token_id as generate reads it: generation_config.json, else config.json.
ExportWriter::TokenIds token_ids(const Checkpoint& ckpt) {
  ExportWriter::TokenIds ids;
  for (const json& id : eos_token_ids(ckpt)) ids.eos.push_back(id.get<int64_t>());
  const JsonConfig* sources[] = {ckpt.generation_config() ? &*ckpt.generation_config() : nullptr, &ckpt.config()};
  for (const JsonConfig* src : sources)
    if (src && src->has(key::kBosTokenId) && src->at(key::kBosTokenId).is_number_integer()) {
      ids.bos = src->at(key::kBosTokenId).get<int64_t>();
      break;
    }
  return ids;
}

// transformers' own chunk for the gated delta rule's chunked form.
constexpr int64_t kRecurrentPrefillChunk = 64;

json generation_json(const GenerationConfig& g, const ExportModel& model, const Checkpoint& ckpt,
                     const json& cache_pairs, bool stateful, bool shares_buffer, bool keys_by_slot) {
  const std::string_view cache = stateful ? manifest::cache::kStateful
                                 : g.static_cache() ? manifest::cache::kStatic
                                                    : manifest::cache::kDynamic;
  json out = {{key::kCache, cache},
              {key::kMultiTokenDecode, g.static_cache() || g.multi_token_decode},
              {key::kCachePairs, cache_pairs},
              {key::kSharesBuffer, shares_buffer},
              {key::kLogits, g.last_logits_only ? "last" : "all"},
              {key::kEosTokenId, eos_token_ids(ckpt)}};
  json components = json::array();
  for (const Component& c : model.components) components.push_back(c.name());
  out[key::kComponents] = components;
  if (model.rebuild_cache_at_length > 0) out[key::kRebuildCacheAt] = model.rebuild_cache_at_length;
  // A recurrence solved in one piece per call costs more than linearly in the call's length (the
  // gated delta rule's triangular solve, the SSD's decay matrix): runners feed long prompts in
  // calls of this many tokens, where the step graph takes several, so prefill stays linear.
  const bool recurrent = std::ranges::any_of(model.components, [](const Component& c) {
    return std::ranges::any_of(c.graph->states, [](const StateDecl& s) { return s.kind == StateKind::Recurrent; });
  });
  if (recurrent && (g.static_cache() || g.multi_token_decode)) out[key::kPrefillChunk] = kRecurrentPrefillChunk;
  if (keys_by_slot) out[key::kCacheKeyPositions] = "slots";
  if (g.static_cache()) {
    out[key::kMaxCacheLen] = g.max_cache_len;
    out[key::kBatchSize] = g.batch_size;
  }
  const auto& gen = ckpt.generation_config();
  for (const char* k : {key::kBosTokenId, key::kPadTokenId})
    if (gen && gen->has(k)) out[k] = gen->at(k);
  return out;
}

std::string list_of(const std::vector<std::string_view>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + std::string(i);
  return out;
}

// The checks every backend shares, from its declared capabilities.
void check_capabilities(const Backend& backend, const ExportConfig& config, const FieldSpelling& spell) {
  const BackendCapabilities caps = backend.capabilities();
  if (std::find(caps.dtypes.begin(), caps.dtypes.end(), config.dtype) == caps.dtypes.end()) {
    std::vector<std::string_view> names;
    for (DType d : caps.dtypes) names.push_back(dtype_name(d));
    fail(spell("dtype"), ": --format ", backend.format(), " exports ", list_of(names), ", not ", dtype_name(config.dtype),
         caps.dtype_note.empty() ? "" : " (" + caps.dtype_note + ")");
  }
  if (!config.generation.enabled) return;
  // A dynamic cache is the runtime's own (stateful) where the backend keeps state inside the model.
  const std::string_view wanted = config.generation.static_cache() ? manifest::cache::kStatic
                                  : caps.stateful_generation       ? manifest::cache::kStateful
                                                                   : manifest::cache::kDynamic;
  if (std::find(caps.caches.begin(), caps.caches.end(), wanted) == caps.caches.end())
    fail(spell("generation.cache_implementation"), ": --format ", backend.format(), " lowers only ", list_of(caps.caches),
         " caches, not ", config.generation.cache_implementation,
         caps.cache_note.empty() ? "" : " (" + caps.cache_note + ")");
}

// Configured dims must name dims the graphs have: a misspelt one would silently be ignored.
void check_dim_names(const ExportConfig& config, const ExportModel& model, const FieldSpelling& spell) {
  for (const auto& [name, range] : config.dims) {
    if (model.dims.count(name)) continue;
    std::string known;
    for (const auto& d : model.dims) known += (known.empty() ? "" : ", ") + d;
    fail(spell("dims"), ": '", name, "' is not a dim of this export (its dims: ", known, ")");
  }
}

// The model's components with those of each pipeline layout the format writes in place of the
// ones it replaces (at the first one's position).
void use_pipeline_layouts(ExportModel& model, const BackendCapabilities& caps) {
  for (PipelineLayout& layout : model.pipeline_layouts) {
    if (std::ranges::find(caps.pipeline_layouts, layout.pipeline) == caps.pipeline_layouts.end()) continue;
    std::vector<Component> components;
    bool placed = false;
    for (Component& c : model.components) {
      if (std::ranges::find(layout.replaces, c.role) == layout.replaces.end()) {
        components.push_back(std::move(c));
      } else if (!placed) {
        for (Component& part : layout.components) components.push_back(std::move(part));
        placed = true;
      }
    }
    model.components = std::move(components);
  }
  model.pipeline_layouts.clear();
}

}  // namespace

void run_passes(const Backend& backend, const ExportConfig& config, const std::string& component, Graph& graph,
                PassReport& report, bool verbose) {
  for (const Pass& pass : backend.passes(config)) {
    const auto start = std::chrono::steady_clock::now();
    pass.run(graph, report);
#ifndef NDEBUG
    verify(graph);
#endif
    if (verbose) {
      const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
      std::cerr << "hfexport: " << component << ": pass " << pass.name << " " << std::fixed << std::setprecision(2)
                << ms.count() << " ms\n";
    }
  }
  verify(graph);
}

namespace {

// The export of a validated config.
void export_checkpoint(const Checkpoint& ckpt, const fs::path& out_dir, const ExportConfig& config, const ExportRun& run);

}  // namespace

// The config is checked before the checkpoint is read: option errors need no I/O.
void run_export(const fs::path& model_dir, const fs::path& out_dir, const ExportConfig& config, const ExportRun& run) {
  config.validate(run.spell);
  export_checkpoint(Checkpoint(model_dir), out_dir, config, run);
}

void run_export(const Checkpoint& ckpt, const fs::path& out_dir, const ExportConfig& config, const ExportRun& run) {
  config.validate(run.spell);
  export_checkpoint(ckpt, out_dir, config, run);
}

namespace {

// transformers 5 saves a multimodal processor's image processor inside processor_config.json;
// the runtimes' pipelines (OpenVINO GenAI's VLMPipeline, onnxruntime-genai) and 4.x read it from
// preprocessor_config.json, which the export then writes from that entry.
void write_image_processor_file(const Checkpoint& ckpt, const fs::path& out) {
  const fs::path processor = ckpt.dir() / "processor_config.json";
  if (ckpt.dir().empty() || fs::exists(ckpt.dir() / "preprocessor_config.json") || !fs::is_regular_file(processor)) return;
  const json settings = read_json_value(processor);
  if (!settings.is_object() || !settings.contains("image_processor") || !settings.at("image_processor").is_object()) return;
  std::ofstream file(out / "preprocessor_config.json");
  file << settings.at("image_processor").dump(2) << "\n";
  if (!file) fail((out / "preprocessor_config.json").string(), ": cannot write");
}

void export_checkpoint(const Checkpoint& ckpt, const fs::path& out_dir, const ExportConfig& config, const ExportRun& run) {
  const std::string model_type = ckpt.config().string("model_type", "");
  if (model_type.empty()) fail(ckpt.config().where(), ": required key 'model_type' is missing");
  const ArchBuilder& build = find_arch(model_type);
  std::unique_ptr<Backend> backend = make_backend(config.format, run.spell("format"));
  backend->check(config, run.spell);
  check_capabilities(*backend, config, run.spell);

  progress::stage("building graph");
  const ExportConfig graph_config = backend->graph_config(config);
  ExportModel model = build(ckpt, graph_config);
  use_pipeline_layouts(model, backend->capabilities());
  check_dim_names(config, model, run.spell);
  AtomicOutputDir out(out_dir, run.overwrite);
  // Errors name the output as the user gave it, not its staging directory.
  try {
    json manifest = {{key::kSchemaVersion, manifest::kSchemaVersion},
                     {key::kProducer, std::string("hfexport ") + HFEXPORT_VERSION},
                     {key::kFormat, config.format},
                     {key::kDtype, std::string(dtype_name(config.dtype))},
                     {key::kSource,
                      {{"model_type", model.model_type},
                       {"architectures", model.architectures},
                       {"dtype", std::string(dtype_name(ckpt.dominant_float_dtype()))}}},
                     {"task", std::string(task_name(model.task))},
                     // What was asked for: `hfexport export --config` of this object redoes the export.
                     {key::kExportConfig, config.to_json()}};
    if (!model.sentence_pooling.is_null()) manifest["sentence_pooling"] = model.sentence_pooling;
    if (!model.image_tokens.is_null()) manifest["image_tokens"] = model.image_tokens;
    json components = json::object();
    json dims = json::object();
    json cache_pairs = json::array();
    bool stateful = false, shares_buffer = false, keys_by_slot = false;
    std::string quantized_compute;  // as the backend resolved it
    const std::unique_ptr<ExportWriter> writer = backend->writer(config, out.path());
    writer->set_token_ids(token_ids(ckpt));
    for (Component& c : model.components) {
      const std::string name(c.name());
      progress::stage("writing " + name);
      for (const Symbol& s : c.graph->symbols())  // derived dims follow from these
        if (s.op == Symbol::Op::Free) dims[s.name] = {{"min", s.min}, {"max", s.max}};
      PassReport report;
      run_passes(*backend, graph_config, name, *c.graph, report, run.verbose);
      const WrittenComponent w = writer->write(c.role, *c.graph);
      components[name] = {{key::kFile, w.file},
                            {key::kDataFiles, w.data_files},
                            {key::kInputs, tensors_json(w.inputs)},
                            {key::kOutputs, tensors_json(w.outputs)}};
      if (!w.program.empty()) components[name][key::kProgram] = w.program;
      if (!c.graph->state_pairs.empty()) components[name][key::kStates] = states_json(*c.graph, w);
      std::vector<KernelFallback> fallbacks = report.kernel_fallbacks;
      fallbacks.insert(fallbacks.end(), w.kernel_fallbacks.begin(), w.kernel_fallbacks.end());
      for (const KernelFallback& f : fallbacks)
        components[name]["kernel_fallbacks"].push_back({{"kernel", f.kernel}, {"reason", f.reason}, {"instead", f.instead}});
      stateful = stateful || w.stateful;
      quantized_compute = report.quantization.int8_compute ? "int8" : "float";
      if (config.quantization.enabled())
        components[name][key::kQuantizedLinears] = {{"quantized", report.quantization.quantized},
                                                      {"kept_float", report.quantization.kept_float},
                                                      {"embeddings", report.quantization.embeddings}};
      if (is_loop_step(c.role)) {
        shares_buffer = w.cache_shares_buffer;
        keys_by_slot = w.cache_keys_rotated_by_slot;
        for (const StatePair& state : c.graph->state_pairs) {
          if (!state.carried()) continue;  // computed once elsewhere: not the loop's cache
          if (w.stateful) cache_pairs.push_back({{"name", state.name}, {"variable", state.name}});
          else cache_pairs.push_back({{"name", state.name}, {"input", state.input->name}, {"output", state.output->name}});
        }
      }
    }
    progress::stage("writing files");
    writer->finish();
    progress::end();
    manifest[key::kComponents] = components;
    if (config.quantization.enabled())
      manifest[key::kQuantization] = {{"weights", "int" + std::to_string(config.quantization.bits)},
                                      {"group_size", config.quantization.group_size},
                                      {"scheme", "symmetric, per group of input features, round to nearest even"},
                                      {"compute", quantized_compute}};
    manifest[key::kDims] = dims;
    if (json tested = tested_runtimes(*backend); !tested.empty()) manifest[key::kTestedWith] = std::move(tested);
    if (config.generation.enabled)
      manifest[key::kGeneration] = generation_json(graph_config.generation, model, ckpt, cache_pairs, stateful, shares_buffer,
                                                     keys_by_slot);
    for (const char* name : kCompanionFiles) {
      if (ckpt.dir().empty()) break;  // a checkpoint in memory has no files to copy
      const fs::path src = ckpt.model_dir() / name;
      std::error_code ec;
      if (fs::exists(src) && !fs::copy_file(src, out.path() / name, ec))
        fail((out.path() / name).string(), ": cannot copy ", src.string(), ": ", ec.message());
    }
    write_sentence_transformers_files(ckpt, out.path());
    write_image_processor_file(ckpt, out.path());
    // After the companions: a runtime's files may derive from them (the image processor's settings).
    backend->write_runtime_files(manifest, ckpt.config(), out.path());
    Manifest(std::move(manifest)).save(out.path());
    out.commit();
  } catch (const Error& e) {
    throw Error(out.as_target(e.what()));
  }
  progress::clear();
}

}  // namespace

void inspect_export(const fs::path& out_dir) {
  const fs::path manifest_path = out_dir / manifest::kFileName;
  const JsonConfig m(Manifest::load(out_dir).data(), manifest_path.string());
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
    for (const auto& s : c.value(key::kStates, json::array()))
      std::cout << "  state " << s.value("name", "?") << ": " << s.value("kind", "?") << ", " << s.value("policy", "?")
                << "\n";
  }
}

}  // namespace hfx
