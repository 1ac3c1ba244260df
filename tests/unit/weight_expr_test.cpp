// Weights as lazy expressions over a tensor source: each transform (row slice, transpose, + scalar,
// stack, quantize, cast) streamed through WeightFile gives exactly the bytes of the transform
// applied in memory; a transpose spanning several bands; equal expressions share stored bytes; a
// checkpoint whose tensors are a caller's buffers exports the same files as from safetensors.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/weight_file.h"
#include "core/quantize.h"
#include "export/exporter.h"
#include "io/checkpoint.h"
#include "ir/builder.h"
#include "models/model_builder.h"
#include "test_util.h"

namespace hfx {
namespace {

using test::read_file;
using test::TempDir;
using test::values_of;

std::vector<float> ramp(size_t n, float start = 0.0f, float step = 0.25f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

struct Source {
  TempDir dir;
  std::vector<float> w = ramp(4 * 6, -2.0f);    // [4, 6]
  std::vector<float> u = ramp(2 * 6, 10.0f);    // [2, 6]
  std::unique_ptr<SafetensorsFile> file;
  Source() {
    test::SafetensorsWriter().add_f32("w", {4, 6}, w).add_f32("u", {2, 6}, u).write(dir / "m.safetensors");
    file = std::make_unique<SafetensorsFile>(dir / "m.safetensors");
  }
  std::shared_ptr<const ConstantData> leaf(const std::string& name) { return ConstantData::of_tensor(*file->find(name)); }
};

// Streams `c` as `dtype` (transposed if asked) and returns the written values as floats.
std::vector<float> written(const std::shared_ptr<const ConstantData>& c, DType dtype, bool transpose, const TempDir& dir) {
  Value v;
  v.name = "c";
  v.dtype = dtype;
  v.shape.assign(c->src_shape.begin(), c->src_shape.end());
  v.constant = c;
  WeightFile wf(dir / "out.data", 64);
  const auto span = wf.append(v, transpose);
  wf.close();
  const std::string bytes = read_file(dir / "out.data").substr(span.offset, span.length);
  std::vector<float> out(bytes.size() / dtype_size(dtype));
  convert_floats(bytes.data(), dtype, out.data(), DType::F32, out.size());
  return out;
}

std::vector<float> transposed(const std::vector<float>& m, size_t rows, size_t cols) {
  std::vector<float> t(m.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  return t;
}

TEST(WeightExpr, EachTransformStreamsItsResult) {
  Source s;
  const std::vector<float> rows_1_3(s.w.begin() + 6, s.w.begin() + 18);
  EXPECT_EQ(written(ConstantData::slice_rows(s.leaf("w"), 1, 3), DType::F32, false, s.dir), rows_1_3);
  EXPECT_EQ(written(ConstantData::slice_rows(s.leaf("w"), 1, 3), DType::F32, true, s.dir), transposed(rows_1_3, 2, 6));
  // A transposed weight stored transposed is the source as it is (the two cancel).
  const auto t = ConstantData::transpose(s.leaf("w"));
  EXPECT_EQ(t->src_shape, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(written(t, DType::F32, false, s.dir), transposed(s.w, 4, 6));
  EXPECT_EQ(written(t, DType::F32, true, s.dir), s.w);
  // Under a slice, a transpose is evaluated (reading the operand's columns).
  const std::vector<float> wt = transposed(s.w, 4, 6);
  EXPECT_EQ(written(ConstantData::slice_rows(t, 2, 5), DType::F32, false, s.dir),
            std::vector<float>(wt.begin() + 8, wt.begin() + 20));
  std::vector<float> plus_one = s.w;
  for (float& x : plus_one) x += 1.0f;
  EXPECT_EQ(written(ConstantData::add_scalar(s.leaf("w"), 1.0), DType::F16, false, s.dir), plus_one);  // exact in f16
  std::vector<float> stacked(s.w.begin() + 18, s.w.end());
  stacked.insert(stacked.end(), s.u.begin(), s.u.end());
  const auto stack = ConstantData::stack({ConstantData::slice_rows(s.leaf("w"), 3, 4), s.leaf("u")});
  EXPECT_EQ(written(stack, DType::F32, false, s.dir), stacked);
  EXPECT_EQ(written(stack, DType::F32, true, s.dir), transposed(stacked, 3, 6));
}

// The MoE expert transforms: rows regrouped under another shape (both ways), two weights' rows
// interleaved, and MXFP4 bytes decoded (E2M1 codes, low nibble first, scale 2^(e - 127)).
TEST(WeightExpr, ViewInterleaveAndMxfp4) {
  Source s;
  const auto grouped = ConstantData::view(s.leaf("w"), {2, 2, 6});  // [4, 6] as [2, 2, 6]
  EXPECT_EQ(written(grouped, DType::F32, false, s.dir), s.w);
  const auto split = ConstantData::view(grouped, {8, 3});  // and rows split
  EXPECT_EQ(written(ConstantData::slice_rows(split, 3, 6), DType::F32, false, s.dir),
            std::vector<float>(s.w.begin() + 9, s.w.begin() + 18));
  std::vector<float> interleaved;
  for (size_t r = 0; r < 4; ++r) {
    const std::vector<float>& src = r % 2 ? s.u : s.w;
    const size_t row = r / 2;
    interleaved.insert(interleaved.end(), src.begin() + static_cast<long>(row * 6), src.begin() + static_cast<long>(row * 6 + 6));
  }
  const auto pair = ConstantData::interleave_rows(ConstantData::slice_rows(s.leaf("w"), 0, 2), s.leaf("u"));
  EXPECT_EQ(written(pair, DType::F32, false, s.dir), interleaved);

  TempDir dir;
  std::vector<uint8_t> blocks(2 * 16), exps{127, 129};  // two rows of one block: scales 1 and 4
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  test::SafetensorsWriter()
      .add("b", "U8", {2, 16}, std::string(reinterpret_cast<const char*>(blocks.data()), blocks.size()))
      .add("s", "U8", {2, 1}, std::string(reinterpret_cast<const char*>(exps.data()), exps.size()))
      .write(dir / "fp4.safetensors");
  SafetensorsFile file(dir / "fp4.safetensors");
  const float fp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  std::vector<float> want;
  for (size_t r = 0; r < 2; ++r)
    for (size_t j = 0; j < 16; ++j) {
      want.push_back(fp4[j] * (r ? 4.0f : 1.0f));
      want.push_back(fp4[15 - j] * (r ? 4.0f : 1.0f));
    }
  const auto decoded = ConstantData::mxfp4(ConstantData::of_tensor(*file.find("b")), ConstantData::of_tensor(*file.find("s")));
  EXPECT_EQ(decoded->src_shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(written(decoded, DType::F32, false, dir), want);
}

TEST(WeightExpr, QuantizesTheExpressionsRows) {
  Source s;
  WeightQuantization q;
  q.bits = 4;
  q.group_size = 16;
  TempDir dir;
  std::vector<float> w = ramp(4 * 32, -3.0f, 0.05f);
  test::SafetensorsWriter().add_f32("w", {4, 32}, w).write(dir / "q.safetensors");
  SafetensorsFile file(dir / "q.safetensors");
  const auto rows = ConstantData::slice_rows(ConstantData::of_tensor(*file.find("w")), 1, 3);
  std::vector<uint8_t> codes(2 * 32 / 2);
  std::vector<float> scales(2 * 2);
  quantize_rows(w.data() + 32, 2, 32, q, codes.data(), scales.data());
  Value v;
  v.name = "codes";
  v.dtype = DType::U8;
  v.shape = {2, 2, 8};
  v.constant = ConstantData::quantize(rows, q, false);
  WeightFile wf(dir / "out.data", 64);
  const auto span = wf.append(v, false);
  wf.close();
  EXPECT_EQ(values_of<uint8_t>(read_file(dir / "out.data").substr(span.offset, span.length)), codes);
  EXPECT_EQ(written(ConstantData::quantize(rows, q, true), DType::F32, false, dir), scales);
}

TEST(WeightExpr, TransposeAcrossBands) {
  // 2304 x 2048 float32 (18 MiB): the transpose reads its operand in more than one 16 MiB band.
  TempDir dir;
  const size_t rows = 2304, cols = 2048;
  std::vector<float> m(rows * cols);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i % 9973);
  test::SafetensorsWriter().add_f32("m", {static_cast<int64_t>(rows), static_cast<int64_t>(cols)}, m)
      .write(dir / "big.safetensors");
  SafetensorsFile file(dir / "big.safetensors");
  const auto t = ConstantData::transpose(ConstantData::of_tensor(*file.find("m")));
  const std::vector<float> got = written(ConstantData::slice_rows(t, 1000, 1003), DType::F32, false, dir);
  ASSERT_EQ(got.size(), 3 * rows);
  for (size_t i = 0; i < 3; ++i)
    for (size_t r = 0; r < rows; r += 97) EXPECT_EQ(got[i * rows + r], m[r * cols + 1000 + i]) << i << "," << r;
  EXPECT_EQ(got[2 * rows + rows - 1], m[(rows - 1) * cols + 1002]);
}

TEST(WeightExpr, KeysIdentifyEqualExpressions) {
  Source s;
  EXPECT_EQ(ConstantData::slice_rows(s.leaf("w"), 0, 2)->key(), ConstantData::slice_rows(s.leaf("w"), 0, 2)->key());
  EXPECT_NE(ConstantData::slice_rows(s.leaf("w"), 0, 2)->key(), ConstantData::slice_rows(s.leaf("w"), 2, 4)->key());
  EXPECT_NE(s.leaf("w")->key(), s.leaf("u")->key());
  EXPECT_NE(s.leaf("w")->key(), ConstantData::transpose(s.leaf("w"))->key());
  EXPECT_TRUE(ConstantData::add_scalar(s.leaf("w"), 1.0)->from_checkpoint());
  EXPECT_FALSE(ConstantData::of_bytes(std::vector<std::byte>(4), DType::F32, {1})->from_checkpoint());
  EXPECT_THROW(ConstantData::slice_rows(s.leaf("w"), 3, 5), Error);
  EXPECT_THROW(ConstantData::stack({s.leaf("w"), ConstantData::transpose(s.leaf("u"))}), Error);
}

// A tiny Llama checkpoint written as safetensors, whose tensors are also kept in memory.
struct TinyLlama {
  TempDir dir;
  nlohmann::json config = {{"model_type", "llama"}, {"architectures", {"LlamaForCausalLM"}},
                           {"vocab_size", 16}, {"hidden_size", 8}, {"intermediate_size", 12},
                           {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                           {"max_position_embeddings", 32}};
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors;
  TinyLlama() {
    const std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
        {"model.embed_tokens.weight", {16, 8}},       {"model.norm.weight", {8}},
        {"lm_head.weight", {16, 8}},                  {"model.layers.0.input_layernorm.weight", {8}},
        {"model.layers.0.post_attention_layernorm.weight", {8}},
        {"model.layers.0.self_attn.q_proj.weight", {8, 8}}, {"model.layers.0.self_attn.k_proj.weight", {4, 8}},
        {"model.layers.0.self_attn.v_proj.weight", {4, 8}}, {"model.layers.0.self_attn.o_proj.weight", {8, 8}},
        {"model.layers.0.mlp.gate_proj.weight", {12, 8}},   {"model.layers.0.mlp.up_proj.weight", {12, 8}},
        {"model.layers.0.mlp.down_proj.weight", {8, 12}}};
    test::SafetensorsWriter w;
    float start = 0.0f;
    for (const auto& [name, shape] : specs) {
      size_t n = 1;
      for (int64_t d : shape) n *= static_cast<size_t>(d);
      tensors[name] = {shape, ramp(n, start += 0.5f, 0.01f)};
      w.add_f32(name, shape, tensors[name].second);
    }
    w.write(dir / "model.safetensors");
    test::write_file(dir / "config.json", config.dump());
  }
};

TEST(TensorSource, CheckpointInMemoryExportsTheSameFiles) {
  TinyLlama m;
  ExportConfig config;
  config.generation.enabled = true;
  run_export(m.dir.path(), m.dir / "from_files", config);
  auto source = std::make_unique<MemoryTensorSource>("live model");
  for (const auto& [name, t] : m.tensors) source->add(name, DType::F32, t.first, t.second.data(), t.second.size() * 4);
  const Checkpoint in_memory(JsonConfig(m.config, "live model config"), std::nullopt, std::move(source));
  run_export(in_memory, m.dir / "from_memory", config);
  for (const char* f : {"prefill.onnx", "decode.onnx", "model.onnx.data", "export.json"})
    EXPECT_EQ(read_file(m.dir / "from_files" / f), read_file(m.dir / "from_memory" / f)) << f;
  EXPECT_FALSE(std::filesystem::exists(m.dir / "from_memory" / "config.json"));  // no files to copy

  // The declared-tensor check names the source.
  auto partial = std::make_unique<MemoryTensorSource>("live model");
  const auto& norm = m.tensors.at("model.norm.weight");
  partial->add("model.norm.weight", DType::F32, norm.first, norm.second.data(), norm.second.size() * 4);
  const Checkpoint missing(JsonConfig(m.config, "cfg"), std::nullopt, std::move(partial));
  EXPECT_HAS(test::error_of([&] { run_export(missing, m.dir / "never", config); }), "live model: missing tensor");
  EXPECT_FALSE(std::filesystem::exists(m.dir / "never"));
}

TEST(TensorSource, MemorySourceChecksWhatItIsGiven) {
  MemoryTensorSource s("buffers");
  std::vector<float> v(6);
  s.add("a", DType::F32, {2, 3}, v.data(), 24);
  EXPECT_HAS(test::error_of([&] { s.add("b", DType::F32, {2, 3}, v.data(), 20); }), "buffers: tensor 'b' holds 20 bytes");
  EXPECT_HAS(test::error_of([&] { s.add("a", DType::F32, {6}, v.data(), 24); }), "given twice");
  ASSERT_NE(s.find("a"), nullptr);
  EXPECT_EQ(s.find("a")->location(), "memory");
  EXPECT_EQ(s.tensors().size(), 1u);
}

}  // namespace
}  // namespace hfx
