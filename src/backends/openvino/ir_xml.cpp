#include "backends/openvino/ir_xml.h"

#include <pugixml.hpp>
#include <sstream>

#include "core/error.h"
#include "io/output_dir.h"

namespace hfx {

std::string ov_element_type(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F64: return "f64";
    case DType::I64: return "i64";
    case DType::I32: return "i32";
    case DType::I16: return "i16";
    case DType::I8: return "i8";
    case DType::U8: return "u8";
    case DType::Bool: return "boolean";
  }
  fail("internal error: dtype");
}

std::string ov_precision(DType t) {
  switch (t) {
    case DType::F32: return "FP32";
    case DType::F16: return "FP16";
    case DType::BF16: return "BF16";
    case DType::F64: return "FP64";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::Bool: return "BOOL";
  }
  fail("internal error: dtype");
}

OvPort OvNetwork::add(const std::string& type, const std::string& version, const std::string& name, Attrs data,
                      const std::vector<OvPort>& inputs, std::vector<Output> outputs) {
  const int id = static_cast<int>(layers_.size());
  for (const OvPort& in : inputs) HFX_CHECK(in.layer >= 0 && in.layer < id, "OpenVINO edge into ", name);
  layers_.push_back({id, name, type, version, std::move(data), inputs, std::move(outputs), {}});
  return {id, static_cast<int>(inputs.size())};
}

void OvNetwork::set_data(int layer, const std::string& key, const std::string& value) {
  for (auto& [k, v] : layers_.at(static_cast<size_t>(layer)).data)
    if (k == key) {
      v = value;
      return;
    }
  layers_.at(static_cast<size_t>(layer)).data.emplace_back(key, value);
}

void OvNetwork::add_rt_attribute(int layer, const std::string& name) {
  layers_.at(static_cast<size_t>(layer)).rt_attributes.push_back(name);
}

void OvNetwork::set_names(OvPort p, const std::string& names) {
  Layer& l = layers_.at(static_cast<size_t>(p.layer));
  l.outputs.at(static_cast<size_t>(p.port) - l.inputs.size()).names = names;
}

const OvNetwork::Output& OvNetwork::output(OvPort p) const {
  const Layer& l = layers_.at(static_cast<size_t>(p.layer));
  return l.outputs.at(static_cast<size_t>(p.port) - l.inputs.size());
}

namespace {

void write_port(pugi::xml_node parent, int id, const OvNetwork::Output& out, bool with_precision) {
  pugi::xml_node port = parent.append_child("port");
  port.append_attribute("id") = id;
  if (with_precision)
    port.append_attribute("precision") = (out.precision.empty() ? ov_precision(out.dtype) : out.precision).c_str();
  if (!out.names.empty()) port.append_attribute("names") = out.names.c_str();
  for (const Dim& d : out.shape) port.append_child("dim").text() = d.is_static() ? d.value() : -1;
}

}  // namespace

void OvNetwork::write(const std::filesystem::path& path, const std::string& name) const {
  pugi::xml_document doc;
  pugi::xml_node net = doc.append_child("net");
  net.append_attribute("name") = name.c_str();
  net.append_attribute("version") = 11;
  pugi::xml_node layers = net.append_child("layers");
  for (const Layer& l : layers_) {
    pugi::xml_node x = layers.append_child("layer");
    x.append_attribute("id") = l.id;
    x.append_attribute("name") = l.name.c_str();
    x.append_attribute("type") = l.type.c_str();
    x.append_attribute("version") = l.version.c_str();
    if (!l.data.empty()) {
      pugi::xml_node data = x.append_child("data");
      for (const auto& [k, v] : l.data) data.append_attribute(k.c_str()) = v.c_str();
    }
    if (!l.rt_attributes.empty()) {
      pugi::xml_node rt = x.append_child("rt_info");
      for (const auto& a : l.rt_attributes) {
        pugi::xml_node attr = rt.append_child("attribute");
        attr.append_attribute("name") = a.c_str();
        attr.append_attribute("version") = "0";
      }
    }
    if (!l.inputs.empty()) {
      pugi::xml_node in = x.append_child("input");
      for (size_t i = 0; i < l.inputs.size(); ++i) write_port(in, static_cast<int>(i), output(l.inputs[i]), false);
    }
    if (!l.outputs.empty()) {
      pugi::xml_node out = x.append_child("output");
      for (size_t i = 0; i < l.outputs.size(); ++i)
        write_port(out, static_cast<int>(l.inputs.size() + i), l.outputs[i], true);
    }
  }
  pugi::xml_node edges = net.append_child("edges");
  for (const Layer& l : layers_)
    for (size_t i = 0; i < l.inputs.size(); ++i) {
      pugi::xml_node e = edges.append_child("edge");
      e.append_attribute("from-layer") = l.inputs[i].layer;
      e.append_attribute("from-port") = l.inputs[i].port;
      e.append_attribute("to-layer") = l.id;
      e.append_attribute("to-port") = static_cast<int>(i);
    }
  std::ostringstream xml;
  doc.save(xml, "  ");
  write_file(path, xml.str());
}

}  // namespace hfx
