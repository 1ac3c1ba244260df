// hfexport-openvino-generate: the decode loop for stateful OpenVINO exports, on OpenVINO's C++ API.
// `hfexport generate OUT_DIR ...` hands OpenVINO exports to this program when it is installed.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <openvino/openvino.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Options {
  fs::path out_dir;
  std::vector<int64_t> input_ids;
  int64_t max_new_tokens = 32;
  bool ignore_eos = false, do_sample = false;
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  bool seeded = false;
};

[[noreturn]] void fail(const std::string& message) { throw std::runtime_error(message); }

std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    try {
      ids.push_back(std::stoll(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size()) fail("--input-ids: '" + text + "' is not a comma-separated list of integers");
  }
  if (ids.empty()) fail("--input-ids: no token ids given");
  return ids;
}

Options parse_args(int argc, char** argv) {
  Options o;
  bool have_ids = false;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) fail(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto number = [&](int& i) -> double {
    const std::string v = value(i);
    try {
      return std::stod(v);
    } catch (const std::exception&) {
      fail(std::string(argv[i - 1]) + ": '" + v + "' is not a number");
    }
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--input-ids") o.input_ids = parse_ids(value(i)), have_ids = true;
    else if (a == "--max-new-tokens") o.max_new_tokens = static_cast<int64_t>(number(i));
    else if (a == "--ignore-eos") o.ignore_eos = true;
    else if (a == "--do-sample") o.do_sample = true;
    else if (a == "--temperature") o.temperature = number(i);
    else if (a == "--top-k") o.top_k = static_cast<int64_t>(number(i));
    else if (a == "--top-p") o.top_p = number(i);
    else if (a == "--seed") o.seed = static_cast<uint64_t>(number(i)), o.seeded = true;
    else if (!a.empty() && a[0] == '-') fail("unknown option " + a);
    else if (o.out_dir.empty()) o.out_dir = a;
    else fail("unexpected argument " + a);
  }
  if (o.out_dir.empty()) fail("OUT_DIR is required");
  if (!have_ids) fail("--input-ids is required");
  if (o.max_new_tokens < 1) fail("--max-new-tokens must be at least 1");
  if (o.temperature <= 0) fail("--temperature must be positive");
  if (o.top_k < 0) fail("--top-k must be >= 0");
  if (!(o.top_p > 0 && o.top_p <= 1)) fail("--top-p must be in (0, 1]");
  return o;
}

json read_manifest(const fs::path& dir) {
  std::ifstream in(dir / "export.json");
  if (!in) fail(dir.string() + ": not an hfexport output (no export.json)");
  json m = json::parse(in, nullptr, false);
  if (m.is_discarded() || !m.is_object()) fail((dir / "export.json").string() + ": not valid JSON");
  if (m.value("format", "") != "openvino") fail(dir.string() + ": not an OpenVINO export");
  if (!m.contains("generation") || m["generation"].value("cache", "") != "stateful")
    fail(dir.string() + ": not exported with --for-generation");
  return m;
}

// Greedy, or sampling with temperature, top-k and top-p from a seeded generator.
class Sampler {
 public:
  explicit Sampler(const Options& o) : o_(o), rng_(o.seeded ? o.seed : std::random_device{}()) {}

  int64_t operator()(const float* logits, size_t vocab) {
    if (!o_.do_sample) return std::max_element(logits, logits + vocab) - logits;
    std::vector<size_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
    size_t keep = o_.top_k > 0 ? std::min(vocab, static_cast<size_t>(o_.top_k)) : vocab;
    std::vector<double> probs(keep);
    const double top = logits[order[0]] / o_.temperature;
    double sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += probs[i] = std::exp(logits[order[i]] / o_.temperature - top);
    double mass = 0;
    size_t nucleus = 0;
    while (nucleus < keep && (nucleus == 0 || mass < o_.top_p)) mass += probs[nucleus++] / sum;
    probs.resize(nucleus);
    std::discrete_distribution<size_t> pick(probs.begin(), probs.end());
    return static_cast<int64_t>(order[pick(rng_)]);
  }

 private:
  const Options& o_;
  std::mt19937_64 rng_;
};

ov::Tensor i64_tensor(const std::vector<int64_t>& values, size_t cols) {
  ov::Tensor t(ov::element::i64, {values.size() / cols, cols});
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

int run(const Options& o) {
  const json manifest = read_manifest(o.out_dir);
  const json& gen = manifest["generation"];
  const auto file = manifest["components"]["decode"].value("file", "openvino_model.xml");
  const int64_t limit = manifest["dims"].value("total_sequence", json::object()).value("max", INT64_MAX);
  const auto prompt = static_cast<int64_t>(o.input_ids.size());
  if (prompt + o.max_new_tokens - 1 > limit)
    fail("prompt of " + std::to_string(prompt) + " tokens + " + std::to_string(o.max_new_tokens) +
         " new tokens exceeds the exported sequence bound " + std::to_string(limit));
  std::vector<int64_t> eos;
  if (!o.ignore_eos)
    for (const auto& id : gen.value("eos_token_id", json::array())) eos.push_back(id.get<int64_t>());

  ov::Core core;
  // f32 inference and KV cache: the parity contract is transformers' float32 logits.
  ov::CompiledModel compiled = core.compile_model((o.out_dir / file).string(), "CPU",
                                                  ov::hint::inference_precision(ov::element::f32),
                                                  ov::hint::kv_cache_precision(ov::element::f32));
  ov::InferRequest request = compiled.create_infer_request();
  request.reset_state();
  Sampler sample(o);

  std::vector<int64_t> ids = o.input_ids, mask(o.input_ids.size(), 1), positions(o.input_ids.size());
  std::iota(positions.begin(), positions.end(), 0);
  ov::Tensor beam(ov::element::i32, {1});
  beam.data<int32_t>()[0] = 0;
  std::vector<int64_t> generated;
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    request.set_tensor("input_ids", i64_tensor(ids, ids.size()));
    request.set_tensor("attention_mask", i64_tensor(mask, mask.size()));
    request.set_tensor("position_ids", i64_tensor(positions, positions.size()));
    request.set_tensor("beam_idx", beam);
    request.infer();
    const ov::Tensor logits = request.get_tensor("logits");
    const size_t vocab = logits.get_shape().back();
    const float* last = logits.data<const float>() + (logits.get_size() - vocab);
    const int64_t token = sample(last, vocab);
    generated.push_back(token);
    if (std::find(eos.begin(), eos.end(), token) != eos.end()) break;
    ids = {token};
    mask.push_back(1);
    positions = {positions.back() + 1};
  }
  for (size_t i = 0; i < generated.size(); ++i) std::cout << (i ? " " : "") << generated[i];
  std::cout << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::cerr << "hfexport: error: " << message << "\n";
    return 1;
  }
}
