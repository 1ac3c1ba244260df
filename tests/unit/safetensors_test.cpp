// hfx::SafetensorsFile: a valid file reads back exactly; every malformed file throws an Error
// whose message names the file and the defect.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "test_util.h"

namespace hfx {
namespace {

using nlohmann::json;
using test::bytes_of;
using test::error_of;
using test::SafetensorsWriter;
using test::TempDir;

std::string bytes_at(const TensorInfo& t) {
  return std::string(reinterpret_cast<const char*>(t.data), t.nbytes);
}

TEST(Safetensors, ReadsValidFile) {
  TempDir dir;
  const std::vector<float> f32{1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, 65504.0f};
  const std::vector<uint16_t> f16{0x3c00, 0xc000, 0x7bff};       // 1, -2, 65504
  const std::vector<uint16_t> bf16{0x3f80, 0x4049, 0xbf80, 0x0000};  // 1, ~3.14, -1, 0
  const std::vector<int64_t> i64{-1, 0, 1LL << 40};
  SafetensorsWriter w;
  w.add_f32("model.embed.weight", {2, 3}, f32)
      .add("half", "F16", {3}, bytes_of(f16))
      .add("brain", "BF16", {2, 2}, bytes_of(bf16))
      .add("ids", "I64", {3}, bytes_of(i64))
      .add("scalar", "F32", {}, bytes_of(std::vector<float>{42.0f}))
      .metadata("format", "pt");
  const auto path = dir / "model.safetensors";
  w.write(path);

  const SafetensorsFile file(path);
  EXPECT_EQ(file.path(), path);
  ASSERT_EQ(file.tensors().size(), 5u);
  EXPECT_EQ(file.metadata().size(), 1u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.find("__metadata__"), nullptr);
  EXPECT_EQ(file.find("missing"), nullptr);

  const TensorInfo* e = file.find("model.embed.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->name, "model.embed.weight");
  EXPECT_EQ(e->dtype, DType::F32);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(e->numel(), 6);
  EXPECT_EQ(e->nbytes, 24u);
  EXPECT_EQ(bytes_at(*e), bytes_of(f32));
  float second;
  std::memcpy(&second, e->data + 4, 4);
  EXPECT_EQ(second, -2.5f);

  const TensorInfo* h = file.find("half");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->dtype, DType::F16);
  EXPECT_EQ(h->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(bytes_at(*h), bytes_of(f16));

  const TensorInfo* b = file.find("brain");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::BF16);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(b->nbytes, 8u);
  EXPECT_EQ(bytes_at(*b), bytes_of(bf16));

  const TensorInfo* ids = file.find("ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype, DType::I64);
  EXPECT_EQ(bytes_at(*ids), bytes_of(i64));

  const TensorInfo* s = file.find("scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->numel(), 1);
  EXPECT_EQ(s->nbytes, 4u);

  // Data pointers lie in one mapping, 8 + header bytes from its start, and name their file.
  for (const TensorInfo& t : file.tensors()) {
    EXPECT_EQ(t.file, e->file);
    EXPECT_EQ(file.find(t.name), &t);
  }
  ASSERT_NE(e->file, nullptr);
  const std::byte* base = e->file->data() + 8 + w.header().dump().size();
  EXPECT_EQ(e->data, base + w.header()["model.embed.weight"]["data_offsets"][0].get<size_t>());
  EXPECT_EQ(ids->data, base + w.header()["ids"]["data_offsets"][0].get<size_t>());
  e->release();  // must be harmless; the bytes stay readable (MAP_PRIVATE, file-backed)
  EXPECT_EQ(bytes_at(*e), bytes_of(f32));
}

TEST(Safetensors, AcceptsHeaderPaddingAndEmptyHeader) {
  TempDir dir;
  // Writers pad the header with spaces to an 8-byte boundary.
  SafetensorsWriter w;
  w.add_f32("a", {1}, {7.0f});
  const auto padded = dir / "padded.safetensors";
  test::write_file(padded, test::safetensors_bytes(w.header().dump() + "     ", w.data()));
  const SafetensorsFile p(padded);
  ASSERT_NE(p.find("a"), nullptr);
  EXPECT_EQ(bytes_at(*p.find("a")), w.data());

  const auto empty = dir / "empty_header.safetensors";
  test::write_file(empty, test::safetensors_bytes(std::string("{}"), ""));
  const SafetensorsFile e(empty);
  EXPECT_TRUE(e.tensors().empty());
  EXPECT_TRUE(e.metadata().empty());
}

// A zero-element tensor ([0], data_offsets [x, x]) overlaps nothing, whatever its name sorts as.
// Regression test (fixed in src/io/safetensors.cpp, overlap check after std::sort by begin only): when the empty
// tensor's begin equals another tensor's begin and its name sorts after it ("b" then "z"), the
// pair is compared as (b [0,8], z [0,0]) and `0 < 8` reports a false overlap. The reference
// implementation sorts by (begin, end) and accepts this file.
TEST(Safetensors, ZeroSizedTensorSharingBeginIsNotAnOverlap) {
  TempDir dir;
  json header = {{"b", {{"dtype", "F16"}, {"shape", {4}}, {"data_offsets", {0, 8}}}},
                 {"z", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {0, 0}}}}};
  const auto path = dir / "empty_tensor.safetensors";
  test::write_file(path, test::safetensors_bytes(header, std::string(8, '\x01')));
  try {
    const SafetensorsFile file(path);
    ASSERT_NE(file.find("z"), nullptr);
    EXPECT_EQ(file.find("z")->nbytes, 0u);
    EXPECT_EQ(file.find("z")->numel(), 0);
    EXPECT_EQ(file.find("b")->nbytes, 8u);
  } catch (const Error& e) {
    ADD_FAILURE() << "valid file rejected: " << e.what();
  }
}

// Writes `bytes` as `name` and returns the message of the Error that opening it must throw,
// after checking that the message names the file.
std::string open_error(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const auto path = dir / name;
  test::write_file(path, bytes);
  const std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_HAS(msg, (path.string())) << "message does not name the file";
  return msg;
}

json entry(const std::string& dtype, std::vector<int64_t> shape, uint64_t begin, uint64_t end) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

TEST(SafetensorsMalformed, EmptyFile) {
  TempDir dir;
  EXPECT_HAS(open_error(dir, "empty.safetensors", ""), ("empty"));
}

TEST(SafetensorsMalformed, ShorterThanHeaderLength) {
  TempDir dir;
  EXPECT_HAS(open_error(dir, "short.safetensors", "\x02\x00\x00"), ("truncated"));
  EXPECT_HAS(open_error(dir, "seven.safetensors", std::string(7, '\0')), ("truncated"));
}

TEST(SafetensorsMalformed, AbsurdHeaderLength) {
  TempDir dir;
  const std::string msg =
      open_error(dir, "huge.safetensors", test::le64(kMaxSafetensorsHeader + 1) + "{}");
  EXPECT_HAS(msg, ("header length"));
  EXPECT_HAS(msg, ("limit"));
  // A header length with the top bit set must not wrap around any size arithmetic.
  EXPECT_HAS(open_error(dir, "wrap.safetensors", test::le64(~uint64_t{0}) + "{}"), ("limit"));
}

TEST(SafetensorsMalformed, HeaderLongerThanFile) {
  TempDir dir;
  const std::string msg = open_error(dir, "cut.safetensors", test::le64(100) + R"({"a": 1})");
  EXPECT_HAS(msg, ("truncated"));
  EXPECT_HAS(msg, ("100"));
}

TEST(SafetensorsMalformed, HeaderNotJson) {
  TempDir dir;
  EXPECT_HAS(open_error(dir, "text.safetensors", test::safetensors_bytes(std::string("{not json"), "")), ("not valid JSON"));
}

TEST(SafetensorsMalformed, HeaderNotObject) {
  TempDir dir;
  EXPECT_HAS(open_error(dir, "array.safetensors", test::safetensors_bytes(std::string("[1, 2]"), "")), ("not a JSON object"));
}

TEST(SafetensorsMalformed, UnknownDtype) {
  TempDir dir;
  const std::string msg =
      open_error(dir, "dtype.safetensors", test::safetensors_bytes(json{{"w", entry("F7", {1}, 0, 4)}},
                                                                   std::string(4, '\0')));
  EXPECT_HAS(msg, ("unknown dtype"));
  EXPECT_HAS(msg, ("F7"));
  EXPECT_HAS(msg, ("'w'"));
}

TEST(SafetensorsMalformed, ShapeDoesNotMatchByteLength) {
  TempDir dir;
  const std::string msg =
      open_error(dir, "shape.safetensors", test::safetensors_bytes(json{{"w", entry("F32", {2, 3}, 0, 20)}},
                                                                   std::string(20, '\0')));
  EXPECT_HAS(msg, ("'w'"));
  EXPECT_HAS(msg, ("needs 24 bytes"));
  EXPECT_HAS(msg, ("span 20"));
}

TEST(SafetensorsMalformed, ShapeOverflow) {
  TempDir dir;
  const int64_t big = int64_t{1} << 40;
  EXPECT_HAS(open_error(dir, "overflow.safetensors",
                         test::safetensors_bytes(json{{"w", entry("F32", {big, big}, 0, 4)}}, std::string(4, '\0'))), ("overflow"));
}

TEST(SafetensorsMalformed, DataOffsetsPastEndOfData) {
  TempDir dir;
  // Header promises 16 bytes; only 12 follow (file truncated mid-tensor).
  const std::string msg = open_error(
      dir, "short_data.safetensors",
      test::safetensors_bytes(json{{"w", entry("F32", {4}, 0, 16)}}, std::string(12, '\0')));
  EXPECT_HAS(msg, ("'w'"));
  EXPECT_HAS(msg, ("past the end"));
  EXPECT_HAS(msg, ("truncated"));
}

TEST(SafetensorsMalformed, DataOffsetsEndBeforeBegin) {
  TempDir dir;
  const std::string msg = open_error(
      dir, "reversed.safetensors",
      test::safetensors_bytes(json{{"w", entry("F32", {1}, 8, 4)}}, std::string(8, '\0')));
  EXPECT_HAS(msg, ("'w'"));
  EXPECT_HAS(msg, ("before begin"));
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  TempDir dir;
  const std::string msg = open_error(
      dir, "overlap.safetensors",
      test::safetensors_bytes(json{{"a", entry("F32", {4}, 0, 16)}, {"b", entry("F32", {2}, 8, 16)}},
                              std::string(16, '\0')));
  EXPECT_HAS(msg, ("overlap"));
  EXPECT_HAS(msg, ("'a'"));
  EXPECT_HAS(msg, ("'b'"));
  // Identical ranges overlap too, and so does a tensor contained in a larger one listed later.
  EXPECT_HAS(open_error(dir, "same.safetensors",
                         test::safetensors_bytes(json{{"a", entry("F32", {2}, 0, 8)}, {"b", entry("F32", {2}, 0, 8)}},
                                                 std::string(8, '\0'))), ("overlap"));
  EXPECT_HAS(open_error(dir, "inside.safetensors",
                         test::safetensors_bytes(json{{"a", entry("F32", {1}, 4, 8)}, {"z", entry("F32", {4}, 0, 16)}},
                                                 std::string(16, '\0'))), ("overlap"));
}

TEST(SafetensorsMalformed, NegativeDim) {
  TempDir dir;
  const std::string msg = open_error(
      dir, "negative.safetensors",
      test::safetensors_bytes(json{{"w", entry("F32", {-1, 1}, 0, 4)}}, std::string(4, '\0')));
  EXPECT_HAS(msg, ("'w'"));
  EXPECT_HAS(msg, ("negative"));
}

TEST(SafetensorsMalformed, NonIntegerDim) {
  TempDir dir;
  json h = {{"w", {{"dtype", "F32"}, {"shape", {1.5}}, {"data_offsets", {0, 4}}}}};
  EXPECT_HAS(open_error(dir, "float_dim.safetensors", test::safetensors_bytes(h, std::string(4, '\0'))), ("non-integer"));
}

TEST(SafetensorsMalformed, MissingDataOffsets) {
  TempDir dir;
  json h = {{"w", {{"dtype", "F32"}, {"shape", {1}}}}};
  const std::string msg = open_error(dir, "no_offsets.safetensors", test::safetensors_bytes(h, std::string(4, '\0')));
  EXPECT_HAS(msg, ("'w'"));
  EXPECT_HAS(msg, ("data_offsets"));
  // Wrong arity and negative offsets are rejected the same way.
  h["w"]["data_offsets"] = {0};
  EXPECT_HAS(open_error(dir, "one_offset.safetensors", test::safetensors_bytes(h, std::string(4, '\0'))), ("data_offsets"));
  h["w"]["data_offsets"] = {-4, 0};
  EXPECT_HAS(open_error(dir, "neg_offset.safetensors", test::safetensors_bytes(h, std::string(4, '\0'))), ("data_offsets"));
}

TEST(SafetensorsMalformed, MissingDtypeOrShapeOrBadEntry) {
  TempDir dir;
  EXPECT_HAS(open_error(dir, "no_dtype.safetensors",
                         test::safetensors_bytes(json{{"w", {{"shape", {1}}, {"data_offsets", {0, 4}}}}},
                                                 std::string(4, '\0'))), ("dtype"));
  EXPECT_HAS(open_error(dir, "no_shape.safetensors",
                         test::safetensors_bytes(json{{"w", {{"dtype", "F32"}, {"data_offsets", {0, 4}}}}},
                                                 std::string(4, '\0'))), ("shape"));
  EXPECT_HAS(open_error(dir, "scalar_entry.safetensors", test::safetensors_bytes(json{{"w", 3}}, "")), ("not an object"));
  EXPECT_HAS(open_error(dir, "bad_meta.safetensors", test::safetensors_bytes(json{{"__metadata__", 3}}, "")), ("__metadata__"));
}

TEST(SafetensorsMalformed, MissingFile) {
  TempDir dir;
  const auto path = dir / "absent.safetensors";
  const std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_HAS(msg, (path.string()));
  EXPECT_HAS(msg, ("cannot open"));
}

}  // namespace
}  // namespace hfx
