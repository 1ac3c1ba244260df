#include "backends/executorch/xnnpack.h"

#include <cstring>
#include <limits>
#include <memory>

#include "core/error.h"
#include "xnnpack/schema_generated.h"

namespace hfx {
namespace {

namespace xfb = fb_xnnpack;

constexpr uint32_t kNoValue = std::numeric_limits<uint32_t>::max();  // an absent id (no bias; internal values)
constexpr uint32_t kExternalInput = 1, kExternalOutput = 2;          // XNNTensorValue.flags
constexpr size_t kHeaderSize = 32;                                   // the 30-byte XNNHeader, padded

std::vector<uint32_t> dims_of(const std::vector<int64_t>& dims) {
  std::vector<uint32_t> out;
  for (int64_t d : dims) {
    HFX_CHECK(d >= 0 && d < kNoValue, "executorch: XNNPACK dim ", d, " out of range");
    out.push_back(static_cast<uint32_t>(d));
  }
  return out;
}

xfb::XNNDatatype float_datatype(XnnFloat type) {
  return type == XnnFloat::F16 ? xfb::XNNDatatype::xnn_datatype_fp16 : xfb::XNNDatatype::xnn_datatype_fp32;
}

// A float value; `constant` indexes the graph's constant_data (0: none), `external` the
// delegate's inputs then outputs.
void add_value(xfb::XNNGraphT& g, const std::vector<int64_t>& dims, uint32_t constant, uint32_t external,
               uint32_t flags, XnnFloat type = XnnFloat::F32) {
  xfb::XNNTensorValueT t;
  t.datatype = float_datatype(type);
  t.dims = dims_of(dims);
  t.num_dims = static_cast<uint32_t>(t.dims.size());
  t.constant_buffer_idx = constant;
  t.external_id = external;
  t.flags = flags;
  t.id_out = static_cast<uint32_t>(g.xvalues.size());
  auto v = std::make_unique<xfb::XValueT>();
  v->xvalue_union.Set(std::move(t));
  g.xvalues.push_back(std::move(v));
}

void push_value(xfb::XNNGraphT& g, xfb::XNNQuantizedTensorValueT q) {
  auto v = std::make_unique<xfb::XValueT>();
  v->xvalue_union.Set(std::move(q));
  g.xvalues.push_back(std::move(v));
}

std::unique_ptr<xfb::XNNTensorValueT> quantized_tensor(const xfb::XNNGraphT& g, xfb::XNNDatatype type,
                                                      const std::vector<int64_t>& dims, uint32_t constant) {
  auto t = std::make_unique<xfb::XNNTensorValueT>();
  t->datatype = type;
  t->dims = dims_of(dims);
  t->num_dims = static_cast<uint32_t>(t->dims.size());
  t->constant_buffer_idx = constant;
  t->external_id = kNoValue;
  t->id_out = static_cast<uint32_t>(g.xvalues.size());
  return t;
}

template <class Node>
void add_node(xfb::XNNGraphT& g, xfb::XNodeUnion type, Node node) {
  auto n = std::make_unique<xfb::XNodeT>();
  // Aliased node types (XNNAdd: _XNNNode2x1, ...) give the union no typed Set().
  n->xnode_union.type = type;
  n->xnode_union.value = new Node(std::move(node));
  n->debug_handle = static_cast<uint32_t>(g.xnodes.size() + 1);
  g.xnodes.push_back(std::move(n));
}

uint32_t add_constant(xfb::XNNGraphT& g, const XnnWeight& w) {
  auto c = std::make_unique<xfb::ConstantDataOffsetT>();
  c->offset = std::numeric_limits<uint64_t>::max();  // read by key from the named data
  c->size = w.bytes;
  c->named_key = w.key;
  g.constant_data.push_back(std::move(c));
  return static_cast<uint32_t>(g.constant_data.size() - 1);
}

void put_u32(std::string& out, size_t at, uint32_t v) { std::memcpy(out.data() + at, &v, sizeof v); }

// XNNHeader: 4 zero bytes, "XH00", u16 header length (30), u32 flatbuffer offset and size, u32
// constant data offset (after the flatbuffer, 16-aligned), u64 constant data size (0: weights
// are named data).
std::string with_header(const flatbuffers::FlatBufferBuilder& fbb) {
  const size_t size = fbb.GetSize();
  const size_t constants = (kHeaderSize + size + 15) / 16 * 16;
  std::string out(constants, '\0');
  std::memcpy(out.data() + 4, "XH00", 4);
  const uint16_t header_length = 30;
  std::memcpy(out.data() + 8, &header_length, sizeof header_length);
  put_u32(out, 10, static_cast<uint32_t>(kHeaderSize));
  put_u32(out, 14, static_cast<uint32_t>(size));
  put_u32(out, 18, static_cast<uint32_t>(constants));
  std::memcpy(out.data() + kHeaderSize, fbb.GetBufferPointer(), size);
  return out;
}

// A graph whose constant_data starts with the runtime's "not a constant" entry 0, and x as
// external input 0.
xfb::XNNGraphT graph_with_input(const std::vector<int64_t>& x_dims, XnnFloat type = XnnFloat::F32) {
  xfb::XNNGraphT g;
  g.version = "0";
  g.constant_data.push_back(std::make_unique<xfb::ConstantDataOffsetT>());
  add_value(g, x_dims, 0, 0, kExternalInput, type);
  return g;
}

// Ends `g` with y = fully_connected(input, filter) (+ bias) as external output 1, and packs it.
std::string finish_fully_connected(xfb::XNNGraphT& g, uint32_t input, uint32_t filter, const XnnWeight* bias,
                                   const std::vector<int64_t>& y_dims, XnnFloat type = XnnFloat::F32) {
  const uint32_t bias_id = bias ? static_cast<uint32_t>(g.xvalues.size()) : kNoValue;
  if (bias) add_value(g, bias->dims, add_constant(g, *bias), kNoValue, 0, type);
  const auto y = static_cast<uint32_t>(g.xvalues.size());
  add_value(g, y_dims, 0, 1, kExternalOutput, type);
  xfb::XNNFullyConnectedT fc;
  fc.input1_id = input;
  fc.filter_id = filter;
  fc.bias_id = bias_id;
  fc.output_id = y;
  add_node(g, xfb::XNodeUnion::XNNFullyConnected, std::move(fc));
  g.num_externs = 2;
  g.input_ids = {0};
  g.output_ids = {y};
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(xfb::XNNGraph::Pack(fbb, &g), xfb::XNNGraphIdentifier());
  return with_header(fbb);
}

}  // namespace

std::string xnnpack_fully_connected(const std::vector<int64_t>& x_dims, const std::vector<int64_t>& y_dims,
                                    const XnnWeight& weight, const XnnWeight* bias, XnnFloat type) {
  xfb::XNNGraphT g = graph_with_input(x_dims, type);                     // 0: x
  add_value(g, weight.dims, add_constant(g, weight), kNoValue, 0, type);  // 1: the weight
  return finish_fully_connected(g, 0, 1, bias, y_dims, type);
}

namespace {

// 1: x as int8, quantized per token at run time (after x, value 0).
void add_per_token_input(xfb::XNNGraphT& g, const std::vector<int64_t>& x_dims) {
  xfb::XNNQuantizedTensorValueT q;
  q.tensor_value = quantized_tensor(g, xfb::XNNDatatype::xnn_datatype_qdint8, x_dims, 0);
  xfb::PerTokenDynamicQuantT per_token;
  per_token.num_nonbatch_dims = 1;
  q.quant_params.Set(std::move(per_token));
  push_value(g, std::move(q));
}

// 2: the weight, codes of `type` (constant `code_data`) with their scales' `params`.
template <class Params>
void add_quantized_weight(xfb::XNNGraphT& g, xfb::XNNDatatype type, uint32_t code_data,
                          const std::vector<int64_t>& dims, Params params) {
  xfb::XNNQuantizedTensorValueT q;
  q.tensor_value = quantized_tensor(g, type, dims, code_data);
  q.quant_params.Set(std::move(params));
  push_value(g, std::move(q));
}

// Converts value 0 into value 1 and multiplies it by the weight, value 2.
std::string finish_quantized(xfb::XNNGraphT& g, const XnnWeight* bias, const std::vector<int64_t>& y_dims) {
  xfb::_XNNNode1x1T convert;
  convert.input_id = 0;
  convert.output_id = 1;
  add_node(g, xfb::XNodeUnion::XNNConvert, std::move(convert));
  return finish_fully_connected(g, 1, 2, bias, y_dims);
}

}  // namespace

std::string xnnpack_fully_connected_qb4(const std::vector<int64_t>& x_dims, const std::vector<int64_t>& y_dims,
                                        const XnnWeight& codes, const XnnWeight& scales, int64_t group_size,
                                        const XnnWeight* bias) {
  HFX_CHECK(codes.dims.size() == 2 && codes.dims[1] % group_size == 0, "executorch: 4-bit weight ", codes.key,
            " is not [N, K] in groups of ", group_size);
  xfb::XNNGraphT g = graph_with_input(x_dims);  // 0: x
  add_per_token_input(g, x_dims);               // 1
  xfb::PerChannelGroupQuantT groups;
  groups.channel_dim = 0;
  groups.group_size = static_cast<int32_t>(group_size);
  groups.num_scales = static_cast<uint32_t>(codes.dims[0] * codes.dims[1] / group_size);
  const uint32_t code_data = add_constant(g, codes);  // the codes' constant, then the scales'
  groups.scale_buffer_idx = add_constant(g, scales);
  add_quantized_weight(g, xfb::XNNDatatype::xnn_datatype_qbint4, code_data, codes.dims, std::move(groups));
  return finish_quantized(g, bias, y_dims);
}

std::string xnnpack_fully_connected_qc8(const std::vector<int64_t>& x_dims, const std::vector<int64_t>& y_dims,
                                        const XnnWeight& codes, const XnnWeight& scales, const XnnWeight* bias) {
  HFX_CHECK(codes.dims.size() == 2, "executorch: 8-bit weight ", codes.key, " is not [N, K]");
  xfb::XNNGraphT g = graph_with_input(x_dims);  // 0: x
  add_per_token_input(g, x_dims);               // 1
  xfb::PerChannelQuantT channels;
  channels.channel_dim = 0;
  channels.num_scales = static_cast<uint32_t>(codes.dims[0]);
  const uint32_t code_data = add_constant(g, codes);  // the codes' constant, then the scales'
  channels.scale_buffer_idx = add_constant(g, scales);
  add_quantized_weight(g, xfb::XNNDatatype::xnn_datatype_qcint8, code_data, codes.dims, std::move(channels));
  return finish_quantized(g, bias, y_dims);
}

}  // namespace hfx
