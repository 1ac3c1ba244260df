// The hfexport command-line program.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>
#include <iostream>

#include "core/error.h"
#include "core/progress.h"
#include "core/python.h"
#include "backends/backend.h"
#include "export/exporter.h"
#include "io/json_config.h"
#include "io/manifest.h"
#include "io/output_dir.h"

namespace {

// The directory of this executable: companions (the venv's Python, the OpenVINO runner) live there.
std::filesystem::path executable_dir() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : self.parent_path();
}

// The decode loops written in C++, by export format: installed next to this program when their
// runtime's SDK was found at build time. Other formats (and missing runners) use the Python runner.
constexpr std::pair<std::string_view, std::string_view> kNativeRunners[] = {
    {"openvino", "hfexport-openvino-generate"},
    {"executorch", "hfexport-executorch-generate"},
};

// The native runner for the export named in the generate arguments, if one is installed. The C++
// loops drive a `decode` component over token ids: text in / out (the tokenizer is Python's),
// images and the other kinds of export (vision-language, encoder-decoder) go to the Python runner.
std::string native_runner(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--prompt" || arg == "--image" || arg == "--image-option") return {};
  }
  for (int i = 2; i < argc; ++i) {
    if (argv[i][0] == '-') {
      const std::string_view flag = argv[i];
      if (flag != "--ignore-eos" && flag != "--do-sample" && flag != "--chat" && flag != "--stats") ++i;
      continue;
    }
    std::string format;
    try {
      const hfx::Manifest manifest = hfx::Manifest::load(argv[i]);
      if (!manifest.has_component(hfx::manifest::component::kDecode)) return {};
      format = manifest.format();
    } catch (const hfx::Error&) {
      return {};  // the Python runner reports what is wrong with the export
    }
    for (const auto& [name, program] : kNativeRunners) {
      const auto runner = executable_dir() / program;
      if (name == format && std::filesystem::exists(runner)) return runner.string();
    }
    return {};
  }
  return {};
}

// Replaces this process with `args` followed by the arguments after the subcommand; returns only if
// the program could not be started.
void exec_with_subcommand_args(std::vector<std::string> args, int argc, char** argv) {
  for (int i = 2; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  ::execvp(cargs[0], cargs.data());
}

// `hfexport run OUT --text ...` (encoders): Python's hfexport.run, as text generation is.
int run_texts(int argc, char** argv) {
  const std::string python = hfx::python_interpreter();
  exec_with_subcommand_args({python, "-m", "hfexport.run"}, argc, argv);
  std::cerr << "hfexport: error: run: cannot run " << python << ": " << std::strerror(errno) << "\n";
  return 1;
}

// `hfexport transcribe OUT audio.wav` (Whisper): Python's hfexport.transcribe over the native log-mel features.
int run_transcribe(int argc, char** argv) {
  const std::string python = hfx::python_interpreter();
  exec_with_subcommand_args({python, "-m", "hfexport.transcribe"}, argc, argv);
  std::cerr << "hfexport: error: transcribe: cannot run " << python << ": " << std::strerror(errno) << "\n";
  return 1;
}

int run_generate(int argc, char** argv) {
  if (const std::string runner = native_runner(argc, argv); !runner.empty())
    exec_with_subcommand_args({runner}, argc, argv);  // falls through to Python if it cannot start
  const std::string python = hfx::python_interpreter();
  exec_with_subcommand_args({python, "-m", "hfexport.generate"}, argc, argv);
  std::cerr << "hfexport: error: generate: cannot run " << python << ": " << std::strerror(errno) << "\n";
  return 1;
}

// How the command line spells each ExportConfig field, for error messages.
constexpr std::pair<std::string_view, std::string_view> kFlagOfField[] = {
    {"format", "--format"},
    {"dtype", "--dtype"},
    {"dims", "--dim"},
    {"inputs", "--inputs"},
    {"task", "--task"},
    {"generation.enabled", "--for-generation"},
    {"generation.multi_token_decode", "--multi-token-decode"},
    {"generation.cache_implementation", "--static-cache"},
    {"generation.max_cache_len", "--max-cache-len"},
    {"generation.batch_size", "--batch-size"},
    {"quantization.weights", "--quantize"},
    {"quantization.group_size", "--quantize-group-size"},
    {"quantization.compute", "--quantize-compute"},
};

// A flag some backends declare (BackendOption), the formats that take it (given with another
// format, it is an error here: that backend never sees it) and where CLI11 stores its value.
struct BackendFlag {
  hfx::BackendOption option;
  std::vector<std::string> formats;
  std::string text;
  std::vector<std::string> list;
  bool set = false;
};

// Every backend's flags, each once (a key several backends declare, like decompose, is one flag).
std::vector<BackendFlag> backend_flags() {
  std::vector<BackendFlag> flags;
  for (const std::string& format : hfx::supported_formats())
    for (const hfx::BackendOption& option : hfx::make_backend(format)->options()) {
      if (option.flag.empty()) continue;
      const auto it = std::find_if(flags.begin(), flags.end(), [&](const BackendFlag& f) { return f.option.flag == option.flag; });
      if (it != flags.end()) it->formats.push_back(format);
      else flags.push_back({option, {format}, {}, {}, false});
    }
  return flags;
}

// Field names as flags; with --config, the JSON key too, since either may be what the user wrote.
hfx::FieldSpelling cli_spelling(bool with_config, const std::vector<BackendFlag>& backend) {
  return [with_config, &backend](std::string_view field) {
    auto spelled = [&](std::string_view flag) { return with_config ? hfx::str(flag, " (", field, ")") : std::string(flag); };
    for (const auto& [name, flag] : kFlagOfField)
      if (name == field) return spelled(flag);
    for (const BackendFlag& b : backend)
      if ("backend." + b.option.key == field) return spelled(b.option.flag);
    return std::string(field);
  };
}

// --quantize int4|int8 and --quantize-compute int8|float into `q`.
void parse_quantize(const std::string& quantize, const std::string& compute, hfx::WeightQuantization& q) {
  using Compute = hfx::WeightQuantization::Compute;
  if (compute == "int8") q.compute = Compute::Int8;
  else if (compute == "float") q.compute = Compute::Float;
  else if (!compute.empty()) hfx::fail("--quantize-compute: '", compute, "' is not one of int8, float");
  if (quantize == "int4") q.bits = 4;
  else if (quantize == "int8") q.bits = 8;
  else if (!quantize.empty()) hfx::fail("--quantize: '", quantize, "' is not one of int4, int8");
}

// --dim NAME=MIN:MAX (or NAME=N for a fixed size).
void parse_dim(const std::string& text, hfx::ExportConfig& config) {
  const auto eq = text.find('=');
  auto number = [&](const std::string& s) -> int64_t {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (s.empty() || used != s.size()) hfx::fail("--dim: '", text, "' is not NAME=MIN:MAX or NAME=SIZE");
    return v;
  };
  if (eq == std::string::npos || eq == 0) hfx::fail("--dim: '", text, "' is not NAME=MIN:MAX or NAME=SIZE");
  const std::string range = text.substr(eq + 1);
  const auto colon = range.find(':');
  const int64_t min = number(range.substr(0, colon));
  const int64_t max = colon == std::string::npos ? min : number(range.substr(colon + 1));
  config.dims[text.substr(0, eq)] = {min, max};
}

struct ExportFlags {
  std::filesystem::path model_dir, out_dir, config_file;
  std::string format, dtype, quantize, quantize_compute, task;
  std::vector<std::string> dims, inputs;
  std::vector<BackendFlag> backend = backend_flags();
  bool overwrite = false, verbose = false, quiet = false;
  bool for_generation = false, multi_token = false, static_cache = false;
  int64_t max_cache_len = 0, batch_size = 1, group_size = 0;
};

// The ExportConfig the flags describe: --config's JSON first, then every flag given on top.
hfx::ExportConfig export_config(const ExportFlags& f, const CLI::App& exp) {
  hfx::ExportConfig c;
  if (!f.config_file.empty())
    c = hfx::ExportConfig::from_json(hfx::read_json_file(f.config_file), f.config_file.string());
  auto given = [&](const char* flag) { return exp.count(flag) > 0; };
  if (given("--format")) c.format = f.format;
  if (given("--dtype")) {
    const auto parsed = hfx::dtype_from_name(f.dtype);
    if (!parsed || !hfx::is_float(*parsed) || *parsed == hfx::DType::F64)
      hfx::fail("--dtype: '", f.dtype, "' is not one of float32, float16, bfloat16");
    c.dtype = *parsed;
  }
  for (const std::string& d : f.dims) parse_dim(d, c);
  if (given("--inputs")) c.inputs = f.inputs;
  if (given("--task")) c.task = f.task;
  if (f.for_generation) c.generation.enabled = true;
  if (f.multi_token) c.generation.multi_token_decode = true;
  if (f.static_cache) c.generation.cache_implementation = "static";
  if (given("--max-cache-len")) c.generation.max_cache_len = f.max_cache_len;
  if (given("--batch-size")) c.generation.batch_size = f.batch_size;
  if (given("--quantize-group-size")) c.quantization.group_size = f.group_size;
  parse_quantize(f.quantize, f.quantize_compute, c.quantization);
  for (const BackendFlag& b : f.backend) {
    if (!given(b.option.flag.c_str())) continue;
    if (std::find(b.formats.begin(), b.formats.end(), c.format) == b.formats.end()) {
      std::string formats;
      for (const std::string& format : b.formats) formats += (formats.empty() ? "" : ", ") + format;
      hfx::fail(b.option.flag, " applies only to --format ", formats);
    }
    using Type = hfx::BackendOption::Type;
    c.backend[b.option.key] = b.option.type == Type::Bool      ? nlohmann::json(b.option.flag_sets)
                              : b.option.type == Type::Strings ? nlohmann::json(b.list)
                                                               : nlohmann::json(b.text);
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hfexport: export Hugging Face checkpoints to deployment runtimes", "hfexport"};
  app.set_version_flag("--version", std::string("hfexport ") + HFEXPORT_VERSION);
  app.require_subcommand(1);

  ExportFlags flags;
  auto* exp = app.add_subcommand("export", "export a checkpoint directory");
  exp->add_option("MODEL_DIR", flags.model_dir, "checkpoint directory (config.json + *.safetensors)")->required();
  exp->add_option("-o,--output", flags.out_dir, "output directory (written atomically)")->required();
  exp->add_option("--config", flags.config_file,
                  "export config JSON (format, dtype, dynamic, dims, generation, quantization, backend); "
                  "flags given on the command line override it");
  exp->add_option("--format", flags.format, "onnx | openvino | pt2 | executorch");
  exp->add_option("--dtype", flags.dtype, "float32 | float16 | bfloat16 (weights and compute)");
  exp->add_option("--dim", flags.dims, "bounds of a named dim, NAME=MIN:MAX or NAME=SIZE (repeatable)");
  exp->add_option("--inputs", flags.inputs,
                  "the plain forward's inputs, e.g. input_ids,attention_mask (the rest derived as the model's "
                  "forward does; default: input_ids,attention_mask,position_ids; inputs_embeds in place of "
                  "input_ids takes the token embeddings); with --static-cache, "
                  "input_ids,cache_position: the mask and positions follow from the tokens' cache positions "
                  "(ExecuTorch's LLM runner calls forward(tokens, input_pos) so)")
      ->delimiter(',');
  exp->add_option("--task", flags.task,
                  "what the export computes: text-generation (logits) | feature-extraction (last_hidden_state) | ... "
                  "(default: what config.json's architectures name, e.g. LlamaModel -> feature-extraction)");
  exp->add_flag("--overwrite", flags.overwrite, "replace OUT_DIR if it exists");
  exp->add_flag("--verbose", flags.verbose, "print the time of each pass");
  exp->add_flag("--quiet", flags.quiet, "no progress lines (they are shown only on a terminal)");
  for (BackendFlag& b : flags.backend) {  // each backend's own options, as it declares them
    using Type = hfx::BackendOption::Type;
    if (b.option.type == Type::Bool) exp->add_flag(b.option.flag, b.set, b.option.help);
    else if (b.option.type == Type::Strings) exp->add_option(b.option.flag, b.list, b.option.help)->delimiter(',');
    else exp->add_option(b.option.flag, b.text, b.option.help);
  }
  exp->add_flag("--for-generation", flags.for_generation, "export prefill/decode graphs with a KV cache");
  exp->add_flag("--multi-token-decode", flags.multi_token, "one decode graph for any query length");
  exp->add_flag("--static-cache", flags.static_cache, "fixed-size KV cache buffers written in place");
  exp->add_option("--max-cache-len", flags.max_cache_len, "static cache length bound");
  exp->add_option("--batch-size", flags.batch_size, "static cache batch size (default 1)");
  exp->add_option("--quantize", flags.quantize, "store Linear weights as int4 | int8 codes with per-group scales");
  exp->add_option("--quantize-group-size", flags.group_size, "input features per scale (default 32)");
  exp->add_option("--quantize-compute", flags.quantize_compute,
                  "int8 (activations quantized inside the MatMul; the ort profile's default) | float "
                  "(dequantized weights; the standard profile's only choice)");

  std::string inspect_dir;
  auto* ins = app.add_subcommand("inspect", "describe an export directory");
  ins->add_option("OUT_DIR", inspect_dir)->required();

  // The decode loop runs on onnxruntime's Python API (no C/C++ SDK installable here): the
  // subcommand is handed, arguments untouched, to the runner in hfexport's Python package.
  if (argc > 1 && std::string_view(argv[1]) == "generate") return run_generate(argc, argv);
  if (argc > 1 && std::string_view(argv[1]) == "run") return run_texts(argc, argv);
  if (argc > 1 && std::string_view(argv[1]) == "transcribe") return run_transcribe(argc, argv);
  app.add_subcommand("generate", "generate tokens from an export (runs python -m hfexport.generate)");
  app.add_subcommand("transcribe", "transcribe a 16 kHz audio file with a Whisper export (runs python -m hfexport.transcribe)");
  app.add_subcommand("run", "run an encoder export on texts or images: embeddings, labels, filled masks, image labels and zero-shot scores (runs python -m hfexport.run)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::cerr << "hfexport: error: " << message << " (see hfexport --help)\n";
    return 2;
  }
  try {
    if (*exp) {
      const hfx::ExportConfig config = export_config(flags, *exp);
      hfx::progress::set_quiet(flags.quiet);
      hfx::remove_staging_on_signals();  // before the export starts any thread
      hfx::run_export(flags.model_dir, flags.out_dir, config,
                      {flags.overwrite, flags.verbose, cli_spelling(!flags.config_file.empty(), flags.backend)});
    } else if (*ins) {
      hfx::inspect_export(inspect_dir);
    }
  } catch (const hfx::Error& e) {
    hfx::progress::clear();
    std::cerr << "hfexport: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    hfx::progress::clear();
    std::cerr << "hfexport: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
