#include "backends/executorch/xnnpack.h"

#include <cstring>
#include <limits>

#include "core/error.h"
#include "xnnpack/schema_generated.h"

namespace hfx {
namespace {

namespace xfb = fb_xnnpack;

constexpr uint32_t kExternalInput = 1, kExternalOutput = 2;  // XNNTensorValue.flags
constexpr uint32_t kTransposeB = 1;                           // XNN_FLAG_TRANSPOSE_B
constexpr size_t kHeaderSize = 32;                            // the 30-byte XNNHeader, padded
constexpr size_t kConstantAlignment = 16;  // where constant data would start

std::vector<uint32_t> dims_of(const std::vector<int64_t>& dims) {
  std::vector<uint32_t> out;
  for (int64_t d : dims) {
    HFX_CHECK(d >= 0 && d < XnnGraphBuilder::kNone, "executorch: XNNPACK dim ", d, " out of range");
    out.push_back(static_cast<uint32_t>(d));
  }
  return out;
}

xfb::XNNDatatype float_datatype(XnnFloat type) {
  return type == XnnFloat::F16 ? xfb::XNNDatatype::xnn_datatype_fp16 : xfb::XNNDatatype::xnn_datatype_fp32;
}

std::unique_ptr<xfb::XNNTensorValueT> tensor_value(const xfb::XNNGraphT& g, xfb::XNNDatatype type,
                                                  const std::vector<int64_t>& dims, uint32_t constant,
                                                  uint32_t flags) {
  auto t = std::make_unique<xfb::XNNTensorValueT>();
  t->datatype = type;
  t->dims = dims_of(dims);
  t->num_dims = static_cast<uint32_t>(t->dims.size());
  t->constant_buffer_idx = constant;
  t->external_id = XnnGraphBuilder::kNone;  // set for externals by finish()
  t->flags = flags;
  t->id_out = static_cast<uint32_t>(g.xvalues.size());
  return t;
}

template <class Value>
uint32_t push_value(xfb::XNNGraphT& g, Value value) {
  auto v = std::make_unique<xfb::XValueT>();
  v->xvalue_union.Set(std::move(value));
  g.xvalues.push_back(std::move(v));
  return static_cast<uint32_t>(g.xvalues.size() - 1);
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

void put_u32(std::string& out, size_t at, uint32_t v) { std::memcpy(out.data() + at, &v, sizeof v); }

// XNNHeader: 4 zero bytes, "XH00", u16 header length (30), u32 flatbuffer offset and size, u32
// constant data offset (after the flatbuffer, 16-aligned), u64 constant data size (0).
std::string with_header(const flatbuffers::FlatBufferBuilder& fbb) {
  const size_t size = fbb.GetSize();
  const size_t at = (kHeaderSize + size + kConstantAlignment - 1) / kConstantAlignment * kConstantAlignment;
  std::string out(at, '\0');
  std::memcpy(out.data() + 4, "XH00", 4);
  const uint16_t header_length = 30;
  std::memcpy(out.data() + 8, &header_length, sizeof header_length);
  put_u32(out, 10, static_cast<uint32_t>(kHeaderSize));
  put_u32(out, 14, static_cast<uint32_t>(size));
  put_u32(out, 18, static_cast<uint32_t>(at));
  std::memcpy(out.data() + kHeaderSize, fbb.GetBufferPointer(), size);
  return out;
}

}  // namespace

// constant_data starts with the runtime's "not a constant" entry 0.
XnnGraphBuilder::XnnGraphBuilder() : g_(std::make_unique<xfb::XNNGraphT>()) {
  g_->version = "0";
  g_->constant_data.push_back(std::make_unique<xfb::ConstantDataOffsetT>());
}

XnnGraphBuilder::~XnnGraphBuilder() = default;

uint32_t XnnGraphBuilder::push(XnnFloat type, const std::vector<int64_t>& dims, uint32_t constant, uint32_t flags) {
  return push_value(*g_, std::move(*tensor_value(*g_, float_datatype(type), dims, constant, flags)));
}

uint32_t XnnGraphBuilder::external_input(XnnFloat type, const std::vector<int64_t>& dims) {
  const uint32_t id = push(type, dims, 0, kExternalInput);
  inputs_.push_back(id);
  return id;
}

uint32_t XnnGraphBuilder::external_output(XnnFloat type, const std::vector<int64_t>& dims) {
  const uint32_t id = push(type, dims, 0, kExternalOutput);
  outputs_.push_back(id);
  return id;
}

uint32_t XnnGraphBuilder::internal(XnnFloat type, const std::vector<int64_t>& dims) {
  return push(type, dims, 0, 0);
}

uint32_t XnnGraphBuilder::constant_entry(const XnnWeight& w) {
  auto c = std::make_unique<xfb::ConstantDataOffsetT>();
  c->offset = std::numeric_limits<uint64_t>::max();  // read by key from the named data
  c->size = w.bytes;
  c->named_key = w.key;
  g_->constant_data.push_back(std::move(c));
  return static_cast<uint32_t>(g_->constant_data.size() - 1);
}

uint32_t XnnGraphBuilder::named_constant(XnnFloat type, const XnnWeight& w) {
  return push(type, w.dims, constant_entry(w), 0);
}

uint32_t XnnGraphBuilder::per_token_int8(const std::vector<int64_t>& dims) {
  xfb::XNNQuantizedTensorValueT q;
  q.tensor_value = tensor_value(*g_, xfb::XNNDatatype::xnn_datatype_qdint8, dims, 0, 0);
  xfb::PerTokenDynamicQuantT per_token;
  per_token.num_nonbatch_dims = 1;
  q.quant_params.Set(std::move(per_token));
  return push_value(*g_, std::move(q));
}

uint32_t XnnGraphBuilder::qb4_weight(const XnnWeight& codes, const XnnWeight& scales, int64_t group_size) {
  HFX_CHECK(codes.dims.size() == 2 && codes.dims[1] % group_size == 0, "executorch: 4-bit weight ", codes.key,
            " is not [N, K] in groups of ", group_size);
  xfb::PerChannelGroupQuantT groups;
  groups.channel_dim = 0;
  groups.group_size = static_cast<int32_t>(group_size);
  groups.num_scales = static_cast<uint32_t>(codes.dims[0] * codes.dims[1] / group_size);
  const uint32_t code_data = constant_entry(codes);  // the codes' constant, then the scales'
  groups.scale_buffer_idx = constant_entry(scales);
  xfb::XNNQuantizedTensorValueT q;
  q.tensor_value = tensor_value(*g_, xfb::XNNDatatype::xnn_datatype_qbint4, codes.dims, code_data, 0);
  q.quant_params.Set(std::move(groups));
  return push_value(*g_, std::move(q));
}

uint32_t XnnGraphBuilder::qc8_weight(const XnnWeight& codes, const XnnWeight& scales) {
  HFX_CHECK(codes.dims.size() == 2, "executorch: 8-bit weight ", codes.key, " is not [N, K]");
  xfb::PerChannelQuantT channels;
  channels.channel_dim = 0;
  channels.num_scales = static_cast<uint32_t>(codes.dims[0]);
  const uint32_t code_data = constant_entry(codes);  // the codes' constant, then the scales'
  channels.scale_buffer_idx = constant_entry(scales);
  xfb::XNNQuantizedTensorValueT q;
  q.tensor_value = tensor_value(*g_, xfb::XNNDatatype::xnn_datatype_qcint8, codes.dims, code_data, 0);
  q.quant_params.Set(std::move(channels));
  return push_value(*g_, std::move(q));
}

void XnnGraphBuilder::unary(xfb::XNodeUnion type, uint32_t x, uint32_t y) {
  xfb::_XNNNode1x1T node;
  node.input_id = x;
  node.output_id = y;
  add_node(*g_, type, std::move(node));
}

void XnnGraphBuilder::binary(xfb::XNodeUnion type, uint32_t a, uint32_t b, uint32_t y, uint32_t flags) {
  xfb::_XNNNode2x1T node;
  node.input1_id = a;
  node.input2_id = b;
  node.output_id = y;
  node.flags = flags;
  add_node(*g_, type, std::move(node));
}

void XnnGraphBuilder::fully_connected(uint32_t x, uint32_t filter, uint32_t bias, uint32_t y) {
  xfb::XNNFullyConnectedT fc;
  fc.input1_id = x;
  fc.filter_id = filter;
  fc.bias_id = bias;
  fc.output_id = y;
  add_node(*g_, xfb::XNodeUnion::XNNFullyConnected, std::move(fc));
}

void XnnGraphBuilder::batch_matmul(uint32_t a, uint32_t b, uint32_t y, bool transpose_b) {
  binary(xfb::XNodeUnion::XNNBatchMatrixMultiply, a, b, y, transpose_b ? kTransposeB : 0);
}

void XnnGraphBuilder::reshape(uint32_t x, uint32_t y, const std::vector<int64_t>& new_shape) {
  xfb::XNNStaticReshapeT node;
  node.new_shape = dims_of(new_shape);
  node.num_dims = static_cast<uint32_t>(new_shape.size());
  node.input_id = x;
  node.output_id = y;
  add_node(*g_, xfb::XNodeUnion::XNNStaticReshape, std::move(node));
}

void XnnGraphBuilder::transpose(uint32_t x, uint32_t y, const std::vector<int64_t>& perm) {
  xfb::XNNStaticTransposeT node;
  node.perm = dims_of(perm);
  node.num_dims = static_cast<uint32_t>(perm.size());
  node.input_id = x;
  node.output_id = y;
  add_node(*g_, xfb::XNodeUnion::XNNStaticTranspose, std::move(node));
}

void XnnGraphBuilder::slice(uint32_t x, uint32_t y, const std::vector<int64_t>& offsets,
                            const std::vector<int64_t>& sizes) {
  xfb::XNNStaticSliceT node;
  node.offsets = dims_of(offsets);
  node.sizes = dims_of(sizes);
  node.num_dims = static_cast<uint32_t>(offsets.size());
  node.input_id = x;
  node.output_id = y;
  add_node(*g_, xfb::XNodeUnion::XNNStaticSlice, std::move(node));
}

void XnnGraphBuilder::concat(int64_t axis, const std::vector<uint32_t>& xs, uint32_t y) {
  static const xfb::XNodeUnion kinds[] = {xfb::XNodeUnion::XNNConcatenate2, xfb::XNodeUnion::XNNConcatenate3,
                                          xfb::XNodeUnion::XNNConcatenate4, xfb::XNodeUnion::XNNConcatenate5};
  HFX_CHECK(xs.size() >= 2 && xs.size() <= 5, "internal error: executorch: XNNPACK concatenates 2 to 5 tensors");
  xfb::_XNNCatT node;
  node.axis = static_cast<uint32_t>(axis);
  uint32_t* ids[] = {&node.input1_id, &node.input2_id, &node.input3_id, &node.input4_id, &node.input5_id};
  for (size_t i = 0; i < 5; ++i) *ids[i] = i < xs.size() ? xs[i] : kNone;
  node.output_id = y;
  add_node(*g_, kinds[xs.size() - 2], std::move(node));
}

// External ids are the delegate's argument indices: inputs first, then outputs.
std::string XnnGraphBuilder::finish() {
  uint32_t external = 0;
  for (const std::vector<uint32_t>* ids : {&inputs_, &outputs_})
    for (uint32_t id : *ids) g_->xvalues[id]->xvalue_union.AsXNNTensorValue()->external_id = external++;
  g_->num_externs = external;
  g_->input_ids = inputs_;
  g_->output_ids = outputs_;
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(xfb::XNNGraph::Pack(fbb, g_.get()), xfb::XNNGraphIdentifier());
  return with_header(fbb);
}

std::string xnnpack_fully_connected(const std::vector<int64_t>& x_dims, const std::vector<int64_t>& y_dims,
                                    const XnnWeight& weight, const XnnWeight* bias, XnnFloat type) {
  XnnGraphBuilder g;
  const uint32_t x = g.external_input(type, x_dims);
  const uint32_t w = g.named_constant(type, weight);
  const uint32_t b = bias ? g.named_constant(type, *bias) : XnnGraphBuilder::kNone;
  g.fully_connected(x, w, b, g.external_output(type, y_dims));
  return g.finish();
}

}  // namespace hfx
