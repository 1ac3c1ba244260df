// XNNPACK delegate payloads: what ExecuTorch's XnnpackBackend reads from a delegate's segment, an
// XNNGraph flatbuffer (XNNPACK's schema.fbs, "XN01") behind a 32-byte header. Weights are not in
// the payload: each names a Program.named_data entry.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hfx {

// A weight the payload reads from the program's named data.
struct XnnWeight {
  std::string key;
  std::vector<int64_t> dims;
  uint64_t bytes = 0;
};

// The float type of a float payload's values (x, weight, bias, y alike).
enum class XnnFloat { F32, F16 };

// One float fully connected layer, y[..., N] = x[..., K] · W[N, K]ᵀ (+ b[N]): x the delegate's
// input, y its output (their dims are upper bounds; the runtime reshapes to the actual ones).
std::string xnnpack_fully_connected(const std::vector<int64_t>& x_dims, const std::vector<int64_t>& y_dims,
                                    const XnnWeight& weight, const XnnWeight* bias, XnnFloat type);

// One 4-bit linear as ExecuTorch's 8da4w export writes it: x converted to int8 per token
// (XNNConvert to dynamic qdint8), then a fully connected layer over blockwise 4-bit weights
// (qbint4: [N, K] as K/2 bytes per row, the earlier value in the low nibble, code = q + 8) with one
// positive bfloat16 scale per group of `group_size` values along K.
std::string xnnpack_fully_connected_qb4(const std::vector<int64_t>& x_dims, const std::vector<int64_t>& y_dims,
                                        const XnnWeight& codes, const XnnWeight& scales, int64_t group_size,
                                        const XnnWeight* bias);

// One 8-bit linear as ExecuTorch's XNNPACK quantizer writes a dynamically quantized one: x
// converted to int8 per token, then a fully connected layer over per-channel int8 weights
// (qcint8: [N, K] signed, no zero point) with one positive float32 scale per output channel.
std::string xnnpack_fully_connected_qc8(const std::vector<int64_t>& x_dims, const std::vector<int64_t>& y_dims,
                                        const XnnWeight& codes, const XnnWeight& scales, const XnnWeight* bias);

}  // namespace hfx
