// Builds an OpenVINO IR v11 network (layers, ports, edges) and writes it as XML with pugixml.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace hfx {

// One output port of a layer.
struct OvPort {
  int layer = -1;
  int port = -1;
};

std::string ov_element_type(DType t);  // f32, f16, i64, boolean, ...
std::string ov_precision(DType t);     // FP32, FP16, I64, BOOL, ...

class OvNetwork {
 public:
  using Attrs = std::vector<std::pair<std::string, std::string>>;
  struct Output {
    DType dtype;
    Shape shape;
    std::string names;      // tensor names (graph inputs/outputs)
    std::string precision;  // overrides ov_precision(dtype) for types the IR lacks (U4)
  };

  OvPort add(const std::string& type, const std::string& version, const std::string& name, Attrs data,
             const std::vector<OvPort>& inputs, std::vector<Output> outputs);
  // Later edits (e.g. a Const's offset once its bytes are placed).
  void set_data(int layer, const std::string& key, const std::string& value);
  void set_names(OvPort p, const std::string& names);
  void add_rt_attribute(int layer, const std::string& name);
  const Output& output(OvPort p) const;
  void write(const std::filesystem::path& path, const std::string& name) const;

 private:
  struct Layer {
    int id;
    std::string name, type, version;
    Attrs data;
    std::vector<OvPort> inputs;
    std::vector<Output> outputs;
    std::vector<std::string> rt_attributes;
  };
  std::vector<Layer> layers_;
};

}  // namespace hfx
