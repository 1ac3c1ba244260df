#include "runners/common/options.h"

#include <sstream>
#include <string>

#include "core/error.h"

namespace hfx {
namespace {

std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    try {
      ids.push_back(std::stoll(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size()) fail("--input-ids: '", text, "' is not a comma-separated list of integers");
  }
  if (ids.empty()) fail("--input-ids: no token ids given");
  return ids;
}

}  // namespace

GenerateOptions parse_generate_args(int argc, char** argv) {
  GenerateOptions o;
  bool have_ids = false;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) fail(argv[i], " needs a value");
    return argv[++i];
  };
  auto number = [&](int& i) -> double {
    const std::string v = value(i);
    size_t used = 0;
    double d = 0;
    try {
      d = std::stod(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.size() || v.empty()) fail(argv[i - 1], ": '", v, "' is not a number");
    return d;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--input-ids") o.input_ids = parse_ids(value(i)), have_ids = true;
    else if (a == "--max-new-tokens") o.max_new_tokens = static_cast<int64_t>(number(i));
    else if (a == "--ignore-eos") o.ignore_eos = true;
    else if (a == "--stats") o.stats = true;
    else if (a == "--do-sample") o.do_sample = true;
    else if (a == "--temperature") o.temperature = number(i);
    else if (a == "--top-k") o.top_k = static_cast<int64_t>(number(i));
    else if (a == "--top-p") o.top_p = number(i);
    else if (a == "--seed") o.seed = static_cast<uint64_t>(number(i)), o.seeded = true;
    else if (!a.empty() && a[0] == '-') fail("unknown option ", a);
    else if (o.out_dir.empty()) o.out_dir = a;
    else fail("unexpected argument ", a);
  }
  if (o.out_dir.empty()) fail("OUT_DIR is required");
  if (!have_ids) fail("--input-ids is required");
  if (o.max_new_tokens < 1) fail("--max-new-tokens must be at least 1 (max_new_tokens)");
  if (o.temperature <= 0) fail("--temperature must be positive (temperature)");
  if (o.top_k < 0) fail("--top-k must be >= 0");
  if (!(o.top_p > 0 && o.top_p <= 1)) fail("--top-p must be in (0, 1] (top_p)");
  return o;
}

}  // namespace hfx
