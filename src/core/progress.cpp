#include "core/progress.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

namespace hfx::progress {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRedrawEvery = std::chrono::milliseconds(200);

struct State {
  std::mutex mutex;
  bool quiet = false;
  std::string stage;
  uint64_t total = 0;
  std::atomic<uint64_t> done{0};
  Clock::time_point started;
  std::atomic<Clock::rep> drawn{0};  // read by writers without the mutex
  bool line_open = false;  // the cursor is at the end of a line we may redraw
};

State& state() {
  static State s;
  return s;
}

// stderr's kind is looked up once: add() runs for every piece every writer thread writes.
bool shown(const State& s) {
  static const bool terminal = ::isatty(STDERR_FILENO) == 1;
  return !s.quiet && terminal;
}

std::string size_text(uint64_t bytes) {
  char buf[32];
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  if (mib >= 1024.0) std::snprintf(buf, sizeof buf, "%.2f GiB", mib / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.1f MiB", mib);
  return buf;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Rewrites the current line; the caller holds the mutex.
void draw(State& s, const std::string& text, bool keep) {
  std::fprintf(stderr, "\r\033[K%s%s", text.c_str(), keep ? "\n" : "");
  std::fflush(stderr);
  s.line_open = !keep && !text.empty();
  s.drawn = Clock::now().time_since_epoch().count();
}

std::string stage_line(const State& s) {
  std::string line = "hfexport: " + s.stage;
  if (s.total > 0) line += "  " + describe(s.done.load(), s.total, seconds_since(s.started));
  return line;
}

void end_locked(State& s) {
  if (shown(s) && !s.stage.empty() && s.total > 0) draw(s, stage_line(s), true);
  s.stage.clear();
  s.total = 0;
  s.done = 0;
}

}  // namespace

std::string describe(uint64_t done, uint64_t total, double seconds) {
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  return size_text(done) + " of " + size_text(total) + ", " + size_text(static_cast<uint64_t>(rate)) + "/s";
}

void set_quiet(bool quiet) { state().quiet = quiet; }

void stage(const std::string& name) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  end_locked(s);
  s.stage = name;
  s.started = Clock::now();
  if (shown(s)) draw(s, stage_line(s), false);
}

void expect(uint64_t bytes) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.total += bytes;
  if (shown(s) && !s.stage.empty()) draw(s, stage_line(s), false);
}

void add(uint64_t bytes) {
  State& s = state();
  s.done += bytes;
  const Clock::rep now = Clock::now().time_since_epoch().count();
  if (!shown(s) || now - s.drawn.load() < Clock::duration(kRedrawEvery).count()) return;
  std::unique_lock lock(s.mutex, std::try_to_lock);  // a busy writer never waits on the terminal
  if (lock.owns_lock()) draw(s, stage_line(s), false);
}

void end() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  end_locked(s);
}

void clear() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (shown(s) && s.line_open) draw(s, "", false);
}

}  // namespace hfx::progress
