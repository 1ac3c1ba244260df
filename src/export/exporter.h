// The export driver: checkpoint -> frontend -> the backend's passes -> its writer -> OUT_DIR with
// export.json, atomically.
#pragma once
#include <filesystem>
#include <string>

#include "backends/backend.h"
#include "core/export_config.h"
#include "io/checkpoint.h"

namespace hfx {

struct ExportRun {
  bool overwrite = false;  // replace OUT_DIR if it exists (never before the new one is complete)
  bool verbose = false;    // time of each pass on stderr
  FieldSpelling spell = json_field;  // how errors name config fields (the CLI spells its flags)
};

void run_export(const std::filesystem::path& model_dir, const std::filesystem::path& out_dir,
                const ExportConfig& config, const ExportRun& run = {});
// The same from a checkpoint already opened (e.g. one whose tensors are a caller's buffers).
void run_export(const Checkpoint& ckpt, const std::filesystem::path& out_dir, const ExportConfig& config,
                const ExportRun& run = {});

// Runs `backend`'s pass pipeline on one component's graph: the IR verifier after every pass in
// debug builds, and once at the end in all builds.
void run_passes(const Backend& backend, const ExportConfig& config, const std::string& component, Graph& graph,
                PassReport& report, bool verbose = false);

// Prints a human-readable summary of an export directory's manifest to stdout.
void inspect_export(const std::filesystem::path& out_dir);

}  // namespace hfx
