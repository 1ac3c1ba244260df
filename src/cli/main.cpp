// The hfexport command-line program.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
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
#include "export/exporter.h"

namespace {

// The directory of this executable: companions (the venv's Python, the OpenVINO runner) live there.
std::filesystem::path executable_dir() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : self.parent_path();
}

// The Python next to this executable (a venv's bin/), else HFEXPORT_PYTHON, else python3 on PATH.
std::string python_interpreter() {
  if (const char* env = std::getenv("HFEXPORT_PYTHON"); env && *env) return env;
  for (const char* name : {"python", "python3"}) {
    const auto candidate = executable_dir() / name;
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return "python3";
}

// OpenVINO exports go to the C++ runner installed next to this program, when there is one.
std::string native_runner(int argc, char** argv) {
  const auto runner = executable_dir() / "hfexport-openvino-generate";
  if (!std::filesystem::exists(runner)) return {};
  for (int i = 2; i < argc; ++i) {
    if (argv[i][0] == '-') {
      if (std::string_view(argv[i]) != "--ignore-eos" && std::string_view(argv[i]) != "--do-sample") ++i;
      continue;
    }
    std::ifstream in(std::filesystem::path(argv[i]) / "export.json");
    const auto manifest = nlohmann::json::parse(in, nullptr, false);
    return manifest.is_object() && manifest.value("format", "") == "openvino" ? runner.string() : std::string();
  }
  return {};
}

// Replaces this process with `args` followed by the arguments after "generate"; returns only if
// the program could not be started.
void exec_with_generate_args(std::vector<std::string> args, int argc, char** argv) {
  for (int i = 2; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  ::execvp(cargs[0], cargs.data());
}

int run_generate(int argc, char** argv) {
  if (const std::string runner = native_runner(argc, argv); !runner.empty())
    exec_with_generate_args({runner}, argc, argv);  // falls through to Python if it cannot start
  const std::string python = python_interpreter();
  exec_with_generate_args({python, "-m", "hfexport.generate"}, argc, argv);
  std::cerr << "hfexport: error: generate: cannot run " << python << ": " << std::strerror(errno) << "\n";
  return 1;
}

// --quantize int4|int8 and --quantize-compute int8|float into `q` (whose group size CLI11 set);
// the options that refine --quantize need it.
void parse_quantize(const std::string& quantize, const std::string& compute, hfx::WeightQuantization& q) {
  using Compute = hfx::WeightQuantization::Compute;
  if (compute == "int8") q.compute = Compute::Int8;
  else if (compute == "float") q.compute = Compute::Float;
  else if (!compute.empty()) hfx::fail("--quantize-compute: '", compute, "' is not one of int8, float");
  if (quantize.empty()) {
    if (!compute.empty() || q.group_size != hfx::WeightQuantization{}.group_size)
      hfx::fail("--quantize-group-size and --quantize-compute apply only with --quantize");
    return;
  }
  if (quantize == "int4") q.bits = 4;
  else if (quantize == "int8") q.bits = 8;
  else hfx::fail("--quantize: '", quantize, "' is not one of int4, int8");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hfexport: export Hugging Face checkpoints to deployment runtimes", "hfexport"};
  app.set_version_flag("--version", std::string("hfexport ") + HFEXPORT_VERSION);
  app.require_subcommand(1);

  hfx::ExportRequest req;
  std::string dtype = "float32";
  auto* exp = app.add_subcommand("export", "export a checkpoint directory");
  exp->add_option("MODEL_DIR", req.model_dir, "checkpoint directory (config.json + *.safetensors)")->required();
  exp->add_option("-o,--output", req.out_dir, "output directory (written atomically)")->required();
  exp->add_option("--format", req.format, "onnx");
  exp->add_option("--dtype", dtype, "float32 | float16 | bfloat16 (weights and compute)");
  exp->add_flag("--overwrite", req.overwrite, "replace OUT_DIR if it exists");
  exp->add_option("--onnx-ops", req.op_profile, "ONNX op profile: standard (ai.onnx only) | ort (onnxruntime contrib ops) | ort-gqa (ort with GroupQueryAttention)");
  exp->add_flag("--for-generation", req.generation.enabled, "export prefill/decode graphs with a KV cache");
  exp->add_flag("--multi-token-decode", req.generation.multi_token, "one decode graph for any query length");
  exp->add_flag("--static-cache", req.generation.static_cache, "fixed-size KV cache buffers written in place");
  exp->add_option("--max-cache-len", req.generation.max_cache_len, "static cache length bound");
  exp->add_option("--batch-size", req.generation.batch_size, "static cache batch size (default 1)");
  std::string quantize, quantize_compute;
  exp->add_option("--quantize", quantize, "store Linear weights as int4 | int8 codes with per-group scales");
  exp->add_option("--quantize-group-size", req.quantize.group_size, "input features per scale (default 32)");
  exp->add_option("--quantize-compute", quantize_compute,
                  "int8 (activations quantized inside the MatMul; the ort profile's default) | float "
                  "(dequantized weights; the standard profile's only choice)");

  std::string inspect_dir;
  auto* ins = app.add_subcommand("inspect", "describe an export directory");
  ins->add_option("OUT_DIR", inspect_dir)->required();

  // The decode loop runs on onnxruntime's Python API (no C/C++ SDK installable here): the
  // subcommand is handed, arguments untouched, to the runner in hfexport's Python package.
  if (argc > 1 && std::string_view(argv[1]) == "generate") return run_generate(argc, argv);
  app.add_subcommand("generate", "generate tokens from an export (runs python -m hfexport.generate)");

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
      const auto parsed = hfx::dtype_from_name(dtype);
      if (!parsed || !hfx::is_float(*parsed) || *parsed == hfx::DType::F64)
        hfx::fail("--dtype: '", dtype, "' is not one of float32, float16, bfloat16");
      req.dtype = *parsed;
      parse_quantize(quantize, quantize_compute, req.quantize);
      hfx::run_export(req);
    } else if (*ins) {
      hfx::inspect_export(inspect_dir);
    }
  } catch (const hfx::Error& e) {
    std::cerr << "hfexport: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "hfexport: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
