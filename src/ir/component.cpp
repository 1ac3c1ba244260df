#include "ir/component.h"

#include <array>
#include <utility>

#include "io/manifest.h"

namespace hfx {
namespace {

namespace component = manifest::component;
constexpr std::array<std::pair<Role, std::string_view>, 12> kRoleNames = {{
    {Role::Forward, component::kModel},
    {Role::Prefill, component::kPrefill},
    {Role::Decode, component::kDecode},
    {Role::Encoder, component::kEncoder},
    {Role::Decoder, component::kDecoder},
    {Role::TextDecoder, component::kTextDecoder},
    {Role::TokenEmbedding, component::kTokenEmbedding},
    {Role::VisionEncoder, component::kVisionEncoder},
    {Role::AudioEncoder, component::kAudioEncoder},
    {Role::VisionEmbeddings, component::kVisionEmbeddings},
    {Role::VisionEmbeddingsPos, component::kVisionEmbeddingsPos},
    {Role::VisionEmbeddingsMerger, component::kVisionEmbeddingsMerger},
}};

}  // namespace

std::string_view role_name(Role role) {
  for (const auto& [r, name] : kRoleNames)
    if (r == role) return name;
  return "?";
}

std::optional<Role> role_named(std::string_view name) {
  for (const auto& [r, n] : kRoleNames)
    if (n == name) return r;
  return std::nullopt;
}

std::vector<Role> all_roles() {
  std::vector<Role> out;
  for (const auto& entry : kRoleNames) out.push_back(entry.first);
  return out;
}

bool is_main_role(Role role) { return role == Role::Forward || role == Role::Decode; }

bool is_loop_step(Role role) { return role == Role::Decode || role == Role::Decoder || role == Role::TextDecoder; }

}  // namespace hfx
