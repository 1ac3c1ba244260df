// The hfexport command-line program.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>

#include "core/error.h"
#include "export/exporter.h"

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

  std::string inspect_dir;
  auto* ins = app.add_subcommand("inspect", "describe an export directory");
  ins->add_option("OUT_DIR", inspect_dir)->required();

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
