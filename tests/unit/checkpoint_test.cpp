// hfx::Checkpoint (config + single or sharded safetensors) and hfx::JsonConfig (typed access whose
// errors name the file and the key).
#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "core/error.h"
#include "io/json_config.h"
#include "test_util.h"

namespace hfx {
namespace {

using nlohmann::json;
using test::error_of;
using test::SafetensorsWriter;
using test::TempDir;
using test::write_file;

const char* kConfig = R"({"model_type": "llama", "hidden_size": 4, "rope_scaling": null})";

std::vector<std::string> names_of(const Checkpoint& c) {
  std::vector<std::string> out;
  for (const TensorView* t : c.tensors()) out.push_back(t->name);
  return out;
}

void write_index(const TempDir& dir, const json& weight_map) {
  write_file(dir / "model.safetensors.index.json",
             json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());
}

// Two shards: a, b in shard 1 (F32, bf16) and c in shard 2; an index mapping all three.
void write_sharded(const TempDir& dir) {
  write_file(dir / "config.json", kConfig);
  SafetensorsWriter()
      .add_f32("model.a", {2}, {1.0f, 2.0f})
      .add("model.b", "BF16", {4}, std::string(8, '\x11'))
      .write(dir / "model-00001-of-00002.safetensors");
  SafetensorsWriter().add_f32("model.c", {1, 3}, {4.0f, 5.0f, 6.0f}).write(dir / "model-00002-of-00002.safetensors");
  write_index(dir, {{"model.a", "model-00001-of-00002.safetensors"},
                    {"model.b", "model-00001-of-00002.safetensors"},
                    {"model.c", "model-00002-of-00002.safetensors"}});
}

TEST(Checkpoint, SingleFile) {
  TempDir dir;
  write_file(dir / "config.json", kConfig);
  write_file(dir / "generation_config.json", R"({"eos_token_id": 2})");
  SafetensorsWriter()
      .add_f32("lm_head.weight", {2, 2}, {1, 2, 3, 4})
      .add("model.embed_tokens.weight", "BF16", {2, 8}, std::string(32, '\0'))
      .write(dir / "model.safetensors");

  const Checkpoint ckpt(dir.path());
  EXPECT_EQ(ckpt.dir(), dir.path());
  EXPECT_EQ(ckpt.config().string("model_type", ""), "llama");
  EXPECT_EQ(ckpt.config().positive("hidden_size"), 4);
  EXPECT_EQ(ckpt.config().where(), (dir / "config.json").string());
  ASSERT_TRUE(ckpt.generation_config().has_value());
  EXPECT_EQ(ckpt.generation_config()->integer("eos_token_id"), 2);
  EXPECT_EQ(names_of(ckpt), (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight"}));
  const TensorView* w = ckpt.find("lm_head.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::F32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ckpt.find("nope"), nullptr);
  EXPECT_EQ(ckpt.dominant_float_dtype(), DType::BF16);  // 32 bf16 bytes vs 16 f32 bytes
}

TEST(Checkpoint, DominantDtypeCountsBytes) {
  TempDir dir;
  write_file(dir / "config.json", kConfig);
  SafetensorsWriter()
      .add_f32("small", {1}, {1.0f})
      .add("big", "F16", {8}, std::string(16, '\0'))
      .add("ids", "I64", {4}, std::string(32, '\0'))  // not a float: ignored
      .write(dir / "model.safetensors");
  EXPECT_EQ(Checkpoint(dir.path()).dominant_float_dtype(), DType::F16);
}

TEST(Checkpoint, NoGenerationConfigIsFine) {
  TempDir dir;
  write_file(dir / "config.json", kConfig);
  SafetensorsWriter().add_f32("w", {1}, {1.0f}).write(dir / "model.safetensors");
  EXPECT_FALSE(Checkpoint(dir.path()).generation_config().has_value());
}

TEST(Checkpoint, ShardedWithIndex) {
  TempDir dir;
  write_sharded(dir);
  const Checkpoint ckpt(dir.path());
  EXPECT_EQ(names_of(ckpt), (std::vector<std::string>{"model.a", "model.b", "model.c"}));
  const TensorView* c = ckpt.find("model.c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(std::filesystem::path(c->location()).filename(), "model-00002-of-00002.safetensors");
  EXPECT_EQ(c->shape, (std::vector<int64_t>{1, 3}));
  float third;
  std::memcpy(&third, c->data + 8, 4);
  EXPECT_EQ(third, 6.0f);
  EXPECT_EQ(std::filesystem::path(ckpt.find("model.b")->location()).filename(), "model-00001-of-00002.safetensors");
  EXPECT_EQ(ckpt.find("model.b")->dtype, DType::BF16);
}

TEST(Checkpoint, ShardsWithoutIndexAreAllRead) {
  TempDir dir;
  write_file(dir / "config.json", kConfig);
  SafetensorsWriter().add_f32("x", {1}, {1.0f}).write(dir / "part-b.safetensors");
  SafetensorsWriter().add_f32("y", {1}, {2.0f}).write(dir / "part-a.safetensors");
  EXPECT_EQ(names_of(Checkpoint(dir.path())), (std::vector<std::string>{"x", "y"}));
}

TEST(CheckpointErrors, IndexNamesMissingShard) {
  TempDir dir;
  write_sharded(dir);
  std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
  const std::string msg = error_of([&] { Checkpoint c(dir.path()); });
  EXPECT_HAS(msg, (dir / "model.safetensors.index.json").string());
  EXPECT_HAS(msg, "model-00002-of-00002.safetensors");
  EXPECT_HAS(msg, "does not exist");
}

TEST(CheckpointErrors, IndexMapsTensorToShardThatLacksIt) {
  TempDir dir;
  write_sharded(dir);
  write_index(dir, {{"model.a", "model-00001-of-00002.safetensors"},
                    {"model.b", "model-00001-of-00002.safetensors"},
                    {"model.c", "model-00001-of-00002.safetensors"}});  // c lives in shard 2
  // Shard 2 is no longer referenced; c is only in a shard the index does not list.
  std::string msg = error_of([&] { Checkpoint c(dir.path()); });
  EXPECT_HAS(msg, "model.safetensors.index.json");
  EXPECT_HAS(msg, "'model.c'");
  EXPECT_HAS(msg, "does not hold it");

  write_index(dir, {{"model.a", "model-00002-of-00002.safetensors"},  // a lives in shard 1
                    {"model.b", "model-00001-of-00002.safetensors"},
                    {"model.c", "model-00002-of-00002.safetensors"}});
  msg = error_of([&] { Checkpoint c(dir.path()); });
  EXPECT_HAS(msg, "'model.a'");
  EXPECT_HAS(msg, "model-00002-of-00002.safetensors");
  EXPECT_HAS(msg, "does not hold it");

  write_index(dir, {{"model.a", "model-00001-of-00002.safetensors"},
                    {"model.ghost", "model-00001-of-00002.safetensors"}});
  msg = error_of([&] { Checkpoint c(dir.path()); });
  EXPECT_HAS(msg, "'model.ghost'");
}

TEST(CheckpointErrors, IndexNamesFileOutsideCheckpoint) {
  TempDir dir;
  write_sharded(dir);
  write_index(dir, {{"model.a", "../model-00001-of-00002.safetensors"}});
  EXPECT_HAS(error_of([&] { Checkpoint c(dir.path()); }), "outside the checkpoint");
  write_index(dir, {{"model.a", ".."}});
  EXPECT_HAS(error_of([&] { Checkpoint c(dir.path()); }), "outside the checkpoint");
  write_index(dir, {{"model.a", 3}});
  EXPECT_HAS(error_of([&] { Checkpoint c(dir.path()); }), "not a file name");
  write_file(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_HAS(error_of([&] { Checkpoint c(dir.path()); }), "'weight_map'");
}

TEST(CheckpointErrors, MissingConfig) {
  TempDir dir;
  SafetensorsWriter().add_f32("w", {1}, {1.0f}).write(dir / "model.safetensors");
  const std::string msg = error_of([&] { Checkpoint c(dir.path()); });
  EXPECT_HAS(msg, dir.path().string());
  EXPECT_HAS(msg, "config.json");
}

TEST(CheckpointErrors, ConfigNotJson) {
  TempDir dir;
  write_file(dir / "config.json", R"({"model_type": "llama",)");
  SafetensorsWriter().add_f32("w", {1}, {1.0f}).write(dir / "model.safetensors");
  const std::string msg = error_of([&] { Checkpoint c(dir.path()); });
  EXPECT_HAS(msg, (dir / "config.json").string());
  EXPECT_HAS(msg, "not valid JSON");

  write_file(dir / "config.json", "[1]");
  EXPECT_HAS(error_of([&] { Checkpoint c(dir.path()); }), "not a JSON object");
}

TEST(CheckpointErrors, TensorDuplicatedAcrossShards) {
  TempDir dir;
  write_sharded(dir);
  // Shard 2 also carries model.a; the index still maps it to shard 1.
  SafetensorsWriter()
      .add_f32("model.c", {1, 3}, {4.0f, 5.0f, 6.0f})
      .add_f32("model.a", {2}, {9.0f, 9.0f})
      .write(dir / "model-00002-of-00002.safetensors");
  std::string msg = error_of([&] { Checkpoint c(dir.path()); });
  EXPECT_HAS(msg, "'model.a'");
  EXPECT_HAS(msg, "also appears in");
  EXPECT_HAS(msg, "model-00001-of-00002.safetensors");
  EXPECT_HAS(msg, "model-00002-of-00002.safetensors");

  // The same without an index (directory scan).
  std::filesystem::remove(dir / "model.safetensors.index.json");
  msg = error_of([&] { Checkpoint c(dir.path()); });
  EXPECT_HAS(msg, "'model.a'");
  EXPECT_HAS(msg, "also appears in");
}

TEST(CheckpointErrors, NoWeightsOrNotADirectory) {
  TempDir dir;
  write_file(dir / "config.json", kConfig);
  EXPECT_HAS(error_of([&] { Checkpoint c(dir.path()); }), "no model.safetensors");
  EXPECT_HAS(error_of([&] { Checkpoint c(dir / "config.json"); }), "not a directory");
  EXPECT_HAS(error_of([&] { Checkpoint c(dir / "absent"); }), "not a directory");
}

TEST(CheckpointErrors, MalformedShardNamesTheShard) {
  TempDir dir;
  write_sharded(dir);
  write_file(dir / "model-00002-of-00002.safetensors", "");
  const std::string msg = error_of([&] { Checkpoint c(dir.path()); });
  EXPECT_HAS(msg, (dir / "model-00002-of-00002.safetensors").string());
  EXPECT_HAS(msg, "empty");
}

// --- JsonConfig ---------------------------------------------------------------------------

JsonConfig config() {
  return JsonConfig(json::parse(R"({
    "hidden_size": 64, "zero": 0, "negative": -1, "float_int": 8.0, "fraction": 0.5, "huge": 1e300,
    "name": "llama", "flag": true, "unset": null, "theta": 10000,
    "rope_scaling": {"factor": 8.0, "type": "llama3", "bad": "x"}, "list": [1, 2]
  })"),
                    "cfg/config.json");
}

TEST(JsonConfig, ReadsTypedValues) {
  const JsonConfig c = config();
  EXPECT_TRUE(c.has("hidden_size"));
  EXPECT_EQ(c.integer("hidden_size"), 64);
  EXPECT_EQ(c.positive("hidden_size"), 64);
  EXPECT_EQ(c.integer("float_int"), 8);  // 8.0 is an integer
  EXPECT_EQ(c.integer("absent", 3), 3);
  EXPECT_EQ(c.positive("absent", 5), 5);
  EXPECT_EQ(c.number("theta"), 10000.0);  // integers are numbers
  EXPECT_EQ(c.number("fraction"), 0.5);
  EXPECT_EQ(c.number("absent", 1.5), 1.5);
  EXPECT_TRUE(c.boolean("flag", false));
  EXPECT_FALSE(c.boolean("absent", false));
  EXPECT_EQ(c.string("name", ""), "llama");
  EXPECT_EQ(c.string("absent", "dflt"), "dflt");
  const auto sub = c.object("rope_scaling");
  ASSERT_TRUE(sub.has_value());
  EXPECT_EQ(sub->number("factor"), 8.0);
  EXPECT_EQ(sub->string("type", ""), "llama3");
  EXPECT_HAS(sub->where(), "cfg/config.json");
  EXPECT_HAS(sub->where(), "rope_scaling");
  EXPECT_FALSE(c.object("absent").has_value());
}

TEST(JsonConfig, MissingRequiredKeyNamesFileAndKey) {
  const JsonConfig c = config();
  for (const auto& fn : std::vector<std::function<void()>>{
           [&] { c.integer("num_attention_heads"); }, [&] { c.positive("num_attention_heads"); },
           [&] { c.number("num_attention_heads"); }, [&] { c.at("num_attention_heads"); }}) {
    const std::string msg = error_of(fn);
    EXPECT_HAS(msg, "cfg/config.json");
    EXPECT_HAS(msg, "'num_attention_heads'");
    EXPECT_HAS(msg, "missing");
  }
}

TEST(JsonConfig, WrongTypeNamesKeyAndValue) {
  const JsonConfig c = config();
  std::string msg = error_of([&] { c.integer("name"); });
  EXPECT_HAS(msg, "cfg/config.json");
  EXPECT_HAS(msg, "'name'");
  EXPECT_HAS(msg, "integer");
  EXPECT_HAS(msg, "\"llama\"");
  EXPECT_HAS(error_of([&] { c.integer("fraction"); }), "integer");
  EXPECT_HAS(error_of([&] { c.integer("flag"); }), "integer");
  EXPECT_HAS(error_of([&] { c.integer("list"); }), "integer");
  EXPECT_HAS(error_of([&] { c.integer("huge"); }), "'huge'");  // out of int64 range
  EXPECT_HAS(error_of([&] { c.number("name"); }), "must be a number");
  EXPECT_HAS(error_of([&] { c.boolean("hidden_size", false); }), "true or false");
  EXPECT_HAS(error_of([&] { c.string("hidden_size", ""); }), "must be a string");
  EXPECT_HAS(error_of([&] { c.object("name"); }), "must be an object");
  msg = error_of([&] { c.object("rope_scaling")->number("bad"); });
  EXPECT_HAS(msg, "rope_scaling");
  EXPECT_HAS(msg, "'bad'");
}

TEST(JsonConfig, PositiveRejectsZeroAndNegative) {
  const JsonConfig c = config();
  std::string msg = error_of([&] { c.positive("zero"); });
  EXPECT_HAS(msg, "'zero'");
  EXPECT_HAS(msg, "positive");
  EXPECT_HAS(msg, "got 0");
  msg = error_of([&] { c.positive("negative"); });
  EXPECT_HAS(msg, "'negative'");
  EXPECT_HAS(msg, "got -1");
  // A present-but-invalid key does not fall back to the default.
  EXPECT_HAS(error_of([&] { c.positive("zero", 7); }), "positive");
  EXPECT_EQ(c.integer("zero"), 0);
  EXPECT_EQ(c.integer("negative"), -1);
}

TEST(JsonConfig, NullCountsAsAbsent) {
  const JsonConfig c = config();
  EXPECT_FALSE(c.has("unset"));
  EXPECT_FALSE(c.has("never_there"));
  EXPECT_EQ(c.integer("unset", 11), 11);
  EXPECT_EQ(c.positive("unset", 12), 12);
  EXPECT_EQ(c.number("unset", 0.25), 0.25);
  EXPECT_TRUE(c.boolean("unset", true));
  EXPECT_EQ(c.string("unset", "x"), "x");
  EXPECT_FALSE(c.object("unset").has_value());
  const std::string msg = error_of([&] { c.integer("unset"); });
  EXPECT_HAS(msg, "'unset'");
  EXPECT_HAS(msg, "missing");
}

TEST(JsonConfig, ReadJsonFileErrors) {
  TempDir dir;
  EXPECT_HAS(error_of([&] { read_json_file(dir / "absent.json"); }), "cannot read");
  write_file(dir / "bad.json", "{");
  std::string msg = error_of([&] { read_json_file(dir / "bad.json"); });
  EXPECT_HAS(msg, (dir / "bad.json").string());
  EXPECT_HAS(msg, "not valid JSON");
  write_file(dir / "str.json", "\"text\"");
  EXPECT_HAS(error_of([&] { read_json_file(dir / "str.json"); }), "not a JSON object");
  write_file(dir / "ok.json", R"({"a": 1})");
  EXPECT_EQ(read_json_file(dir / "ok.json").at("a"), 1);
}

}  // namespace
}  // namespace hfx
