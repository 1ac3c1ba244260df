// The export driver: checkpoint -> frontend -> backend -> OUT_DIR with export.json, atomically.
#pragma once
#include <filesystem>
#include <string>

#include "core/dtype.h"
#include "core/quantize.h"
#include "models/registry.h"

namespace hfx {

struct ExportRequest {
  std::filesystem::path model_dir;
  std::filesystem::path out_dir;
  std::string format = "onnx";
  DType dtype = DType::F32;
  bool overwrite = false;
  GenerationOptions generation;
  std::string op_profile;
  WeightQuantization quantize;
};

void run_export(const ExportRequest& request);

// Prints a human-readable summary of an export directory's manifest to stdout.
void inspect_export(const std::filesystem::path& out_dir);

}  // namespace hfx
