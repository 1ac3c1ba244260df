// hfexport._core: the export core for the Python API. Python hands over what it has (a checkpoint
// directory, or a live model's config and the addresses of its weight buffers) and the export
// config as JSON; everything else is the same C++ the command line runs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "audio/log_mel.h"
#include "image/resample.h"
#include "core/error.h"
#include "core/export_config.h"
#include "export/exporter.h"
#include "io/checkpoint.h"

namespace py = pybind11;

namespace {

// name, safetensors dtype code ("F32", "BF16", ...), shape, address, byte count.
using TensorBuffer = std::tuple<std::string, std::string, std::vector<int64_t>, uintptr_t, size_t>;

nlohmann::json parse_json(const std::string& text, const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    hfx::fail(what, ": not valid JSON (", e.what(), ")");
  }
}

hfx::ExportConfig parse_config(const std::string& config_json) {
  return hfx::ExportConfig::from_json(parse_json(config_json, "export config"), "export config");
}

// The config as the core reads it: unknown keys and bad values refused, defaults filled in.
std::string normalize_config(const std::string& config_json) {
  const hfx::ExportConfig config = parse_config(config_json);
  config.validate();
  return config.to_json().dump();
}

void export_checkpoint(const std::string& model_dir, const std::string& out_dir, const std::string& config_json,
                       bool overwrite, bool verbose) {
  const hfx::ExportConfig config = parse_config(config_json);
  py::gil_scoped_release unlocked;
  hfx::run_export(model_dir, out_dir, config, {overwrite, verbose});
}

// The tensors stay the caller's: the source only points at them (the caller keeps them alive and
// unchanged until this returns).
std::unique_ptr<hfx::TensorSource> buffer_source(const std::vector<TensorBuffer>& tensors, const std::string& where) {
  auto source = std::make_unique<hfx::MemoryTensorSource>(where);
  for (const auto& [name, code, shape, address, nbytes] : tensors) {
    const auto dtype = hfx::dtype_from_safetensors(code);
    if (!dtype) hfx::fail(where, ": tensor '", name, "' has dtype ", code, ", which no checkpoint format holds");
    source->add(name, *dtype, shape, reinterpret_cast<const void*>(address), nbytes);
  }
  return source;
}

void export_tensors(const std::string& hf_config_json, const std::optional<std::string>& generation_config_json,
                    const std::vector<TensorBuffer>& tensors, const std::string& companion_dir,
                    const std::string& out_dir, const std::string& config_json, bool overwrite, bool verbose,
                    const std::string& where) {
  const hfx::ExportConfig config = parse_config(config_json);
  hfx::JsonConfig hf_config(parse_json(hf_config_json, where + ": config"), where + ": config");
  std::optional<hfx::JsonConfig> generation;
  if (generation_config_json)
    generation.emplace(parse_json(*generation_config_json, where + ": generation_config"),
                       where + ": generation_config");
  const hfx::Checkpoint ckpt(std::move(hf_config), std::move(generation), buffer_source(tensors, where),
                             companion_dir);
  py::gil_scoped_release unlocked;
  hfx::run_export(ckpt, out_dir, config, {overwrite, verbose});
}

// Whisper's log-mel features of mono float32 samples: a [feature_size, frames] float32 array.
py::array_t<float> whisper_log_mel(const py::array_t<float, py::array::c_style | py::array::forcecast>& samples,
                                   const hfx::LogMelConfig& config) {
  if (samples.ndim() != 1) hfx::fail("log-mel: samples must be one mono channel (a 1-D array), got ", samples.ndim(), "-D");
  const hfx::LogMel mel = hfx::whisper_log_mel({samples.data(), static_cast<size_t>(samples.size())}, config);
  py::array_t<float> out({mel.mels, mel.frames});
  std::copy(mel.values.begin(), mel.values.end(), out.mutable_data());
  return out;
}

// An [height, width, channels] uint8 image resized as Pillow 13.0's Image.resize((width, height),
// resample) resizes it (resample: Pillow's filter number, not NEAREST).
py::array_t<uint8_t> resize_image(const py::array_t<uint8_t, py::array::c_style | py::array::forcecast>& pixels,
                                  int64_t height, int64_t width, int resample) {
  if (pixels.ndim() != 3) hfx::fail("resize: pixels must be [height, width, channels], got ", pixels.ndim(), "-D");
  if (!hfx::resample_filter_supported(resample)) hfx::fail("resize: resample ", resample, " is not a filter (1 to 5)");
  const int64_t h = pixels.shape(0), w = pixels.shape(1), c = pixels.shape(2);
  const std::vector<uint8_t> out = hfx::resize_u8({pixels.data(), static_cast<size_t>(pixels.size())}, h, w, c, height,
                                                  width, static_cast<hfx::ResampleFilter>(resample));
  py::array_t<uint8_t> result({height, width, c});
  std::copy(out.begin(), out.end(), result.mutable_data());
  return result;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "hfexport's C++ export core";
  py::register_exception<hfx::Error>(m, "ExportError", PyExc_ValueError);
  m.attr("__version__") = HFEXPORT_VERSION;
  m.def("normalize_config", &normalize_config, py::arg("config_json"));
  m.def("export_checkpoint", &export_checkpoint, py::arg("model_dir"), py::arg("out_dir"), py::arg("config_json"),
        py::arg("overwrite") = false, py::arg("verbose") = false);
  m.def("export_tensors", &export_tensors, py::arg("hf_config_json"), py::arg("generation_config_json"),
        py::arg("tensors"), py::arg("companion_dir"), py::arg("out_dir"), py::arg("config_json"),
        py::arg("overwrite") = false, py::arg("verbose") = false, py::arg("where") = "model");
  py::class_<hfx::LogMelConfig>(m, "LogMelConfig")
      .def(py::init<>())
      .def_readwrite("feature_size", &hfx::LogMelConfig::feature_size)
      .def_readwrite("sampling_rate", &hfx::LogMelConfig::sampling_rate)
      .def_readwrite("hop_length", &hfx::LogMelConfig::hop_length)
      .def_readwrite("n_fft", &hfx::LogMelConfig::n_fft)
      .def_readwrite("chunk_length", &hfx::LogMelConfig::chunk_length)
      .def_readwrite("pad_to_chunk", &hfx::LogMelConfig::pad_to_chunk);
  m.def("whisper_log_mel", &whisper_log_mel, py::arg("samples"), py::arg("config"));
  m.def("resize_image", &resize_image, py::arg("pixels"), py::arg("height"), py::arg("width"), py::arg("resample"));
}
