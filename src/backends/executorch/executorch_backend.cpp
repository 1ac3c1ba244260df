// ExecuTorch backend: lowers the IR to the runtime's ATen `.out` kernels and writes model.pte, the
// flatbuffer program (program.fbs, "ET12") with its extended header, followed by the constant
// segment that every method shares; no torch involved. The metadata methods the ExecuTorch LLM
// runner reads (get_max_seq_len, ...) are constant methods of the same program.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "backends/backend.h"
#include "backends/executorch/lowering.h"
#include "backends/executorch/xnnpack_lowering.h"
#include "backends/weight_file.h"
#include "core/error.h"
#include "io/manifest.h"
#include "passes/passes.h"

namespace hfx {
namespace {

constexpr const char* kProgramFile = "model.pte";
// The zero-copy interface's first N outputs: the cache inputs, returned as they were written.
const std::string kReturnedPrefix = "returned.";
constexpr uint64_t kSegmentAlignment = 128;  // ExecutorchBackendConfig.segment_alignment
constexpr size_t kExtendedHeaderSize = 32;   // "eh00" header, after the flatbuffer's first 8 bytes
constexpr uint64_t kWeightAlignment = 16;    // exir's tensor alignment
constexpr const char* kExecutorchBackendKey = "executorch_backend";
// false: no planned memory for the methods' inputs and outputs, and a static cache that is the
// caller's (transformers.exporters' alloc_graph_input/alloc_graph_output/alloc_mutable_buffers
// all false: the zero-copy interface its C++ decode loop binds with set_output_data_ptr).
constexpr const char* kAllocGraphIoKey = "alloc_graph_io";
// "hfexport": attention calls hfexport's kernel library (hfexport::sdpa.out, which reads the cache
// in place), which the runner loads; "stock" (the default): only kernels the stock runtime has.
constexpr const char* kKernelsKey = "executorch_kernels";
// ExecuTorch's default max_seq_length: every tensor is planned at its dims' upper bounds, so the
// bounds a server would use (32768 tokens) would plan gigabytes.
constexpr int64_t kDefaultMaxSequence = 128;

// The LLM runner's metadata methods (extension/llm/runner/constants.h), each a constant method.
struct Metadata {
  std::vector<std::pair<std::string, std::vector<int64_t>>> ints;
  std::vector<std::pair<std::string, bool>> bools;
};

// A method that returns constants (one output per value), as ExecuTorch's constant_methods.
std::unique_ptr<etfb::ExecutionPlanT> constant_method(const std::string& name, std::vector<etfb::KernelTypesUnion> values) {
  auto plan = std::make_unique<etfb::ExecutionPlanT>();
  plan->name = name;
  for (auto& value : values) {
    auto ev = std::make_unique<etfb::EValueT>();
    ev->val = std::move(value);
    plan->outputs.push_back(static_cast<int>(plan->values.size()));
    plan->values.push_back(std::move(ev));
  }
  plan->chains.push_back(std::make_unique<etfb::ChainT>());
  plan->chains.back()->outputs = plan->outputs;
  plan->non_const_buffer_sizes = {0};
  return plan;
}

// XNNPACK, ExecuTorch's (and transformers.exporters') default, unless the config says portable.
bool uses_xnnpack(const ExportConfig& config) {
  return config.backend.value(kExecutorchBackendKey, std::string("xnnpack")) == "xnnpack";
}

bool plans_graph_io(const ExportConfig& config) { return config.backend.value(kAllocGraphIoKey, true); }

bool uses_hfexport_kernels(const ExportConfig& config) {
  return config.backend.value(kKernelsKey, std::string("stock")) == "hfexport";
}

void put_u32(std::string& out, size_t at, uint32_t v) { std::memcpy(out.data() + at, &v, sizeof v); }
void put_u64(std::string& out, size_t at, uint64_t v) { std::memcpy(out.data() + at, &v, sizeof v); }

// A component's method name, as ExecuTorch's runners call them: TextLLMRunner's `forward`, the
// multimodal and speech runners' `text_decoder` (over embeddings), and the role's own name
// otherwise (`token_embedding`, `vision_encoder`, `audio_encoder`, `encoder`, `prefill`).
std::string executorch_method(Role role) {
  if (is_main_role(role)) return "forward";
  if (role == Role::Decoder || role == Role::TextDecoder) return "text_decoder";
  return std::string(role_name(role));
}

class ExecutorchWriter final : public ExportWriter {
 public:
  ExecutorchWriter(const ExportConfig& config, const std::filesystem::path& dir)
      : path_(dir / kProgramFile),
        config_(config),
        xnnpack_(uses_xnnpack(config)),
        planned_io_(plans_graph_io(config)),
        hfexport_kernels_(uses_hfexport_kernels(config)) {}

  WrittenComponent write(Role role, Graph& graph) override {
    const bool main_method = is_main_role(role);
    const std::string method = executorch_method(role);
    EtLowering lowering(graph, method, constants_, &WeightFile::stored_bytes, xnnpack_, planned_io_, hfexport_kernels_,
                        config_.generation.static_cache());
    lowering.lower_graph();
    if (main_method || role == Role::TextDecoder) record_metadata(graph);  // what the LLM runners read
    record_bounds(graph);
    // A static cache lives in the method (mutable buffers), which the caller passes neither in nor
    // out; or it is the caller's, bound in place (one buffer per pair). A dynamic cache goes in as
    // the past and comes back as the present.
    const bool in_place = !lowering.cache_inputs().empty();
    WrittenComponent written{kProgramFile, method, {}, {}, {}, planned_io_ && in_place};
    written.cache_shares_buffer = !planned_io_ && in_place;
    for (const Value* v : graph.inputs)
      if (!lowering.is_buffer(v)) written.inputs.push_back({v->name, v->dtype, v->shape});
    auto cache_outputs = [&](bool returned_copy) {
      if (planned_io_) return;
      for (const Value* v : lowering.cache_inputs()) {
        const StatePair& pair = *std::find_if(graph.state_pairs.begin(), graph.state_pairs.end(),
                                              [&](const StatePair& p) { return p.input == v; });
        written.outputs.push_back({returned_copy ? kReturnedPrefix + pair.name : pair.output->name, v->dtype, v->shape});
      }
    };
    cache_outputs(true);
    for (const Value* v : graph.outputs)
      if (lowering.returned(v)) written.outputs.push_back({v->name, v->dtype, v->shape});
    cache_outputs(false);
    plans_.push_back(lowering.take_plan());
    return written;
  }

  void set_token_ids(const TokenIds& ids) override { token_ids_ = ids; }

  void finish() override {
    const int64_t context = config_.generation.static_cache() ? config_.generation.max_cache_len
                                                              : std::max(max_query_, max_context_);
    metadata_.ints.insert(metadata_.ints.begin(), {{"get_max_seq_len", {max_query_}}, {"get_max_context_len", {context}}});
    auto program = std::make_unique<etfb::ProgramT>();
    program->version = 0;
    for (auto& plan : plans_) program->execution_plan.push_back(std::move(plan));
    for (const auto& [key, v] : metadata_.ints) {
      std::vector<etfb::KernelTypesUnion> values;
      for (int64_t i : v) values.push_back(et_int(i));
      program->execution_plan.push_back(constant_method(key, std::move(values)));
    }
    for (const auto& [key, v] : metadata_.bools) {
      std::vector<etfb::KernelTypesUnion> values;
      values.push_back(et_bool(v));
      program->execution_plan.push_back(constant_method(key, std::move(values)));
    }
    // Segment 0 is the constant segment (emitted even when empty; offsets[0] is a placeholder),
    // then each delegate payload and named weight, 128-aligned.
    segment_offsets_ = {0};
    uint64_t end = constants_.end;
    for (const EtConstants::Segment& seg : constants_.segments) {
      segment_offsets_.push_back(align(end, kSegmentAlignment));
      end = segment_offsets_.back() + seg.size;
    }
    for (size_t i = 0; i < segment_offsets_.size(); ++i) {
      auto segment = std::make_unique<etfb::DataSegmentT>();
      segment->offset = segment_offsets_[i];
      segment->size = i == 0 ? constants_.end : constants_.segments[i - 1].size;
      program->segments.push_back(std::move(segment));
    }
    segment_bytes_ = end;
    program->constant_segment = std::make_unique<etfb::SubsegmentOffsetsT>();
    program->constant_segment->segment_index = 0;
    for (const EtConstants::Entry& e : constants_.entries) program->constant_segment->offsets.push_back(e.offset);
    for (const auto& [key, segment] : constants_.named) {
      auto named = std::make_unique<etfb::NamedDataT>();
      named->key = key;
      named->segment_index = segment;
      program->named_data.push_back(std::move(named));
    }

    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(etfb::Program::Pack(fbb, program.get()), etfb::ProgramIdentifier());
    const std::string bytes = with_extended_header(fbb.GetBufferPointer(), fbb.GetSize());
    const uint64_t base = align(bytes.size(), kSegmentAlignment);
    write_weights(base);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail(path_.string(), ": cannot open for writing: ", std::strerror(errno));
    try {
      pwrite_fully(fd, bytes.data(), bytes.size(), 0, path_);
      for (size_t i = 0; i < constants_.segments.size(); ++i)
        if (!constants_.segments[i].value)
          pwrite_fully(fd, constants_.segments[i].bytes.data(), constants_.segments[i].bytes.size(),
                       base + segment_offsets_[i + 1], path_);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0) fail(path_.string(), ": cannot write: ", std::strerror(errno));
    std::filesystem::resize_file(path_, base + segment_bytes_);
  }

 private:
  // The flatbuffer with the extended header inserted after its root offset and identifier (the
  // root offset grows by the header's size): "eh00", its length, the program's size, where the
  // segments start and how many bytes they take.
  std::string with_extended_header(const uint8_t* fb, size_t size) const {
    HFX_CHECK(size >= 8, "internal error: executorch: empty program");
    std::string out(size + kExtendedHeaderSize, '\0');
    std::memcpy(out.data(), fb, 8);
    std::memcpy(out.data() + 8 + kExtendedHeaderSize, fb + 8, size - 8);
    uint32_t root;
    std::memcpy(&root, fb, sizeof root);
    put_u32(out, 0, root + static_cast<uint32_t>(kExtendedHeaderSize));
    std::memcpy(out.data() + 8, "eh00", 4);
    put_u32(out, 12, static_cast<uint32_t>(kExtendedHeaderSize));
    const uint64_t program_size = out.size();
    put_u64(out, 16, program_size);
    put_u64(out, 24, (program_size + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment);
    put_u64(out, 32, segment_bytes_);
    return out;
  }

  // Every stored tensor from `base` on, at the offset the program records: the constant
  // segment's entries, then the named weights' segments (payloads are written as bytes).
  void write_weights(uint64_t base) {
    std::vector<std::pair<uint64_t, const Value*>> placed;
    for (size_t i = 1; i < constants_.entries.size(); ++i)
      placed.emplace_back(base + constants_.entries[i].offset, constants_.entries[i].value);
    for (size_t i = 0; i < constants_.segments.size(); ++i)
      if (constants_.segments[i].value) placed.emplace_back(base + segment_offsets_[i + 1], constants_.segments[i].value);
    WeightFile file(path_, kWeightAlignment);
    std::vector<WeightFile::Item> items;
    uint64_t end = 0;
    for (const auto& [offset, value] : placed) {
      items.push_back({value, false, offset - end});  // the file aligns to 16, which every offset is
      end = offset + WeightFile::stored_bytes(*value);
    }
    const auto spans = file.append_all(items);
    for (size_t i = 0; i < spans.size(); ++i)
      HFX_CHECK(spans[i].offset == placed[i].first, "internal error: executorch: tensor ", placed[i].second->name,
                " stored at ", spans[i].offset, ", not ", placed[i].first);
    file.close();
  }

  static uint64_t align(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

  // The longest query and sequence any method takes (a dynamic cache's decode takes one token,
  // its prefill the prompt; a text decoder its embeddings): the LLM runner's get_max_seq_len and
  // get_max_context_len.
  void record_bounds(const Graph& graph) {
    for (const Value* v : graph.inputs) {
      const bool tokens = (v->rank() == 2 && v->name == "input_ids") || (v->rank() == 3 && v->name == "inputs_embeds");
      if (!tokens && (v->rank() != 2 || v->name != "attention_mask")) continue;
      const Dim& d = v->shape[1];
      int64_t& bound = tokens ? max_query_ : max_context_;
      bound = std::max(bound, d.is_static() ? d.value() : d.symbol()->max);
    }
  }

  void record_metadata(const Graph& graph) {
    const Value* logits = graph.outputs.front();
    const bool has_logits = logits->name == "logits";  // a base model returns hidden states instead
    metadata_.ints = {{"get_vocab_size", {has_logits && logits->shape.back().is_static() ? logits->shape.back().value() : 0}},
                      {"get_n_layers", {graph.num_layers}}};
    if (!token_ids_.eos.empty()) metadata_.ints.push_back({"get_eos_ids", token_ids_.eos});
    if (token_ids_.bos) metadata_.ints.push_back({"get_bos_id", {*token_ids_.bos}});
    metadata_.bools = {{"use_kv_cache", config_.generation.enabled},
                       {"enable_dynamic_shape", true},
                       {"use_sdpa_with_kv_cache", false}};
  }

  std::filesystem::path path_;
  ExportConfig config_;
  bool xnnpack_;
  bool planned_io_;
  bool hfexport_kernels_;
  EtConstants constants_;
  std::vector<uint64_t> segment_offsets_;  // relative to the segment base
  uint64_t segment_bytes_ = 0;
  std::vector<std::unique_ptr<etfb::ExecutionPlanT>> plans_;
  Metadata metadata_;
  TokenIds token_ids_;
  int64_t max_query_ = 1, max_context_ = 1;
};

class ExecutorchBackend final : public Backend {
 public:
  std::string_view format() const override { return "executorch"; }

  BackendCapabilities capabilities() const override {
    return {{DType::F32, DType::F16, DType::BF16}, "",
            {manifest::cache::kStatic, manifest::cache::kDynamic}, "", false};
  }

  std::string_view runtime_package() const override { return "executorch"; }

  std::vector<BackendOption> options() const override {
    using Type = BackendOption::Type;
    return {decompose_option(),
            {kExecutorchBackendKey, Type::Choice, {"xnnpack", "portable"}, "--executorch-backend",
             "executorch: xnnpack (linears delegated to XNNPACK; the default) | portable (the runtime's aten kernels only)"},
            {kAllocGraphIoKey, Type::Bool, {}, "--no-alloc-graph-io",
             "executorch: no planned memory for inputs and outputs; a static cache is the caller's, passed in and "
             "returned as outputs [cache x N, logits, cache x N] for set_output_data_ptr (zero copy)",
             false},
            {kKernelsKey, Type::Choice, {"stock", "hfexport"}, "--executorch-kernels",
             "executorch: stock (only kernels the stock runtime has; the default) | hfexport (attention reads the "
             "cache in place in hfexport's kernel library, which the program then needs: hfexport's runners load it)"}};
  }

  void check(const ExportConfig& config, const FieldSpelling& spell) const override {
    check_backend_options(*this, config, spell);
    forced_decompositions(config, spell);
    // ExecuTorch's LLM runner passes two inputs and keeps the cache in the method: with the
    // caller's cache (zero copy) the form serves no runner.
    if (!plans_graph_io(config) &&
        std::find(config.inputs.begin(), config.inputs.end(), "cache_position") != config.inputs.end())
      fail(spell("inputs"), " input_ids,cache_position keeps the cache in the method (ExecuTorch's LLM runner's "
           "form): it does not go with ", spell("backend.alloc_graph_io"));
    if (config.quantization.compute == WeightQuantization::Compute::Int8 && !uses_xnnpack(config))
      fail(spell("quantization.compute"), " int8: only XNNPACK's linears quantize activations (the xnnpack "
           "backend, with 4-bit or 8-bit weights); the portable kernels dequantize weights and compute in float");
  }

  // Memory is planned at each dim's upper bound: the sequence is bounded as ExecuTorch's own
  // export bounds it, and the batch is 1 (its LLM runner's), unless the config says otherwise.
  ExportConfig graph_config(const ExportConfig& config) const override {
    ExportConfig c = config;
    c.dims.try_emplace("batch", DimRange{1, 1});
    // A static cache bounds the query by its length already; its buffers have that length. A
    // dynamic one holds at most the bounded sequence.
    if (config.generation.static_cache()) {
      c.dims.try_emplace("cache", DimRange{config.generation.max_cache_len, config.generation.max_cache_len});
      return c;
    }
    c.dims.try_emplace("sequence", DimRange{1, kDefaultMaxSequence});
    if (config.generation.enabled) {
      const int64_t total = c.dims.at("sequence").max;
      c.dims.try_emplace("total_sequence", DimRange{1, total});
      c.dims.try_emplace("past_sequence", DimRange{0, c.dims.at("total_sequence").max - 1});
    }
    return c;
  }

  std::vector<Pass> passes(const ExportConfig& config) const override {
    // XNNPACK's quantized linears quantize activations to int8 per token: over blockwise 4-bit
    // weights (ExecuTorch's 8da4w) or per-channel int8 ones (signed codes, one scale per output
    // channel), with positive scales (XNNPACK's); every other quantized linear is dequantized into
    // a float one.
    WeightQuantization quantize = config.quantization;
    if (quantize.enabled() && quantize.compute == WeightQuantization::Compute::Auto)
      quantize.compute = uses_xnnpack(config) ? WeightQuantization::Compute::Int8 : WeightQuantization::Compute::Float;
    quantize.positive_bf16_scales = quantize.compute == WeightQuantization::Compute::Int8;
    quantize.per_channel = quantize.signed_codes = quantize.positive_bf16_scales && quantize.bits == 8;
    return {
        // input./output. pairs the lowering turns into mutable buffers updated in place.
        {"lower_state", [](Graph& g, PassReport&) { lower_state_as_io(g); }},
        // One wide linear per shared input (q/k/v, gate/up): fewer thread-pool rounds per step.
        {"pack_linears", [](Graph& g, PassReport&) { pack_linears(g); }},
        {"quantize_linears", [quantize](Graph& g, PassReport& r) { r.quantization = quantize_linears(g, quantize); }},
        // High-level nodes the kernels or (with XNNPACK) the delegate run as they are stay whole.
        decompose_pass([xnnpack = uses_xnnpack(config)](
                           const Node& n) { return et_maps_natively(n) || (xnnpack && xnn_rule(n) != nullptr); },
                       forced_decompositions(config)),
        {"eliminate_dead_code", [](Graph& g, PassReport&) { eliminate_dead_code(g); }},
    };
  }

  std::unique_ptr<ExportWriter> writer(const ExportConfig& config, const std::filesystem::path& dir) const override {
    return std::make_unique<ExecutorchWriter>(config, dir);
  }
};

}  // namespace

HFX_REGISTER_BACKEND("executorch", ExecutorchBackend)

}  // namespace hfx
