#include "io/output_dir.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "core/error.h"

namespace hfx {

namespace fs = std::filesystem;

namespace {

// Inside every staging directory: what marks it as hfexport's, and whose (the pid), so that a
// later export removes it only when that process is gone.
constexpr const char* kStagingMarker = ".hfexport-staging";

std::mutex& staging_mutex() {
  static std::mutex m;
  return m;
}

std::set<fs::path>& staging_in_use() {
  static std::set<fs::path> dirs;
  return dirs;
}

std::set<int>& children() {  // guarded by staging_mutex()
  static std::set<int> pids;
  return pids;
}

// Passes `sig` on to every tracked child and waits until each has ended, without reaping it (its
// waiter still collects its status).
void end_children(int sig) {
  for (int pid : children()) {
    if (::kill(pid, sig) != 0) continue;
    siginfo_t info{};
    while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
    }
  }
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// The pid in a name ending "<infix><pid>", or 0.
pid_t pid_after(const std::string& name, const std::string& infix) {
  const auto at = name.rfind(infix);
  if (at == std::string::npos) return 0;
  const char* begin = name.data() + at + infix.size();
  const char* end = name.data() + name.size();
  int pid = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, pid);
  return ec == std::errc() && ptr == end && pid > 0 ? pid : 0;
}

// Staging directories (marked) and replaced outputs (".<name>.old-<pid>") that a process killed
// mid-export left in `parent`: removed, or, for the old output of a target that is gone (killed
// between the two renames of commit), renamed back into place.
void remove_stale_temporaries(const fs::path& parent, const fs::path& target) {
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] != '.') continue;
    if (const pid_t pid = pid_after(name, ".tmp-"); pid && pid != ::getpid() && !process_alive(pid) &&
                                                     fs::exists(it->path() / kStagingMarker)) {
      std::error_code rm;
      fs::remove_all(it->path(), rm);
      continue;
    }
    const std::string old_prefix = "." + target.filename().string() + ".old-";
    if (name.rfind(old_prefix, 0) != 0) continue;
    const pid_t pid = pid_after(name, ".old-");
    if (!pid || pid == ::getpid() || process_alive(pid)) continue;
    std::error_code mv;
    if (!fs::exists(target)) fs::rename(it->path(), target, mv);
    else fs::remove_all(it->path(), mv);
  }
}

}  // namespace

namespace {

// Bytes the filesystem holding `fd` still gives an unprivileged writer (0 if unknown).
uint64_t free_bytes(int fd) {
  struct statvfs fs {};
  return ::fstatvfs(fd, &fs) == 0 ? static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize : 0;
}

std::string mib(uint64_t bytes) {
  return bytes < (1 << 20) ? str(bytes, " bytes") : str(bytes, " bytes (", (bytes + (1 << 19)) >> 20, " MiB)");
}

}  // namespace

void check_room(int fd, uint64_t size, const std::filesystem::path& path) {
  struct stat st {};
  const uint64_t have = ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
  const uint64_t room = free_bytes(fd);
  if (size > have && room && size - have > room)
    fail(path.string(), ": not enough disk space: the file needs ", mib(size), ", the filesystem has ", mib(room),
         " free");
}

void pwrite_fully(int fd, const void* data, size_t n, uint64_t offset, const std::filesystem::path& path) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOSPC || errno == EDQUOT)
        fail(path.string(), ": write failed: ", std::strerror(errno), " (writing ", mib(n), " at offset ", offset,
             "; ", mib(free_bytes(fd)), " free)");
      fail(path.string(), ": write failed: ", std::strerror(errno));
    }
    p += w, n -= static_cast<size_t>(w), offset += static_cast<uint64_t>(w);
  }
}

void write_file(const fs::path& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path.string(), ": cannot create: ", std::strerror(errno));
  try {
    check_room(fd, bytes.size(), path);
    pwrite_fully(fd, bytes.data(), bytes.size(), 0, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) fail(path.string(), ": cannot write: ", std::strerror(errno));
}

void remove_staging_on_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, s);
  if (pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) return;
  std::thread([signals] {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) return;
    // The lock is held until the process is gone: a thread that waited on a child this signal
    // ended must not get to report the child's death as its own error (untrack_child blocks).
    const std::lock_guard<std::mutex> lock(staging_mutex());
    end_children(sig);
    for (const fs::path& dir : staging_in_use()) {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
    // Die of the signal, as if it had never been caught.
    ::signal(sig, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
    ::raise(sig);
  }).detach();
}

void track_child(int pid) {
  const std::lock_guard<std::mutex> lock(staging_mutex());
  children().insert(pid);
}

void untrack_child(int pid) {
  const std::lock_guard<std::mutex> lock(staging_mutex());
  children().erase(pid);
}

AtomicOutputDir::AtomicOutputDir(const fs::path& target, bool overwrite)
    : target_(fs::absolute(target).lexically_normal()), overwrite_(overwrite) {
  if (target_.filename().empty()) target_ = target_.parent_path();
  std::error_code ec;
  const fs::file_status status = fs::status(target_, ec);
  if (ec && status.type() != fs::file_type::not_found) fail(target.string(), ": ", ec.message());
  if (fs::exists(status) && !overwrite)
    fail(target.string(), ": output directory already exists (pass --overwrite to replace it)");
  if (fs::exists(status) && !fs::is_directory(status)) fail(target.string(), ": exists and is not a directory");
  const fs::path parent = target_.parent_path();
  fs::create_directories(parent, ec);
  if (ec) fail(target.string(), ": cannot create parent directory: ", ec.message());
  remove_stale_temporaries(parent, target_);
  staging_ = parent / ("." + target_.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(staging_, ec);
  {
    const std::lock_guard<std::mutex> lock(staging_mutex());
    if (!fs::create_directory(staging_, ec) || ec)
      fail(target.string(), ": cannot create output directory: ",
           ec ? ec.message() : std::string("permission denied"));
    staging_in_use().insert(staging_);
  }
  std::ofstream(staging_ / kStagingMarker) << ::getpid() << "\n";
}

AtomicOutputDir::~AtomicOutputDir() {
  const std::lock_guard<std::mutex> lock(staging_mutex());
  staging_in_use().erase(staging_);
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
}

std::string AtomicOutputDir::as_target(std::string message) const {
  const std::string from = staging_.string(), to = target_.string();
  for (size_t at = message.find(from); at != std::string::npos; at = message.find(from, at + to.size()))
    message.replace(at, from.size(), to);
  return message;
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
  fs::remove(staging_ / kStagingMarker, ec);
  {
    const std::lock_guard<std::mutex> lock(staging_mutex());
    fs::rename(staging_, target_, ec);
    if (!ec) {
      committed_ = true;
      staging_in_use().erase(staging_);
    }
  }
  if (ec) {
    if (!old.empty()) fs::rename(old, target_, ec);
    fail(target_.string(), ": cannot move output into place: ", ec.message());
  }
  if (!old.empty()) fs::remove_all(old, ec);
}

}  // namespace hfx
