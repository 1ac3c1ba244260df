// Output directory written atomically: everything goes to a temporary sibling directory that is
// renamed into place by commit(); if commit() is never reached, nothing is left behind: not on an
// error, not on SIGINT/SIGTERM/SIGHUP once remove_staging_on_signals() is installed, and after a
// SIGKILL or a crash the next export into the same folder removes the dead process's temporaries.
#pragma once
#include <filesystem>
#include <cstdint>
#include <string>
#include <string_view>

namespace hfx {

// Fails, naming the file, when the filesystem cannot hold `size` bytes of it (what it holds already
// counted): before the writing starts, not when the disk fills.
void check_room(int fd, uint64_t size, const std::filesystem::path& path);
// pwrite of all n bytes at `offset` (retried through short writes and EINTR); errors name `path`
// (and, when the disk is full, how much was being written and how much is free).
void pwrite_fully(int fd, const void* data, size_t n, uint64_t offset, const std::filesystem::path& path);
// Writes `bytes` as the whole file at `path` (created or truncated), with the errors above.
void write_file(const std::filesystem::path& path, std::string_view bytes);

// Blocks SIGINT, SIGTERM and SIGHUP in this thread (call it first in main, before any thread
// starts: they inherit the mask) and starts a thread that waits for them, removes every staging
// directory in use, and then dies of the signal as the default action would (exit 128 + signal).
void remove_staging_on_signals();

// A child process the export waits on (the --aot compile), whose files go into a staging
// directory: a signal that ends the export passes the signal on to it and waits for it to end
// before the staging directory is removed.
void track_child(int pid);
void untrack_child(int pid);

class AtomicOutputDir {
 public:
  AtomicOutputDir(const std::filesystem::path& target, bool overwrite);
  ~AtomicOutputDir();
  AtomicOutputDir(const AtomicOutputDir&) = delete;
  AtomicOutputDir& operator=(const AtomicOutputDir&) = delete;

  const std::filesystem::path& path() const { return staging_; }  // write here
  const std::filesystem::path& target() const { return target_; }
  void commit();
  // `message` with the staging directory named as the target.
  std::string as_target(std::string message) const;

 private:
  std::filesystem::path target_;
  std::filesystem::path staging_;
  bool overwrite_;
  bool committed_ = false;
};

}  // namespace hfx
