// ONNX backend: lowers the IR to opset 23 (plus onnxruntime contrib ops in the `ort` profile)
// and writes the model with one external data file.
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "backends/backend.h"
#include "backends/onnx/genai_config.h"
#include "backends/onnx/lowering.h"
#include "backends/weight_file.h"
#include "core/error.h"
#include "io/manifest.h"
#include "passes/passes.h"

namespace hfx {
namespace {

constexpr int64_t kOpset = 23;
constexpr int64_t kIrVersion = 11;
constexpr uint64_t kDataAlignment = 4096;          // page-aligned so runtimes can mmap
constexpr size_t kInlineConstantLimit = 1024;      // smaller constants live inside the .onnx

// The ort profile runs quantized Linears as MatMulNBits, int8 compute unless asked otherwise; the
// standard profile writes the reference dequantization (DequantizeLinear has no int4 row layout
// shared with MatMulNBits), which runtimes constant-fold or run in float.
WeightQuantization resolve_compute(WeightQuantization q, OnnxOpProfile profile) {
  using Compute = WeightQuantization::Compute;
  if (q.compute == Compute::Auto) q.compute = profile_has_contrib_ops(profile) ? Compute::Int8 : Compute::Float;
  return q;
}

constexpr const char* kProfileKey = "op_profile";
// "optimum": the files under onnx/ with their data in onnx/model.onnx_data, named as optimum writes
// them: a decoder's one graph is model.onnx (its ORTModelForCausalLM and transformers.js find it
// there); an encoder-decoder is encoder_model.onnx, decoder_model.onnx (the first step: it projects
// the cross-attention state from encoder_hidden_states) and decoder_with_past_model.onnx
// (ORTModelForSeq2SeqLM, ORTModelForSpeechSeq2Seq).
constexpr const char* kLayoutKey = "layout";
constexpr const char* kOptimumLayout = "optimum";

bool optimum_layout(const ExportConfig& config) { return config.backend.value(kLayoutKey, std::string()) == kOptimumLayout; }

// Unset, generation exports get ort-gqa: onnxruntime's decode kernels (GroupQueryAttention owning
// a cache buffer the runner binds once, MatMulNBits), the fastest loop measured
// (bench/bench_builder.py); a plain forward gets the standard ai.onnx ops transformers.exporters writes.
OnnxOpProfile profile_of(const ExportConfig& config, const FieldSpelling& spell = json_field) {
  const std::string name = config.backend.value(kProfileKey, "");
  if (name.empty()) return config.generation.enabled ? OnnxOpProfile::OrtGqa : OnnxOpProfile::Standard;
  return parse_onnx_op_profile(name, spell("backend.op_profile"));
}

// The key of a checkpoint-derived constant as stored: components that read the same weight in the
// same layout share its bytes in the data file.
using StoredKey = std::tuple<std::string, DType, bool>;

StoredKey stored_key(const Value& v, bool transposed) { return {v.constant->key(), v.dtype, transposed}; }

// A component's file name without `.onnx`: its role's name, or in optimum's layout the file
// optimum's ORTModel classes load for it.
std::string onnx_file_stem(Role role, bool optimum) {
  if (optimum && is_main_role(role)) return "model";
  if (optimum && role == Role::Encoder) return "encoder_model";
  if (optimum && role == Role::Prefill) return "decoder_model";  // only an encoder-decoder's (one graph otherwise)
  if (optimum && role == Role::Decoder) return "decoder_with_past_model";
  return std::string(role_name(role));
}

// One export's ONNX files: a .onnx per component, and one external data file all of them read,
// holding each weight once.
class OnnxWriter final : public ExportWriter {
 public:
  OnnxWriter(const ExportConfig& config, const std::filesystem::path& dir)
      : profile_(profile_of(config)),
        optimum_(optimum_layout(config)),
        dir_(optimum_ ? make_subdir(dir / "onnx") : dir),
        prefix_(optimum_ ? "onnx/" : ""),
        data_file_(optimum_ ? "model.onnx_data" : "model.onnx.data"),
        data_(dir_ / data_file_, kDataAlignment) {}

  WrittenComponent write(Role role, Graph& graph) override {
    const std::string name(role_name(role));
    onnx::ModelProto model;
    model.set_ir_version(kIrVersion);
    model.set_producer_name("hfexport");
    model.set_producer_version(HFEXPORT_VERSION);
    auto* opset = model.add_opset_import();
    opset->set_domain("");
    opset->set_version(kOpset);
    onnx::GraphProto& g = *model.mutable_graph();
    g.set_name(name);

    std::set<const Value*> transposed;  // weights some Linear reads: stored once, transposed
    for (const Node* n : graph.order)
      if (n->op == OpKind::Linear) transposed.insert(n->inputs[1]);
    Lowering lowering(g, graph, profile_, transposed);
    WrittenComponent written;
    const std::string file = onnx_file_stem(role, optimum_) + ".onnx";
    written.file = prefix_ + file;
    for (const Value* v : graph.inputs) {
      set_value_info(g.add_input(), v->name, v->dtype, v->shape);
      written.inputs.push_back({v->name, v->dtype, v->shape});
    }
    for (const Node* n : graph.order) lowering.lower(*n);
    if (lowering.uses_contrib_ops()) {
      auto* contrib = model.add_opset_import();
      contrib->set_domain("com.microsoft");
      contrib->set_version(1);
    }
    for (const Value* v : graph.outputs) {
      set_value_info(g.add_output(), v->name, v->dtype, v->shape);
      written.outputs.push_back({v->name, v->dtype, v->shape});
    }
    write_initializers(g, lowering.initializers());
    written.data_files.push_back(prefix_ + data_file_);
    written.cache_shares_buffer = lowering.attention_owns_cache();
    written.cache_keys_rotated_by_slot = lowering.rotates_by_slot();
    written.kernel_fallbacks = lowering.fallbacks();

    std::string bytes;
    if (!model.SerializeToString(&bytes)) fail((dir_ / file).string(), ": cannot serialize the model");
    write_file(dir_ / file, bytes);
    return written;
  }

  void finish() override { data_.close(); }

 private:
  static std::filesystem::path make_subdir(const std::filesystem::path& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail(dir.string(), ": cannot create: ", ec.message());
    return dir;
  }

  void write_initializers(onnx::GraphProto& g, const std::vector<Lowering::Init>& inits) {
    // Each external initializer reads either bytes this component appends (`fresh`) or a
    // checkpoint weight an earlier component stored.
    struct Ref {
      onnx::TensorProto* tensor;
      StoredKey key;
      size_t fresh = SIZE_MAX;
    };
    std::vector<WeightFile::Item> fresh;
    std::map<StoredKey, size_t> pending;  // checkpoint weights among `fresh`
    std::vector<Ref> refs;
    for (const auto& init : inits) {
      const Value& v = *init.value;
      auto* t = g.add_initializer();
      t->set_name(init.name);
      t->set_data_type(onnx_type(v.dtype));
      const auto& src_shape = v.constant->src_shape;
      if (!init.dims.empty()) {
        for (int64_t d : init.dims) t->add_dims(d);
      } else if (init.transposed) {
        HFX_CHECK(src_shape.size() == 2, "transposed initializer ", init.name);
        t->add_dims(src_shape[1]);
        t->add_dims(src_shape[0]);
      } else {
        for (const Dim& d : v.shape) t->add_dims(d.value());  // a derived (quantized) one differs from its source
      }
      const size_t out_bytes = v.constant->nbytes() / dtype_size(v.constant->src_dtype) * dtype_size(v.dtype);
      if (!v.constant->from_checkpoint() && !init.transposed && out_bytes <= kInlineConstantLimit) {
        std::string raw(out_bytes, '\0');
        if (v.dtype == v.constant->src_dtype) std::memcpy(raw.data(), v.constant->bytes(), out_bytes);
        else convert_floats(v.constant->bytes(), v.constant->src_dtype, raw.data(), v.dtype, out_bytes / dtype_size(v.dtype));
        t->set_raw_data(raw);
        continue;
      }
      Ref ref{t, {}};
      if (!v.constant->from_checkpoint()) {  // owned bytes: this component's own
        ref.fresh = fresh.size();
        fresh.push_back({&v, init.transposed});
      } else if (ref.key = stored_key(v, init.transposed); !stored_.count(ref.key)) {
        const auto [it, added] = pending.emplace(ref.key, fresh.size());
        if (added) fresh.push_back({&v, init.transposed});
        ref.fresh = it->second;
      }
      refs.push_back(std::move(ref));
    }
    const std::vector<WeightFile::Span> spans = data_.append_all(fresh);
    for (const auto& [key, index] : pending) stored_[key] = spans[index];
    for (const Ref& ref : refs) {
      const WeightFile::Span span = ref.fresh != SIZE_MAX ? spans[ref.fresh] : stored_.at(ref.key);
      auto add = [&](const char* key, const std::string& value) {
        auto* e = ref.tensor->add_external_data();
        e->set_key(key);
        e->set_value(value);
      };
      ref.tensor->set_data_location(onnx::TensorProto::EXTERNAL);
      add("location", data_file_);
      add("offset", std::to_string(span.offset));
      add("length", std::to_string(span.length));
    }
  }

  OnnxOpProfile profile_;
  bool optimum_;
  std::filesystem::path dir_;  // where the .onnx files and their data go
  std::string prefix_;         // dir_ relative to the export's directory
  std::string data_file_;
  WeightFile data_;
  std::map<StoredKey, WeightFile::Span> stored_;  // checkpoint weights written by earlier components
};

// ort-gqa's attention is GroupQueryAttention; where the graph fails a precondition of its CPU
// kernel, the export falls back (Attention-23 over a concatenated cache, or the reference
// decomposition for attention with sinks, which Attention-23 lacks) and says so in export.json.
void check_gqa_preconditions(const Graph& graph, OnnxOpProfile profile, PassReport& report) {
  if (profile != OnnxOpProfile::OrtGqa) return;
  for (const Node* n : graph.order) {
    if (n->op != OpKind::Attention) continue;
    if (std::string why = gqa_refusal(*n); !why.empty()) {
      report.kernel_fallbacks.push_back({"GroupQueryAttention", why + " (onnxruntime's CPU kernel)",
                                         n->input(4) ? "the reference decomposition of attention with sinks"
                                                     : "Attention (opset 23) over a concatenated cache"});
      return;
    }
  }
}

class OnnxBackend final : public Backend {
 public:
  std::string_view format() const override { return "onnx"; }

  BackendCapabilities capabilities() const override {
    return {{DType::F32, DType::F16},
            "onnxruntime's CPU provider has no bfloat16 MatMul kernels",
            {manifest::cache::kDynamic, manifest::cache::kStatic},
            "",
            false};
  }

  std::string_view display_name() const override { return "ONNX"; }

  std::vector<BackendOption> options() const override {
    return {{kProfileKey, BackendOption::Type::Choice, {"standard", "ort", "ort-gqa"}, "--onnx-ops",
             "ONNX op profile: standard (ai.onnx only; the default without --for-generation) | ort (onnxruntime contrib "
             "ops) | ort-gqa (ort with GroupQueryAttention owning the cache; the default with --for-generation)",
             true, "standard: ai.onnx ops only; ort: onnxruntime contrib ops; ort-gqa: ort with GroupQueryAttention"},
            {kLayoutKey, BackendOption::Type::Choice, {kOptimumLayout}, "--onnx-layout",
             "optimum: the files optimum's ORTModel classes and transformers.js look for, under onnx/ (model.onnx, or "
             "encoder_model / decoder_model / decoder_with_past_model.onnx for an encoder-decoder; config and tokenizer "
             "files stay beside onnx/)"},
            decompose_option()};
  }

  void check(const ExportConfig& config, const FieldSpelling& spell) const override {
    check_backend_options(*this, config, spell);
    forced_decompositions(config, spell);
    check_layout(config, spell);
    const OnnxOpProfile profile = profile_of(config, spell);
    if (config.quantization.enabled() && !profile_has_contrib_ops(profile) &&
        config.quantization.compute == WeightQuantization::Compute::Int8)
      fail(spell("quantization.compute"), " int8 needs ", spell("backend.op_profile"),
           " ort (onnxruntime's MatMulNBits); the standard op set dequantizes the weights and computes in float");
  }

  // optimum's decoder classes run a dynamic cache, past -> present.
  static void check_layout(const ExportConfig& config, const FieldSpelling& spell) {
    if (!config.backend.contains(kLayoutKey)) return;
    if (config.generation.static_cache())
      fail(spell("backend.layout"), " optimum: optimum's decoders run a dynamic cache, not ", spell("generation.cache_implementation"));
  }

  // ort-gqa's dynamic cache is one decode graph for the prompt and the steps: one session, so
  // onnxruntime prepacks each weight once (two sessions would prepack twice, or not at all when
  // sharing weights: -20 % decode, measured), and last-position logits keep the prompt's lm_head
  // to one row. optimum's layout has one graph for a decoder's prompt and steps, and splits an
  // encoder-decoder's decoder as optimum does.
  ExportConfig graph_config(const ExportConfig& config) const override {
    ExportConfig graph = config;
    GenerationConfig& g = graph.generation;
    if (!g.enabled || g.static_cache()) return graph;
    if (!g.multi_token_decode && profile_of(config) == OnnxOpProfile::OrtGqa) g.multi_token_decode = g.last_logits_only = true;
    // An encoder-decoder's past -> present decoder counts its past from the cache, as
    // onnxruntime-genai's whisper feeds it (GroupQueryAttention's shared buffer needs the mask).
    if (profile_of(config) != OnnxOpProfile::OrtGqa) g.decoder_mask = false;
    if (optimum_layout(config)) {
      g.multi_token_decode = true;
      g.cross_state = GenerationConfig::CrossState::FirstDecoderStep;
    }
    return graph;
  }

  // An encoder's graph: attention, none of it causal.
  static bool attends_bidirectionally_only(const Graph& g) {
    bool attends = false;
    for (const Node* n : g.order) {
      if (n->op != OpKind::Attention) continue;
      if (n->attrs_as<AttentionAttrs>().causal) return false;
      attends = true;
    }
    return attends;
  }

  std::vector<Pass> passes(const ExportConfig& config) const override {
    const OnnxOpProfile profile = profile_of(config);
    const WeightQuantization quantize = resolve_compute(config.quantization, profile);
    return {
        {"lower_state", [](Graph& g, PassReport&) { lower_state_as_io(g); }},
        {"check_gqa_preconditions",
         [profile, forced = forced_decompositions(config)](Graph& g, PassReport& r) {
           if (!forced.count(OpKind::Attention)) check_gqa_preconditions(g, profile, r);
         }},
        // onnxruntime runs each MatMul as its own thread-pool round; batch-1 decode gains from fewer,
        // wider ones. (OpenVINO's CPU plugin fuses q/k/v itself: packing measured no different there.)
        // An encoder's calls run many tokens each, where the packed MatMul's Split costs more than
        // it saves (bert-base, sequence 128: three MatMuls 1.3 % faster at batch 32, 0.8 % at 1).
        {"pack_linears", [](Graph& g, PassReport&) {
           if (!attends_bidirectionally_only(g)) pack_linears(g);
         }},
        {"quantize_linears", [quantize](Graph& g, PassReport& r) { r.quantization = quantize_linears(g, quantize); }},
        decompose_pass([profile](const Node& n) { return maps_natively(n, profile); }, forced_decompositions(config)),
        {"eliminate_dead_code", [](Graph& g, PassReport&) { eliminate_dead_code(g); }},
    };
  }

  std::unique_ptr<ExportWriter> writer(const ExportConfig& config, const std::filesystem::path& dir) const override {
    return std::make_unique<OnnxWriter>(config, dir);
  }

  std::string_view runtime_package() const override { return "onnxruntime"; }
  void write_runtime_files(nlohmann::json& manifest, const JsonConfig& hf_config,
                           const std::filesystem::path& dir) const override {
    for (const auto& [name, content] : genai_files(manifest, hf_config, dir)) write_file(dir / name, content.dump(4) + "\n");
  }
};

}  // namespace

HFX_REGISTER_BACKEND("onnx", OnnxBackend)

}  // namespace hfx
