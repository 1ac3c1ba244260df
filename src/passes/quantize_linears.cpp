// Replaces Linear ops over checkpoint weights with QuantizedLinear ops whose codes and scales are
// derived from the same checkpoint bytes when the backend writes them (nothing is computed here).
#include <map>

#include "core/error.h"
#include "passes/passes.h"

namespace hfx {
namespace {

std::string module_of(const std::string& weight_name) {
  constexpr std::string_view kSuffix = ".weight";
  return weight_name.ends_with(kSuffix) ? weight_name.substr(0, weight_name.size() - kSuffix.size()) : weight_name;
}

Value* derived(Graph& graph, const Value& weight, const WeightQuantization& q, bool scales, DType dtype) {
  auto data = ConstantData::quantize(weight.constant, q, scales);
  Value* v = graph.new_value(dtype, Shape(data->src_shape.begin(), data->src_shape.end()),
                             module_of(weight.name) + (scales ? ".scales" : ".qweight"));
  v->constant = std::move(data);
  return v;
}

// The QuantizedLinear attributes (ops.def) for a scheme whose compute the backend has resolved.
QuantizedLinearAttrs quantized_linear_attrs(const WeightQuantization& q) {
  return {q.bits, q.group_size, q.compute == WeightQuantization::Compute::Int8};
}

}  // namespace

QuantizeReport quantize_linears(Graph& graph, const WeightQuantization& q) {
  QuantizeReport report;
  if (!q.enabled()) return report;
  HFX_CHECK(q.compute != WeightQuantization::Compute::Auto, "quantize_linears: the backend resolves the compute");
  report.int8_compute = q.compute == WeightQuantization::Compute::Int8;
  std::map<std::string, std::pair<Value*, Value*>> quantized_weights;  // weight key -> (codes, scales)
  for (Node* n : graph.order) {
    if (n->op != OpKind::Linear) continue;
    const Value* w = n->inputs[1];
    if (!w->is_constant() || !w->constant->from_checkpoint() || w->constant->quantized) continue;
    WeightQuantization lq = q;
    if (q.per_channel) lq.group_size = w->constant->src_shape[1];  // one group: the whole row
    if (w->constant->src_shape[1] % lq.group_size != 0) {
      report.kept_float.push_back(w->name);
      continue;
    }
    Value* bias = n->inputs.size() > 2 ? n->inputs[2] : nullptr;
    Value* codes = derived(graph, *w, lq, false, DType::U8);
    Value* scales = derived(graph, *w, lq, true, n->inputs[0]->dtype);
    n->op = OpKind::QuantizedLinear;
    n->inputs = {n->inputs[0], codes, scales};
    if (bias) n->inputs.push_back(bias);
    n->attrs = quantized_linear_attrs(lq);
    ++report.quantized;
    quantized_weights[w->constant->key()] = {codes, scales};
  }
  // MoE experts: each weight [E, N, K] quantized as its E * N rows.
  for (Node* n : graph.order) {
    if (n->op != OpKind::MoE) continue;
    const Value *gate_up = n->inputs[2], *down = n->inputs[3];
    if (!gate_up->constant || !down->constant || !gate_up->constant->from_checkpoint()) continue;
    const int64_t experts = gate_up->shape[0].value();
    if (gate_up->shape[2].value() % q.group_size || down->shape[2].value() % q.group_size) {
      report.kept_float.push_back(gate_up->name);
      report.kept_float.push_back(down->name);
      continue;
    }
    auto rows_of = [&](const Value* w) {
      Value* flat = graph.new_value(w->dtype, {Dim(experts * w->shape[1].value()), w->shape[2]}, w->name);
      flat->constant = ConstantData::view(w->constant, {experts * w->shape[1].value(), w->shape[2].value()});
      return flat;
    };
    const Value* gu = rows_of(gate_up);
    const Value* d = rows_of(down);
    const DType t = n->inputs[0]->dtype;
    // Experts are dequantized by every backend's decomposition: the blockwise scheme's codes.
    WeightQuantization mq = q;
    mq.per_channel = mq.signed_codes = false;
    Value* gate_up_bias = n->input(4);
    Value* down_bias = n->input(5);
    Value* selection_bias = n->input(6);
    n->inputs = {n->inputs[0], n->inputs[1], derived(graph, *gu, mq, false, DType::U8), derived(graph, *gu, mq, true, t),
                 derived(graph, *d, mq, false, DType::U8), derived(graph, *d, mq, true, t), gate_up_bias, down_bias};
    if (selection_bias) n->inputs.push_back(selection_bias);
    n->attrs = QuantizedMoEAttrs{n->attrs_as<MoEAttrs>(), quantized_linear_attrs(mq)};
    n->op = OpKind::QuantizedMoE;
    report.quantized += 2;
  }
  // A tied embedding reads the lm_head's codes: the table is stored once, quantized (not signed
  // per-channel codes, which only XNNPACK's linears read).
  for (Node* n : graph.order) {
    if (q.signed_codes || q.per_channel) break;
    if (n->op != OpKind::Embedding || !n->inputs[0]->is_constant()) continue;
    const auto it = quantized_weights.find(n->inputs[0]->constant->key());
    if (it == quantized_weights.end()) continue;
    const auto [codes, scales] = it->second;
    if (scales->dtype != n->outputs[0]->dtype) continue;
    report.embeddings.push_back(n->inputs[0]->name);
    n->op = OpKind::QuantizedEmbedding;
    n->inputs = {codes, scales, n->inputs[1]};
    n->attrs = quantized_linear_attrs(q);
  }
  return report;
}

}  // namespace hfx
