#include "io/output_dir.h"

#include <unistd.h>

#include <system_error>

#include "core/error.h"

namespace hfx {

namespace fs = std::filesystem;

AtomicOutputDir::AtomicOutputDir(const fs::path& target, bool overwrite)
    : target_(fs::absolute(target).lexically_normal()), overwrite_(overwrite) {
  if (target_.filename().empty()) target_ = target_.parent_path();
  if (fs::exists(target_) && !overwrite)
    fail(target.string(), ": output directory already exists (pass --overwrite to replace it)");
  if (fs::exists(target_) && !fs::is_directory(target_))
    fail(target.string(), ": exists and is not a directory");
  const fs::path parent = target_.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) fail(target.string(), ": cannot create parent directory: ", ec.message());
  staging_ = parent / ("." + target_.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(staging_, ec);
  if (!fs::create_directory(staging_, ec) || ec)
    fail(target.string(), ": cannot create output directory: ",
         ec ? ec.message() : std::string("permission denied"));
}

AtomicOutputDir::~AtomicOutputDir() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
}

void AtomicOutputDir::commit() {
  std::error_code ec;
  fs::path old;
  if (fs::exists(target_)) {
    if (!overwrite_) fail(target_.string(), ": output directory already exists (created while exporting)");
    old = target_.parent_path() / ("." + target_.filename().string() + ".old-" + std::to_string(::getpid()));
    fs::rename(target_, old, ec);
    if (ec) fail(target_.string(), ": cannot replace existing directory: ", ec.message());
  }
  fs::rename(staging_, target_, ec);
  if (ec) {
    if (!old.empty()) fs::rename(old, target_, ec);
    fail(target_.string(), ": cannot move output into place: ", ec.message());
  }
  committed_ = true;
  if (!old.empty()) fs::remove_all(old, ec);
}

}  // namespace hfx
