#include "core/python.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "io/output_dir.h"  // the --aot child is ended by the export's signal cleanup

extern char** environ;

namespace hfx {

std::string python_interpreter() {
  if (const char* env = std::getenv("HFEXPORT_PYTHON"); env && *env) return env;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (const char* name : {"python", "python3"}) {
      const auto candidate = self.parent_path() / name;
      if (std::filesystem::is_regular_file(candidate)) return candidate.string();  // a venv's bin/python
    }
  return "python3";
}

int run_capturing(const std::vector<std::string>& args, std::string& output) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The child gets no blocked signals: the export's signal thread blocks SIGINT/SIGTERM/SIGHUP in
  // every thread, and a mask survives exec, so a Ctrl-C would otherwise not reach the child.
  posix_spawnattr_t attrs;
  posix_spawnattr_init(&attrs);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attrs, &none);
  posix_spawnattr_setflags(&attrs, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, argv[0], &actions, &attrs, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attrs);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    return -1;
  }
  track_child(pid);
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    output.append(buf, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      untrack_child(pid);
      return -1;
    }
  untrack_child(pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace hfx
