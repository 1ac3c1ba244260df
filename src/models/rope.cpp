#include "models/rope.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hfx {
namespace {

constexpr int64_t kMaxRotaryDim = 65536;
constexpr double kMaxDynamicPositions = 2147483648.0;  // 2^31

// HF: 1 / base ** (arange(0, dim, 2).float() / dim), in float32.
std::vector<float> default_inv_freq(double base, int64_t dim) {
  std::vector<float> out;
  for (int64_t i = 0; i < dim; i += 2)
    out.push_back(1.0f / std::pow(static_cast<float>(base), static_cast<float>(i) / static_cast<float>(dim)));
  return out;
}

void apply_llama3(RopeConfig& r, const JsonConfig& p) {
  const double factor = p.number("factor");
  const double low = p.number("low_freq_factor");
  const double high = p.number("high_freq_factor");
  const double old_len = p.number("original_max_position_embeddings");
  if (high == low) p.invalid("high_freq_factor", "must differ from low_freq_factor");
  const double low_wavelen = old_len / low, high_wavelen = old_len / high;
  for (float& f : r.inv_freq) {
    const float wavelen = static_cast<float>(2 * M_PI) / f;
    float scaled = wavelen > low_wavelen ? f / static_cast<float>(factor) : f;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
      const float smooth = static_cast<float>((old_len / wavelen - low) / (high - low));
      scaled = (1 - smooth) * scaled / static_cast<float>(factor) + smooth * scaled;
    }
    f = scaled;
  }
}

void apply_yarn(RopeConfig& r, const JsonConfig& p, const JsonConfig& config) {
  const double factor = p.number("factor");
  const double base = r.theta;
  const auto dim = static_cast<double>(r.rotary_dim);
  const double original = p.has("original_max_position_embeddings")
                              ? p.number("original_max_position_embeddings")
                              : static_cast<double>(config.positive("max_position_embeddings"));
  auto mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  if (p.has("attention_factor")) {
    r.attention_scaling = p.number("attention_factor");
  } else if (p.number("mscale", 0) != 0 && p.number("mscale_all_dim", 0) != 0) {
    r.attention_scaling = mscale(factor, p.number("mscale")) / mscale(factor, p.number("mscale_all_dim"));
  } else {
    r.attention_scaling = mscale(factor, 1.0);
  }
  const double beta_fast = p.number("beta_fast", 0) != 0 ? p.number("beta_fast") : 32.0;
  const double beta_slow = p.number("beta_slow", 0) != 0 ? p.number("beta_slow") : 1.0;
  auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (p.boolean("truncate", true)) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;
  const std::vector<float> extrapolation = r.inv_freq;
  for (size_t i = 0; i < r.inv_freq.size(); ++i) {
    const float pos_freq = std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(dim));
    const float interpolation = 1.0f / (static_cast<float>(factor) * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) /
                                      static_cast<float>(high - low), 0.0f, 1.0f);
    const float extrapolation_factor = 1 - ramp;
    r.inv_freq[i] = interpolation * (1 - extrapolation_factor) + extrapolation[i] * extrapolation_factor;
  }
}

// HF longrope: inv_freq = 1 / (factor_i * base^(2i / dim)) for the short and the long factors;
// cos/sin scaled by attention_factor (default sqrt(1 + ln(factor) / ln(original length))).
void apply_longrope(RopeConfig& r, const JsonConfig& p, const JsonConfig& config) {
  const int64_t original = config.has("original_max_position_embeddings")  // the top-level key wins, as in HF
                               ? config.positive("original_max_position_embeddings")
                               : p.positive("original_max_position_embeddings");
  r.original_max_position_embeddings = original;
  auto frequencies = [&](const char* key) {
    if (!p.has(key) || !p.at(key).is_array() || p.at(key).size() != r.inv_freq.size())
      p.invalid(key, str("must list ", r.inv_freq.size(), " numbers (rotary dimension / 2)"));
    std::vector<float> out;
    const auto dim = static_cast<float>(r.rotary_dim);
    for (size_t i = 0; i < r.inv_freq.size(); ++i) {
      const auto& f = p.at(key)[i];
      if (!f.is_number() || f.get<double>() <= 0) p.invalid(key, "entries must be positive numbers");
      const float base = std::pow(static_cast<float>(r.theta), static_cast<float>(2 * i) / dim);
      out.push_back(1.0f / (f.get<float>() * base));
    }
    return out;
  };
  r.inv_freq = frequencies("short_factor");
  r.long_inv_freq = frequencies("long_factor");
  if (p.has("attention_factor")) {
    r.attention_scaling = p.number("attention_factor");
  } else {
    const double factor = p.has("factor") ? p.number("factor")
                                          : static_cast<double>(r.max_position_embeddings) / static_cast<double>(original);
    r.attention_scaling = factor <= 1 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(static_cast<double>(original)));
  }
}

void read_mrope_section(RopeConfig& r, const JsonConfig& p) {
  const auto& section = p.at("mrope_section");
  int64_t sum = 0;
  if (section.is_array() && section.size() == 3)
    for (const auto& s : section) {
      if (!s.is_number_integer() || s.get<int64_t>() < 0) p.invalid("mrope_section", "entries must be non-negative integers");
      r.mrope_section.push_back(s.get<int64_t>());
      sum += s.get<int64_t>();
    }
  const auto half = static_cast<int64_t>(r.inv_freq.size());
  if (r.mrope_section.size() != 3 || sum != half)
    p.invalid("mrope_section", str("must list 3 sizes (temporal, height, width) summing to ", half, " (rotary dimension / 2)"));
  if (r.type != "default") p.invalid("mrope_section", str("multimodal RoPE with rope type '", r.type, "' is not supported"));
}

}  // namespace

RopeConfig parse_rope(const JsonConfig& config, const RopeDefaults& d, std::optional<JsonConfig> params) {
  const int64_t head_dim = d.head_dim, max_position_embeddings = d.max_position_embeddings;
  // 4.x `rope_scaling` wins over 5.x `rope_parameters`, as in transformers' own conversion.
  if (!params) params = config.object("rope_scaling");
  if (!params) params = config.object("rope_parameters");
  if (!params) params = JsonConfig(nlohmann::json::object(), config.where());
  RopeConfig r;
  r.type = params->string("rope_type", params->string("type", "default"));
  if (r.type == "mrope") r.type = "default";  // transformers 4.x's name for Qwen2-VL's, which it renames so
  r.theta = params->number("rope_theta", config.number("rope_theta", d.theta));
  if (r.theta <= 0) config.invalid("rope_theta", "must be positive");
  // The RoPE entry's factor first: transformers' configs fill it from the top-level key only when unset.
  const double partial = !d.partial_rotary                          ? 1.0
                         : params->has("partial_rotary_factor")     ? params->number("partial_rotary_factor")
                                                                    : config.number("partial_rotary_factor", d.partial_rotary_factor);
  if (partial <= 0 || partial > 1) config.invalid("partial_rotary_factor", "must be in (0, 1]");
  r.rotary_dim = static_cast<int64_t>(static_cast<double>(head_dim) * partial);
  if (r.rotary_dim < 2 || r.rotary_dim % 2) fail(config.where(), ": rotary dimension ", r.rotary_dim, " must be even and positive");
  // The tables are built here, a float per pair: a head size no model has (a corrupt config) is
  // refused before it allocates (the largest real ones are a few hundred).
  if (r.rotary_dim > kMaxRotaryDim)
    fail(config.where(), ": rotary dimension ", r.rotary_dim, " (from the head size) exceeds ", kMaxRotaryDim);
  r.max_position_embeddings = max_position_embeddings;
  r.inv_freq = default_inv_freq(r.theta, r.rotary_dim);
  if (r.type == "default") {
  } else if (r.type == "linear") {
    r.factor = params->number("factor");
    for (float& f : r.inv_freq) f /= static_cast<float>(r.factor);
  } else if (r.type == "dynamic") {
    r.factor = params->number("factor");
  } else if (r.type == "llama3") {
    apply_llama3(r, *params);
  } else if (r.type == "yarn") {
    apply_yarn(r, *params, config);
  } else if (r.type == "longrope") {
    apply_longrope(r, *params, config);
  } else {
    fail(params->where(), ": rope type '", r.type,
         "' is not supported (supported: default, linear, dynamic, llama3, yarn, longrope)");
  }
  if ((r.type == "linear" || r.type == "dynamic") && !(r.factor > 0))
    params->invalid("factor", "must be positive");
  // Dynamic NTK stretches the sequence bound to max_position_embeddings x factor: keep it a length.
  if (r.type == "dynamic" && !(r.factor * static_cast<double>(max_position_embeddings) <= kMaxDynamicPositions))
    params->invalid("factor", "stretches max_position_embeddings past 2^31 positions");
  if (params->has("mrope_section")) read_mrope_section(r, *params);
  return r;
}

namespace {

// max(position_ids) + 1 as transformers computes it over the call's positions, read from the last
// column: with left padding that column is every row's last real token, so padding (which the
// static-cache runner parks at the cache's last slots) does not count.
Value* positions_seen(Builder& b, Value* position_ids) {
  Value* last = b.slice(position_ids, 1, -1, INT64_MAX);
  return b.add(b.reduce(OpKind::ReduceMax, last, {}, false), b.const_i64({1}));
}

// HF's tables from the angles [B, S, R/2]: cos and sin of them repeated over the rotary dim, scaled.
std::pair<Value*, Value*> cos_sin(Builder& b, Value* freqs, double scaling) {
  Value* emb = b.concat({freqs, freqs}, -1);
  Value* cos = b.unary(OpKind::Cos, emb);
  Value* sin = b.unary(OpKind::Sin, emb);
  if (scaling != 1.0) {
    Value* s = b.scalar(scaling, DType::F32);
    cos = b.mul(cos, s);
    sin = b.mul(sin, s);
  }
  return {cos, sin};
}

// Qwen2-VL: each frequency's position from its section's row (Qwen3-VL: interleaved rows) of [3, batch, sequence], picked by a
// one-hot [3, half] matmul (exact for integer positions), then the default table over those.
std::pair<Value*, Value*> mrope_cos_sin(Builder& b, const RopeConfig& rope, Value* position_ids) {
  const auto half = static_cast<int64_t>(rope.inv_freq.size());
  std::vector<int64_t> row_of(static_cast<size_t>(half), 0);
  if (rope.mrope_interleaved) {
    for (int64_t row = 1; row < 3; ++row)
      for (int64_t i = row; i < std::min(3 * rope.mrope_section[static_cast<size_t>(row)], half); i += 3)
        row_of[static_cast<size_t>(i)] = row;
  } else {
    int64_t first = 0;
    for (int64_t row = 0; row < 3; ++row) {
      for (int64_t i = first; i < first + rope.mrope_section[static_cast<size_t>(row)]; ++i) row_of[static_cast<size_t>(i)] = row;
      first += rope.mrope_section[static_cast<size_t>(row)];
    }
  }
  std::vector<float> pick(static_cast<size_t>(3 * half), 0.0f);
  for (int64_t i = 0; i < half; ++i) pick[static_cast<size_t>(row_of[static_cast<size_t>(i)] * half + i)] = 1.0f;
  Value* rows_last = b.transpose(b.cast(position_ids, DType::F32), {1, 2, 0});        // [B, S, 3]
  Value* per_freq = b.matmul(rows_last, b.const_f32(pick, {3, half}));                 // [B, S, half]
  Value* freqs = b.mul(per_freq, b.const_f32(rope.inv_freq, {half}));
  return cos_sin(b, freqs, rope.attention_scaling);
}

}  // namespace

std::pair<Value*, Value*> rope_cos_sin(Builder& b, const RopeConfig& rope, Value* position_ids) {
  const auto half = static_cast<int64_t>(rope.inv_freq.size());
  if (!rope.mrope_section.empty()) return mrope_cos_sin(b, rope, position_ids);
  Value* inv_freq;
  if (rope.type == "dynamic") {
    // NTK: base' = base * (factor * L / max_pos - (factor - 1)) ** (dim / (dim - 2)),
    // L = max(max(position_ids) + 1, max_pos), all in float32 as HF.
    Value* seen = positions_seen(b, position_ids);
    Value* len = b.cast(b.max(seen, b.const_i64({rope.max_position_embeddings})), DType::F32);
    Value* ratio = b.div(b.mul(len, b.scalar(rope.factor, DType::F32)),
                         b.scalar(static_cast<double>(rope.max_position_embeddings), DType::F32));
    const auto dim = static_cast<double>(rope.rotary_dim);
    Value* base = b.mul(b.scalar(rope.theta, DType::F32),
                        b.pow(b.sub(ratio, b.scalar(rope.factor - 1, DType::F32)),
                              b.scalar(dim / (dim - 2), DType::F32)));
    std::vector<float> exponents;
    for (int64_t i = 0; i < rope.rotary_dim; i += 2)
      exponents.push_back(static_cast<float>(i) / static_cast<float>(rope.rotary_dim));
    inv_freq = b.unary(OpKind::Reciprocal, b.pow(base, b.const_f32(exponents, {half})));
  } else if (rope.type == "longrope") {
    // The long factors once any position of the call reaches past the original length (HF
    // decides per forward on max(position_ids) + 1, over the whole batch).
    Value* seen = positions_seen(b, position_ids);
    Value* is_long = b.compare(OpKind::Greater, seen, b.const_i64({rope.original_max_position_embeddings}));
    inv_freq = b.where(is_long, b.const_f32(rope.long_inv_freq, {half}), b.const_f32(rope.inv_freq, {half}));
  } else {  // a static table: one op, which a backend may fuse into its attention
    inv_freq = b.const_f32(rope.inv_freq, {half});
    return {b.rope_table(position_ids, inv_freq, rope.attention_scaling, false),
            b.rope_table(position_ids, inv_freq, rope.attention_scaling, true)};
  }
  Value* pos = b.unsqueeze(b.cast(position_ids, DType::F32), {-1});  // [B, S, 1]
  Value* freqs = b.mul(pos, inv_freq);                               // [B, S, R/2]
  return cos_sin(b, freqs, rope.attention_scaling);
}

}  // namespace hfx
