// Output directory written atomically: everything goes to a temporary sibling directory that is
// renamed into place by commit(); if commit() is never reached, nothing is left behind.
#pragma once
#include <filesystem>

namespace hfx {

class AtomicOutputDir {
 public:
  AtomicOutputDir(const std::filesystem::path& target, bool overwrite);
  ~AtomicOutputDir();
  AtomicOutputDir(const AtomicOutputDir&) = delete;
  AtomicOutputDir& operator=(const AtomicOutputDir&) = delete;

  const std::filesystem::path& path() const { return staging_; }  // write here
  const std::filesystem::path& target() const { return target_; }
  void commit();

 private:
  std::filesystem::path target_;
  std::filesystem::path staging_;
  bool overwrite_;
  bool committed_ = false;
};

}  // namespace hfx
