// config.json as Python writes it: bare Infinity / NaN (json.dumps of a 4.x config), and
// transformers 5.x's {"__float__": ...} objects.
#include <gtest/gtest.h>

#include <cmath>

#include "io/json_config.h"
#include "test_util.h"

namespace hfx {
namespace {

using test::TempDir;
using test::write_file;

TEST(JsonConfig, ReadsPythonFloatLiteralsOutsideStrings) {
  TempDir dir;
  write_file(dir / "config.json", R"({"limit": [0.0, Infinity], "low": -Infinity, "nan": NaN, "name": "Infinity NaN"})");
  const nlohmann::json j = read_json_file(dir / "config.json");
  EXPECT_EQ(python_float(j["limit"][0]), 0.0);
  EXPECT_EQ(python_float(j["limit"][1]), INFINITY);
  EXPECT_EQ(python_float(j["low"]), -INFINITY);
  EXPECT_TRUE(std::isnan(python_float(j["nan"]).value()));
  EXPECT_EQ(j["name"], "Infinity NaN");  // inside a string: untouched
}

TEST(JsonConfig, ReadsTransformers5FloatObjects) {
  EXPECT_EQ(python_float(nlohmann::json::parse(R"({"__float__": "Infinity"})")), INFINITY);
  EXPECT_EQ(python_float(nlohmann::json(0.5)), 0.5);
  EXPECT_FALSE(python_float(nlohmann::json("fast")).has_value());
  EXPECT_FALSE(python_float(nlohmann::json::parse(R"({"x": 1})")).has_value());
}

TEST(JsonConfig, StillRefusesBrokenJson) {
  TempDir dir;
  write_file(dir / "config.json", R"({"limit": [0.0, Infinit]})");
  EXPECT_THROW(read_json_file(dir / "config.json"), std::exception);
}

}  // namespace
}  // namespace hfx
