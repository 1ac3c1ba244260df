// hfexport-openvino-generate: the decode loop for stateful OpenVINO exports, on OpenVINO's C++ API.
// `hfexport generate OUT_DIR ...` hands OpenVINO exports to this program when it is installed.
#include <iostream>
#include <limits>
#include <numeric>
#include <openvino/op/constant.hpp>
#include <openvino/op/matmul.hpp>
#include <openvino/op/slice.hpp>
#include <openvino/openvino.hpp>
#include <set>

#include "core/error.h"
#include "runners/common/decode_loop.h"

namespace hfx {
namespace {

ov::Tensor i64_tensor(const std::vector<int64_t>& values) {
  ov::Tensor t(ov::element::i64, {1, values.size()});
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

// The loop reads only the last position's logits: cut the hidden states to it before the LM head's
// MatMul (as OpenVINO GenAI does at load), so a prompt skips S-1 vocabulary-sized rows. The file keeps
// every position's logits; a head of another shape is left as it is.
std::shared_ptr<ov::Model> slice_before_head(std::shared_ptr<ov::Model> model) {
  static const std::set<std::string> tail_ops = {"Multiply", "Divide", "Tanh", "Add", "Convert"};  // softcap, scale
  ov::Node* node = model->output("logits").get_node()->get_input_node_ptr(0);
  while (tail_ops.count(node->get_type_name())) {
    ov::Node* varying = nullptr;
    for (const ov::Output<ov::Node>& input : node->input_values()) {
      if (ov::is_type<ov::op::v0::Constant>(input.get_node())) continue;
      if (varying) return model;
      varying = input.get_node();
    }
    if (!varying) return model;
    node = varying;
  }
  auto* matmul = ov::as_type<ov::op::v0::MatMul>(node);
  if (!matmul || matmul->get_transpose_a()) return model;
  const ov::Output<ov::Node> hidden = matmul->input_value(0);
  if (hidden.get_partial_shape().rank() != ov::Dimension(3) || ov::is_type<ov::op::v0::Constant>(hidden.get_node()))
    return model;
  auto i64 = [](int64_t v) { return ov::op::v0::Constant::create(ov::element::i64, {1}, {v}); };
  auto last = std::make_shared<ov::op::v8::Slice>(hidden, i64(-1), i64(std::numeric_limits<int64_t>::max()),
                                                  i64(1), i64(1));
  matmul->input(0).replace_source_output(last);
  model->validate_nodes_and_infer_types();
  return model;
}

// One stateful model: the cache lives in its variables, reset by prefill, appended to by each run.
class OpenVinoSession final : public DecodeSession {
 public:
  explicit OpenVinoSession(const Manifest& manifest) {
    if (manifest.cache() != manifest::cache::kStateful)
      fail(manifest.file_of(manifest::component::kDecode).parent_path().string(), ": not a stateful OpenVINO export");
    const std::string warning = runtime_drift_warning(manifest, "openvino", ov::get_openvino_version().buildNumber);
    if (!warning.empty()) std::cerr << warning << "\n";
    ov::Core core;
    // f32 inference and KV cache: the parity contract is transformers' float32 logits.
    compiled_ = core.compile_model(slice_before_head(core.read_model(manifest.file_of(manifest::component::kDecode).string())), "CPU",
                                   ov::hint::inference_precision(ov::element::f32),
                                   ov::hint::kv_cache_precision(ov::element::f32));
    request_ = compiled_.create_infer_request();
    beam_ = ov::Tensor(ov::element::i32, {1});
    beam_.data<int32_t>()[0] = 0;
  }

  std::vector<float> prefill(const std::vector<int64_t>& ids) override {
    request_.reset_state();
    mask_.assign(ids.size(), 1);
    positions_.resize(ids.size());
    std::iota(positions_.begin(), positions_.end(), 0);
    return run(ids);
  }

  std::vector<float> step(int64_t token) override { return extend({token}); }

  std::vector<float> extend(const std::vector<int64_t>& ids) override {
    mask_.insert(mask_.end(), ids.size(), 1);
    const int64_t next = positions_.back() + 1;
    positions_.resize(ids.size());
    std::iota(positions_.begin(), positions_.end(), next);
    return run(ids);
  }

 private:
  std::vector<float> run(const std::vector<int64_t>& ids) {
    request_.set_tensor("input_ids", i64_tensor(ids));
    request_.set_tensor("attention_mask", i64_tensor(mask_));
    request_.set_tensor("position_ids", i64_tensor(positions_));
    request_.set_tensor("beam_idx", beam_);
    request_.infer();
    const ov::Tensor logits = request_.get_tensor("logits");
    const size_t vocab = logits.get_shape().back();
    const float* last = logits.data<const float>() + (logits.get_size() - vocab);
    return {last, last + vocab};
  }

  ov::CompiledModel compiled_;
  ov::InferRequest request_;
  ov::Tensor beam_;
  std::vector<int64_t> mask_, positions_;
};

}  // namespace
}  // namespace hfx

int main(int argc, char** argv) {
  return hfx::runner_main(argc, argv, "openvino", [](const hfx::Manifest& manifest, const hfx::GenerateOptions& o) {
    hfx::check_sequence_bound(manifest, o);
    return std::make_unique<hfx::OpenVinoSession>(manifest);
  });
}
