// ExportConfig: the JSON round trip, typed reads that name the key, and the shared validation.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/export_config.h"
#include "test_util.h"

namespace hfx {
namespace {

using nlohmann::json;
using test::error_of;

TEST(ExportConfig, DefaultsAndRoundTrip) {
  const ExportConfig d = ExportConfig::from_json(json::object());
  EXPECT_EQ(d.format, "onnx");
  EXPECT_EQ(d.dtype, DType::F32);
  EXPECT_TRUE(d.dynamic);
  EXPECT_FALSE(d.generation.enabled);
  EXPECT_FALSE(d.quantization.enabled());

  const json j = {{"format", "openvino"},
                  {"dtype", "float16"},
                  {"dynamic", true},
                  {"dims", {{"batch", {{"min", 1}, {"max", 8}}}}},
                  {"generation", {{"cache_implementation", "static"}, {"max_cache_len", 64}, {"batch_size", 2}}},
                  {"quantization", {{"weights", "int4"}, {"group_size", 64}, {"compute", "float"}}},
                  {"backend", {{"op_profile", "ort"}}}};
  const ExportConfig c = ExportConfig::from_json(j);
  EXPECT_EQ(c.format, "openvino");
  EXPECT_EQ(c.dtype, DType::F16);
  EXPECT_EQ(c.dims.at("batch").max, 8);
  EXPECT_TRUE(c.generation.enabled);  // a cache implementation asks for generation components
  EXPECT_TRUE(c.generation.static_cache());
  EXPECT_EQ(c.generation.max_cache_len, 64);
  EXPECT_EQ(c.quantization.bits, 4);
  EXPECT_EQ(c.quantization.group_size, 64);
  EXPECT_EQ(c.quantization.compute, WeightQuantization::Compute::Float);
  EXPECT_EQ(c.backend, (json{{"op_profile", "ort"}}));
  // to_json -> from_json gives the same config, field for field.
  const ExportConfig again = ExportConfig::from_json(c.to_json());
  EXPECT_EQ(again.to_json(), c.to_json());
}

TEST(ExportConfig, TransformersSpellings) {
  const ExportConfig c = ExportConfig::from_json({{"export_format", "openvino"}, {"dynamic", false}});
  EXPECT_EQ(c.format, "openvino");
  EXPECT_FALSE(c.dynamic);
}

TEST(ExportConfig, BadJsonNamesWhereAndKey) {
  EXPECT_HAS(error_of([] { ExportConfig::from_json({{"dynamc", true}}, "cfg.json"); }), "cfg.json: unknown key 'dynamc'");
  EXPECT_HAS(error_of([] { ExportConfig::from_json({{"dtype", "int8"}}, "cfg.json"); }), "'dtype'");
  EXPECT_HAS(error_of([] { ExportConfig::from_json({{"generation", {{"max_cache_len", "8"}}}}, "c"); }),
             "c.generation: 'max_cache_len' must be an integer");
  EXPECT_HAS(error_of([] { ExportConfig::from_json({{"quantization", {{"weights", "int3"}}}}, "c"); }), "int3");
  EXPECT_HAS(error_of([] { ExportConfig::from_json({{"dims", {{"batch", {{"low", 1}}}}}}, "c"); }),
             "c.dims.batch: unknown key 'low'");
  EXPECT_HAS(error_of([] { ExportConfig::from_json(json::array(), "c"); }), "must be a JSON object");
}

TEST(ExportConfig, ValidationSpellsFieldsAsTheFrontEndDoes) {
  ExportConfig c;
  c.generation.multi_token_decode = true;
  EXPECT_HAS(error_of([&] { c.validate(); }), "generation.multi_token_decode needs generation.enabled");
  auto flags = [](std::string_view field) { return field == "generation.enabled" ? std::string("--for-generation") : std::string(field); };
  EXPECT_HAS(error_of([&] { c.validate(flags); }), "needs --for-generation");

  ExportConfig s;
  s.generation.enabled = true;
  s.generation.cache_implementation = "static";
  EXPECT_HAS(error_of([&] { s.validate(); }), "generation.max_cache_len");
  s.generation.max_cache_len = 16;
  EXPECT_NO_THROW(s.validate());
  s.generation.cache_implementation = "sliding";
  EXPECT_HAS(error_of([&] { s.validate(); }), "'sliding' is not a cache implementation");

  ExportConfig q;
  q.quantization.group_size = 64;
  EXPECT_HAS(error_of([&] { q.validate(); }), "apply only with quantization.weights");
  q.quantization.bits = 4;
  q.quantization.group_size = 24;
  EXPECT_HAS(error_of([&] { q.validate(); }), "power of two");

  ExportConfig d;
  d.dims["batch"] = {4, 2};
  EXPECT_HAS(error_of([&] { d.validate(); }), "'batch' needs 0 <= min <= max");
}

TEST(ExportConfig, DimBounds) {
  ExportConfig c;
  c.dims["batch"] = {2, 2};
  EXPECT_EQ(c.dim("batch", {1, 100}).max, 2);
  EXPECT_EQ(c.dim("sequence", {1, 100}).max, 100);
}

}  // namespace
}  // namespace hfx

namespace hfx {
namespace {

TEST(ExportConfig, InputsRoundTripAndRules) {
  const auto c = ExportConfig::from_json(json::parse(R"({"inputs": ["input_ids", "attention_mask"]})"));
  EXPECT_EQ(c.inputs, (std::vector<std::string>{"input_ids", "attention_mask"}));
  EXPECT_EQ(ExportConfig::from_json(c.to_json()).inputs, c.inputs);
  const ExportConfig unset;
  EXPECT_FALSE(unset.to_json().contains("inputs"));  // absent, as before the field existed
  const std::string not_a_list = error_of([] { ExportConfig::from_json(json::parse(R"({"inputs": "input_ids"})")); });
  EXPECT_NE(not_a_list.find("'inputs' must be a list"), std::string::npos);
  auto twice = ExportConfig::from_json(json::parse(R"({"inputs": ["input_ids", "input_ids"]})"));
  EXPECT_NE(error_of([&] { twice.validate(); }).find("named twice"), std::string::npos);
  auto generation =
      ExportConfig::from_json(json::parse(R"({"inputs": ["input_ids"], "generation": {"enabled": true}})"));
  EXPECT_NE(error_of([&] { generation.validate(); }).find("applies only to the plain forward"), std::string::npos);
}

}  // namespace
}  // namespace hfx
