// The OpenVINO backend: the IR v11 XML it writes (parsed back with pugixml) and its .bin.
#include <gtest/gtest.h>

#include <map>
#include <pugixml.hpp>
#include <set>
#include <string>

#include "backends/backend.h"
#include "io/safetensors.h"
#include "ir/builder.h"
#include "backend_util.h"
#include "test_util.h"

namespace hfx {
namespace {

using test::read_file;
using test::TempDir;

struct Written {
  TempDir dir;
  std::unique_ptr<SafetensorsFile> ckpt;
  WrittenComponent component;
  pugi::xml_document xml;
  std::string bin;
};

// x[batch, 4] -> Linear(w [3, 4]) -> RMSNorm -> logits; optionally one cache state pair.
std::unique_ptr<Written> write_model(DType dtype, bool with_state) {
  auto w = std::make_unique<Written>();
  const std::vector<float> weight(12, 0.5f);
  test::SafetensorsWriter()
      .add("w", "F32", {3, 4}, test::bytes_of(weight))
      .write(w->dir.path() / "m.safetensors");
  w->ckpt = std::make_unique<SafetensorsFile>(w->dir.path() / "m.safetensors");
  Graph g;
  Builder b(g);
  const Symbol* batch = g.symbol("batch", 1, 8);
  Value* x = b.input("x", DType::F32, {batch, 4});
  Value* y = b.linear(x, b.weight(*w->ckpt->find("w"), DType::F32));
  y = b.rms_norm(y, b.const_f32({1.0f, 2.0f, 3.0f}, {3}), 1e-6);
  b.output(y, "logits");
  if (with_state) {
    const Symbol* past = g.symbol("past", 0, 16);
    const Symbol* total = g.symbol("total", 1, 16);
    const int64_t state = b.declare_state({"past_key_values.0.key", StateKind::KeyValue, StateUpdatePolicy::Append,
                                           DType::F32, {batch, 1, past, 3}});
    Value* fresh = b.unsqueeze(b.unsqueeze(y, {1}), {1});
    b.state_update(state, b.state_read(state), fresh, nullptr, {batch, 1, total, 3});  // the state pass keeps it
  }
  w->component = test::write_component("openvino", with_state ? Role::Decode : Role::Forward, g, w->dir.path(),
                                        test::with_dtype(dtype));
  EXPECT_TRUE(w->xml.load_file((w->dir.path() / w->component.file).c_str()));
  w->bin = read_file(w->dir.path() / w->component.data_files.at(0));
  return w;
}

TEST(OpenVinoBackend, WritesIrV11WithConsistentEdgesAndConstants) {
  const auto w = write_model(DType::F32, false);
  EXPECT_EQ(w->component.file, "openvino_model.xml");
  const pugi::xml_node net = w->xml.child("net");
  EXPECT_EQ(net.attribute("version").as_int(), 11);
  std::map<int, pugi::xml_node> layers;
  std::multiset<std::string> types;
  for (pugi::xml_node l : net.child("layers").children("layer")) {
    EXPECT_TRUE(layers.emplace(l.attribute("id").as_int(), l).second) << "duplicate layer id";
    types.insert(l.attribute("type").as_string());
    if (std::string(l.attribute("type").as_string()) == "Const") {
      const pugi::xml_node d = l.child("data");
      EXPECT_LE(d.attribute("offset").as_ullong() + d.attribute("size").as_ullong(), w->bin.size());
    }
  }
  EXPECT_EQ(types.count("Parameter"), 1u);
  EXPECT_EQ(types.count("Result"), 1u);
  EXPECT_EQ(types.count("MatMul"), 1u);
  for (pugi::xml_node e : net.child("edges").children("edge")) {
    ASSERT_TRUE(layers.count(e.attribute("from-layer").as_int()));
    ASSERT_TRUE(layers.count(e.attribute("to-layer").as_int()));
    // The source port is one of the producer's output ports, the target one of the consumer's inputs.
    bool from_ok = false, to_ok = false;
    for (pugi::xml_node p : layers[e.attribute("from-layer").as_int()].child("output").children("port"))
      from_ok = from_ok || p.attribute("id").as_int() == e.attribute("from-port").as_int();
    for (pugi::xml_node p : layers[e.attribute("to-layer").as_int()].child("input").children("port"))
      to_ok = to_ok || p.attribute("id").as_int() == e.attribute("to-port").as_int();
    EXPECT_TRUE(from_ok && to_ok) << "dangling edge";
  }
  // The MatMul reads the weight as stored ([out, in]) with transpose_b.
  for (auto& [id, l] : layers) {
    if (std::string(l.attribute("type").as_string()) == "MatMul") {
      EXPECT_STREQ(l.child("data").attribute("transpose_b").as_string(), "true");
    }
  }
}

TEST(OpenVinoBackend, StatePairsBecomeReadValueAndAssign) {
  const auto w = write_model(DType::F32, true);
  std::multiset<std::string> types;
  for (pugi::xml_node l : w->xml.child("net").child("layers").children("layer")) {
    types.insert(l.attribute("type").as_string());
    if (std::string(l.attribute("type").as_string()) == "ReadValue") {
      EXPECT_STREQ(l.child("data").attribute("variable_id").as_string(), "past_key_values.0.key");
    }
  }
  EXPECT_EQ(types.count("ReadValue"), 1u);
  EXPECT_EQ(types.count("Assign"), 1u);
  EXPECT_EQ(types.count("Result"), 1u);  // logits only: the cache is not an output
  EXPECT_TRUE(w->component.stateful);
  std::vector<std::string> inputs;
  for (const auto& t : w->component.inputs) inputs.push_back(t.name);
  EXPECT_EQ(inputs, (std::vector<std::string>{"x", "beam_idx"}));
}

TEST(OpenVinoBackend, Float16CompressesWeightsWithDecompressionConvert) {
  const auto w16 = write_model(DType::F16, false);
  // The checkpoint weight is stored f16 and widened by a Convert marked "decompression"; small
  // owned constants (the norm weight) stay f32.
  int decompressions = 0, f16_consts = 0;
  for (pugi::xml_node l : w16->xml.child("net").child("layers").children("layer")) {
    for (pugi::xml_node a : l.child("rt_info").children("attribute"))
      decompressions += std::string(a.attribute("name").as_string()) == "decompression";
    if (std::string(l.attribute("type").as_string()) == "Const" &&
        std::string(l.child("data").attribute("element_type").as_string()) == "f16") {
      ++f16_consts;
      EXPECT_EQ(l.child("data").attribute("size").as_int(), 3 * 4 * 2);  // [3, 4] halves
    }
  }
  EXPECT_EQ(decompressions, 1);
  EXPECT_EQ(f16_consts, 1);
}

}  // namespace
}  // namespace hfx
