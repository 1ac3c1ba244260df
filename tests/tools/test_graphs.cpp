// Writes tiny hand-built graphs in every format this build has, through each backend's own passes
// and writer as the driver runs them: one per state update policy the frontends declare beyond the
// decoder caches (replace, ring, write-once; tests/parity/test_state_policies.py), and one per IR op
// no model family uses yet (tests/parity/test_ir_ops.py). The tests run each in its runtime
// against NumPy / torch.
//
//   hfx_test_graphs OUT_DIR   -> OUT_DIR/<case>-<format>/..., and an index on stdout
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "backends/backend.h"
#include "core/error.h"
#include "export/exporter.h"
#include "ir/builder.h"

namespace hfx {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Part {
  Role role;
  std::unique_ptr<Graph> graph;
};
using Build = std::function<std::vector<Part>(int64_t batch)>;

// h' = 0.5 h + x; y = 2 h' (a recurrence whose state each call replaces).
std::vector<Part> replace_graph(int64_t batch) {
  auto g = std::make_unique<Graph>();
  Builder b(*g);
  Value* x = b.input("x", DType::F32, {batch, 3});
  const int64_t s = b.declare_state({"past_ssm.0", StateKind::Recurrent, StateUpdatePolicy::Replace, DType::F32, {batch, 3}});
  Value* h = b.state_read(s);
  Value* next = b.add(b.mul(h, b.scalar(0.5, DType::F32)), x);
  next = b.state_update(s, h, next, nullptr, {batch, 3});
  b.output(b.mul(next, b.scalar(2.0, DType::F32)), "y");
  b.output(next, "h");  // the state's value is also an output (an RNN returning h')
  std::vector<Part> parts;
  parts.push_back({Role::Decode, std::move(g)});
  return parts;
}

// x [batch, S, 2] written at position_ids mod 4 into a [batch, 1, 4, 2] ring; y is the ring after
// the write.
std::vector<Part> ring_graph(int64_t batch) {
  auto g = std::make_unique<Graph>();
  Builder b(*g);
  const Symbol* query = g->symbol("sequence_length", 1, 4);
  Value* x = b.input("x", DType::F32, {batch, query, 2});
  Value* positions = b.input("position_ids", DType::I64, {batch, query});
  const int64_t s = b.declare_state({"past_key_values.0.key", StateKind::KeyValue, StateUpdatePolicy::Ring, DType::F32,
                                     {batch, 1, 4, 2}, /*window=*/4});
  Value* ring = b.state_update(s, b.state_read(s), b.unsqueeze(x, {1}), positions, {batch, 1, 4, 2});
  b.output(b.mul(ring, b.scalar(1.0, DType::F32)), "y");
  std::vector<Part> parts;
  parts.push_back({Role::Decode, std::move(g)});
  return parts;
}

// An encoder computes the state once (2 e); a decoder step reads it: y = x * state.
std::vector<Part> write_once_graphs(int64_t batch) {
  const StateDecl cross{"past_key_values.0.encoder.key", StateKind::CrossKeyValue, StateUpdatePolicy::WriteOnce,
                        DType::F32, {batch, 3}};
  auto encoder = std::make_unique<Graph>();
  {
    Builder b(*encoder);
    Value* e = b.input("encoder_input", DType::F32, {batch, 3});
    const int64_t s = b.declare_state(cross);
    b.state_update(s, nullptr, b.mul(e, b.scalar(2.0, DType::F32)), nullptr, {batch, 3});
    b.output(b.add(e, b.scalar(1.0, DType::F32)), "last_hidden_state");
  }
  auto decoder = std::make_unique<Graph>();
  {
    Builder b(*decoder);
    Value* x = b.input("x", DType::F32, {batch, 3});
    const int64_t s = b.declare_state(cross);
    b.output(b.mul(x, b.state_read(s)), "y");
  }
  std::vector<Part> parts;
  parts.push_back({Role::Encoder, std::move(encoder)});
  parts.push_back({Role::Decoder, std::move(decoder)});
  return parts;
}

// One op over x [2, 5, 3] (its sequence axis symbolic), as the plain forward.
std::vector<Part> op_graph(const std::function<Value*(Builder&, Value*)>& op, DType dtype = DType::F32) {
  auto g = std::make_unique<Graph>();
  Builder b(*g);
  const Symbol* sequence = g->symbol("sequence", 1, 8);
  Value* x = b.input("x", dtype, {2, sequence, 3});
  b.output(op(b, x), "y");
  std::vector<Part> parts;
  parts.push_back({Role::Forward, std::move(g)});
  return parts;
}

std::vector<Part> softplus_graph(int64_t) {
  return op_graph([](Builder& b, Value* x) { return b.emit(OpKind::Softplus, {x}); });
}
std::vector<Part> log_graph(int64_t) {
  return op_graph([](Builder& b, Value* x) { return b.unary(OpKind::Log, x); });
}
std::vector<Part> cumsum_graph(int64_t) {
  return op_graph([](Builder& b, Value* x) { return b.cumsum(x, 1); });
}
std::vector<Part> mod_graph(int64_t) {
  return op_graph([](Builder& b, Value* x) { return b.mod(x, b.const_i64({5}, {})); }, DType::I64);
}

std::vector<Part> pad_graph(int64_t) {
  return op_graph([](Builder& b, Value* x) { return b.pad(x, {0, 2, 1}, {0, 1, 0}, 0.5); });
}

// sin(i) / 2 over the flat index, the weights tests/parity/test_ir_ops.py rebuilds.
Value* sine_weights(Builder& b, std::vector<int64_t> shape) {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  std::vector<float> w(static_cast<size_t>(count));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(std::sin(static_cast<double>(i)) / 2);
  return b.const_f32(w, std::move(shape));
}
Value* ramp(Builder& b, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>(i);
  return b.const_f32(v, {n});
}

// x [2, channels, length] (length symbolic) through `conv`, as the plain forward.
std::vector<Part> conv1d_graph(int64_t channels, const std::function<Value*(Builder&, Value*)>& conv) {
  auto g = std::make_unique<Graph>();
  Builder b(*g);
  const Symbol* length = g->symbol("length", 4, 16);
  Value* x = b.input("x", DType::F32, {2, channels, length});
  b.output(conv(b, x), "y");
  std::vector<Part> parts;
  parts.push_back({Role::Forward, std::move(g)});
  return parts;
}

// Mamba's causal depthwise convolution: k - 1 zeros before, groups = channels, bias; the result
// has the input's length again (length + 2 - 3 + 1 is the same dim).
std::vector<Part> causal_conv_graph(int64_t) {
  return conv1d_graph(4, [](Builder& b, Value* x) {
    Value* padded = b.pad(x, {0, 0, 2}, {0, 0, 0});
    Value* y = b.conv(padded, sine_weights(b, {4, 1, 3}), ramp(b, 4), {1}, {0}, {1}, 4);
    HFX_CHECK(y->shape[2] == x->shape[2], "causal convolution changed the length");
    return b.mul(y, x);  // the dims agree, so the graph can combine them
  });
}

// Whisper's second convolution: stride 2, padding 1 ((length - 1) // 2 + 1 frames).
std::vector<Part> strided_conv_graph(int64_t) {
  return conv1d_graph(3, [](Builder& b, Value* x) {
    return b.conv(x, sine_weights(b, {5, 3, 3}), ramp(b, 5), {2}, {1}, {1});
  });
}

// A vision patch embedding: 4x4 patches of a [2, 3, 8, 8] image.
std::vector<Part> patch_conv_graph(int64_t) {
  auto g = std::make_unique<Graph>();
  Builder b(*g);
  Value* x = b.input("x", DType::F32, {2, 3, 8, 8});
  b.output(b.conv(x, sine_weights(b, {4, 3, 4, 4}), ramp(b, 4), {4, 4}, {0, 0}, {1, 1}), "y");
  std::vector<Part> parts;
  parts.push_back({Role::Forward, std::move(g)});
  return parts;
}

// Grouped attention (4 query heads over 2 kv heads) with a causal mask and an additive bias
// input, as T5 and ALiBi models add position scores.
std::vector<Part> attention_bias_graph(int64_t) {
  auto g = std::make_unique<Graph>();
  Builder b(*g);
  Value* q = b.input("q", DType::F32, {1, 4, 3, 8});
  Value* k = b.input("k", DType::F32, {1, 2, 5, 8});
  Value* v = b.input("v", DType::F32, {1, 2, 5, 8});
  Value* mask = b.input("mask", DType::Bool, {1, 1, 3, 5});
  Value* bias = b.input("bias", DType::F32, {1, 4, 3, 5});
  b.output(b.attention(q, k, v, mask, {.scale = 1.0 / std::sqrt(8.0), .causal = false}, nullptr, bias), "y");
  std::vector<Part> parts;
  parts.push_back({Role::Forward, std::move(g)});
  return parts;
}

json tensors(const std::vector<TensorSpec>& specs) {
  json out = json::array();
  for (const TensorSpec& t : specs) {
    json shape = json::array();
    for (const Dim& d : t.shape) shape.push_back(d.is_static() ? json(d.value()) : json(d.symbol()->name));
    out.push_back({{"name", t.name}, {"dtype", std::string(dtype_name(t.dtype))}, {"shape", shape}});
  }
  return out;
}

json write_case(const Build& build, const json& backend_options, const std::string& format, const fs::path& dir) {
  ExportConfig config;
  config.format = format;
  config.backend = backend_options;
  const auto backend = make_backend(format);
  // A .pte's in-place state takes batch 1; the other runtimes get two rows.
  const int64_t batch = format == "executorch" ? 1 : 2;
  fs::create_directories(dir);
  const auto writer = backend->writer(config, dir);
  json components = json::object();
  std::vector<Part> parts = build(batch);  // alive until finish(): writers store constants there
  for (Part& part : parts) {
    const std::string name(role_name(part.role));
    PassReport report;
    run_passes(*backend, backend->graph_config(config), name, *part.graph, report);
    const WrittenComponent w = writer->write(part.role, *part.graph);
    json states = json::array();
    for (const StatePair& p : part.graph->state_pairs)
      states.push_back({{"name", p.name},
                        {"input", p.input ? json(p.input->name) : json(nullptr)},
                        {"output", p.output ? json(p.output->name) : json(nullptr)},
                        {"carried", p.carried()}});
    components[name] = {{"file", w.file}, {"program", w.program}, {"stateful", w.stateful},
                        {"inputs", tensors(w.inputs)}, {"outputs", tensors(w.outputs)}, {"states", states}};
  }
  writer->finish();
  return {{"dir", dir.string()}, {"batch", batch}, {"components", components}};
}

}  // namespace
}  // namespace hfx

int main(int argc, char** argv) {
  using namespace hfx;
  if (argc != 2) {
    std::cerr << "usage: hfx_test_graphs OUT_DIR\n";
    return 2;
  }
  try {
    struct Case {
      std::string name;
      Build build;
      json backend = json::object();  // the config's backend options
    };
    const json decompose_softplus = {{"decompose", {"Softplus"}}};
    const std::vector<Case> cases = {
        {"replace", replace_graph}, {"ring", ring_graph}, {"write_once", write_once_graphs},
        {"softplus", softplus_graph}, {"softplus_decomposed", softplus_graph, decompose_softplus},
        {"log", log_graph}, {"cumsum", cumsum_graph}, {"mod", mod_graph}, {"pad", pad_graph},
        {"causal_conv", causal_conv_graph}, {"strided_conv", strided_conv_graph}, {"patch_conv", patch_conv_graph},
        {"attention_bias", attention_bias_graph}};
    json index = json::object();
    for (const Case& c : cases)
      for (const std::string& format : supported_formats())
        try {
          index[c.name][format] = write_case(c.build, c.backend, format, fs::path(argv[1]) / (c.name + "-" + format));
        } catch (const Error& e) {
          throw Error(c.name + " (" + format + "): " + e.what());
        }
    std::cout << index.dump(1) << "\n";
  } catch (const Error& e) {
    std::cerr << "hfx_state_policy_graphs: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
