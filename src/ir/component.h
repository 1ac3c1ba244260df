// What each graph of an export is for. export.json names a component by its role, the runners
// look components up by role, and each backend derives its file, method or program name from the
// role in one function of its own (`onnx_file_stem`, `openvino_file_stem`, `executorch_method`,
// `pt2_program`).
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace hfx {

enum class Role : uint8_t {
  Forward,         // the plain forward: outputs for the whole input (export.json: "model")
  Prefill,         // prompt -> last logits and a fresh cache
  Decode,          // the step a decode loop repeats (one token; several with multi_token_decode)
  Encoder,         // an encoder-decoder's encoder, run once per input
  Decoder,         // an encoder-decoder's decoder step, reading the encoder's state
  TextDecoder,     // a decoder over inputs_embeds (a vision-language model's language model)
  TokenEmbedding,  // token ids -> inputs_embeds
  VisionEncoder,   // pixel values -> image embeddings
  AudioEncoder,    // audio features -> audio embeddings
  // A runtime pipeline's parts of a vision encoder (OpenVINO GenAI's Qwen-VL split): the patch
  // embedding, the learned position rows, the blocks and mergers over host-computed masks and RoPE.
  VisionEmbeddings,
  VisionEmbeddingsPos,
  VisionEmbeddingsMerger,
};

// export.json's name for the role (io/manifest.h spells them: manifest::component).
std::string_view role_name(Role role);
std::optional<Role> role_named(std::string_view name);
std::vector<Role> all_roles();
// The graph a runtime runs as "the model": the plain forward, or the decode step that serves every
// call of a decode loop (ExecuTorch's `forward`, OpenVINO's openvino_model.xml, the .pt2 `model`).
bool is_main_role(Role role);
// The graph a decode loop repeats, which carries the loop's cache: the decode step, an
// encoder-decoder's decoder, a vision-language model's text decoder.
bool is_loop_step(Role role);

}  // namespace hfx
