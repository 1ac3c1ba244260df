// XNNPACK delegate payloads: what ExecuTorch's XnnpackBackend reads from a delegate's segment, an
// XNNGraph flatbuffer (XNNPACK's schema.fbs, "XN01") behind a 32-byte header. Constants are not in
// the payload: each names a Program.named_data entry.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fb_xnnpack {
struct XNNGraphT;
enum class XNodeUnion : uint8_t;
}  // namespace fb_xnnpack

namespace hfx {

// A weight the payload reads from the program's named data.
struct XnnWeight {
  std::string key;
  std::vector<int64_t> dims;
  uint64_t bytes = 0;
};

// The float type of a float value.
enum class XnnFloat { F32, F16 };

// An XNNGraph under construction: values (the delegate's external inputs and outputs, internal
// ones, constants) and the nodes between them. Value ids are the order of definition; external
// inputs take the delegate's first arguments in the order they are defined, outputs the rest.
class XnnGraphBuilder {
 public:
  static constexpr uint32_t kNone = 0xffffffffu;  // an absent value (no bias)
  XnnGraphBuilder();
  ~XnnGraphBuilder();
  XnnGraphBuilder(const XnnGraphBuilder&) = delete;
  XnnGraphBuilder& operator=(const XnnGraphBuilder&) = delete;

  // dims are upper bounds; the runtime reshapes to the actual ones.
  uint32_t external_input(XnnFloat type, const std::vector<int64_t>& dims);
  uint32_t external_output(XnnFloat type, const std::vector<int64_t>& dims);
  uint32_t internal(XnnFloat type, const std::vector<int64_t>& dims);
  uint32_t named_constant(XnnFloat type, const XnnWeight& w);
  // x as int8, quantized per token at run time (the input of a dynamically quantized linear).
  uint32_t per_token_int8(const std::vector<int64_t>& dims);
  // Blockwise 4-bit codes (qbint4: [N, K] as K/2 bytes per row, the earlier value in the low
  // nibble, code = q + 8) with one positive bfloat16 scale per `group_size` values along K, or
  // per-channel signed int8 codes (qcint8, no zero point) with one float32 scale per channel.
  uint32_t qb4_weight(const XnnWeight& codes, const XnnWeight& scales, int64_t group_size);
  uint32_t qc8_weight(const XnnWeight& codes, const XnnWeight& scales);

  void unary(fb_xnnpack::XNodeUnion type, uint32_t x, uint32_t y);
  void binary(fb_xnnpack::XNodeUnion type, uint32_t a, uint32_t b, uint32_t y, uint32_t flags = 0);
  void fully_connected(uint32_t x, uint32_t filter, uint32_t bias, uint32_t y);
  void batch_matmul(uint32_t a, uint32_t b, uint32_t y, bool transpose_b);
  void reshape(uint32_t x, uint32_t y, const std::vector<int64_t>& new_shape);  // 0: inferred
  void transpose(uint32_t x, uint32_t y, const std::vector<int64_t>& perm);
  // offsets and sizes per dim; a size of 0 at offset 0 takes the whole dim.
  void slice(uint32_t x, uint32_t y, const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes);
  void concat(int64_t axis, const std::vector<uint32_t>& xs, uint32_t y);

  // The payload: header and flatbuffer.
  std::string finish();

 private:
  uint32_t push(XnnFloat type, const std::vector<int64_t>& dims, uint32_t constant, uint32_t flags);
  uint32_t constant_entry(const XnnWeight& w);
  std::unique_ptr<fb_xnnpack::XNNGraphT> g_;
  std::vector<uint32_t> inputs_, outputs_;
};

// One float fully connected layer, y[..., N] = x[..., K] · W[N, K]ᵀ (+ b[N]): x the delegate's
// input, y its output.
std::string xnnpack_fully_connected(const std::vector<int64_t>& x_dims, const std::vector<int64_t>& y_dims,
                                    const XnnWeight& weight, const XnnWeight* bias, XnnFloat type);

}  // namespace hfx
