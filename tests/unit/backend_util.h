// Writes one graph as a one-component export, the way the driver does: the backend's passes,
// then its writer.
#pragma once
#include <filesystem>
#include <string>

#include "backends/backend.h"
#include "export/exporter.h"

namespace hfx::test {

inline WrittenComponent write_component(const std::string& format, Role role, Graph& g,
                                        const std::filesystem::path& dir, ExportConfig config) {
  config.format = format;
  const auto backend = make_backend(format);
  PassReport report;
  run_passes(*backend, backend->graph_config(config), std::string(role_name(role)), g, report);
  const auto writer = backend->writer(config, dir);
  WrittenComponent written = writer->write(role, g);
  writer->finish();
  return written;
}

inline WrittenComponent write_component(const std::string& format, Role role, Graph& g,
                                        const std::filesystem::path& dir) {
  ExportConfig config;
  return write_component(format, role, g, dir, config);
}

inline ExportConfig with_dtype(DType dtype) {
  ExportConfig c;
  c.dtype = dtype;
  return c;
}

}  // namespace hfx::test
