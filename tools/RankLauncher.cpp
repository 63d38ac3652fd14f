#include "tools/RankLauncher.h"

#include "runtime/Distributed.h"
#include "runtime/Error.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

namespace tlc {
namespace {

// One rank's child process and the pipes its output comes back on.
struct Rank {
  pid_t pid = -1;
  int out = -1, err = -1;       // read ends; -1 once closed
  std::string outLine, errLine; // what came after the last newline
  bool running = true;
  bool killed = false;          // by the launcher, after a failure's grace
};

// Writes each whole line of `pending` to `stream` with the rank's prefix; keeps the rest.
void forwardLines(std::string &pending, int rank, FILE *stream, bool flushAll) {
  size_t start = 0;
  for (size_t newline; (newline = pending.find('\n', start)) != std::string::npos; start = newline + 1)
    fmt::print(stream, "[rank {}] {}\n", rank, std::string_view(pending).substr(start, newline - start));
  pending.erase(0, start);
  if (flushAll && !pending.empty()) {
    fmt::print(stream, "[rank {}] {}\n", rank, pending);
    pending.clear();
  }
  std::fflush(stream);
}

// Reads what a pipe holds; closes it at its end.
void drain(int &fd, std::string &pending, int rank, FILE *stream) {
  char buffer[65536];
  ssize_t n = ::read(fd, buffer, sizeof buffer);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    ::close(fd);
    fd = -1;
    forwardLines(pending, rank, stream, true);
    return;
  }
  pending.append(buffer, size_t(n));
  forwardLines(pending, rank, stream, false);
}

std::string describeExit(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

pid_t startRank(const std::vector<std::string> &arguments, int rank, int ranks, const std::string &host, int port,
                int out[2], int err[2]) {
  std::vector<std::string> variables = {
      fmt::format("RANK={}", rank),       fmt::format("WORLD_SIZE={}", ranks), fmt::format("LOCAL_RANK={}", rank),
      fmt::format("LOCAL_WORLD_SIZE={}", ranks), "MASTER_ADDR=" + host,     fmt::format("MASTER_PORT={}", port)};
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw Error(fmt::format("tlc train --nproc: cannot start rank {}: {}", rank, std::strerror(errno)));
  if (pid > 0) return pid;
  // The child: it dies with the launcher, writes into the pipes, and becomes tlc again.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);
  ::dup2(out[1], STDOUT_FILENO);
  ::dup2(err[1], STDERR_FILENO);
  for (const std::string &variable : variables) ::putenv(const_cast<char *>(variable.c_str()));
  std::vector<char *> argv = {const_cast<char *>("tlc")};
  for (const std::string &argument : arguments) argv.push_back(const_cast<char *>(argument.c_str()));
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  fmt::print(stderr, "tlc train --nproc: cannot run /proc/self/exe: {}\n", std::strerror(errno));
  ::_exit(127);
}

} // namespace

std::vector<std::string> withoutNproc(int argc, char **argv) {
  std::vector<std::string> kept;
  for (int i = 1; i < argc; ++i) {
    std::string_view argument = argv[i];
    std::string_view name = argument.substr(0, argument.find('='));
    if (name == "--nproc" || name == "-nproc") {
      if (argument.find('=') == std::string_view::npos) ++i;  // its value is the next argument
      continue;
    }
    kept.emplace_back(argument);
  }
  return kept;
}

int launchRanks(const std::vector<std::string> &arguments, int ranks, std::chrono::seconds grace) {
  const char *givenHost = std::getenv("MASTER_ADDR");
  std::string host = givenHost && *givenHost ? givenHost : "127.0.0.1";
  std::optional<int> givenPort = integerVariable(processEnvironment(), "MASTER_PORT", 1, 65535);
  int port = givenPort ? *givenPort : unusedPort();
  std::vector<Rank> children(static_cast<size_t>(ranks));
  std::string pids;
  for (int r = 0; r < ranks; ++r) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw Error(fmt::format("tlc train --nproc: no pipe for rank {}: {}", r, std::strerror(errno)));
    // The child's ends survive its exec: dup2 clears close-on-exec on the copies.
    children[size_t(r)].pid = startRank(arguments, r, ranks, host, port, out, err);
    ::close(out[1]);
    ::close(err[1]);
    children[size_t(r)].out = out[0];
    children[size_t(r)].err = err[0];
    pids += fmt::format("{}{}", r ? ", " : "", children[size_t(r)].pid);
  }
  fmt::print(stderr, "tlc train: started {} ranks on this machine (pids {}), meeting at {}:{}\n", ranks, pids, host,
             port);

  int failures = 0;
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> killAt;  // set by the first failure
  size_t running = children.size();
  while (running > 0 || std::any_of(children.begin(), children.end(), [](const Rank &c) { return c.out >= 0 || c.err >= 0; })) {
    std::vector<pollfd> polled;
    std::vector<std::pair<size_t, bool>> owners;  // (rank, is stdout)
    for (size_t r = 0; r < children.size(); ++r) {
      if (children[r].out >= 0) polled.push_back({children[r].out, POLLIN, 0}), owners.push_back({r, true});
      if (children[r].err >= 0) polled.push_back({children[r].err, POLLIN, 0}), owners.push_back({r, false});
    }
    if (!polled.empty() && ::poll(polled.data(), polled.size(), 100) > 0)
      for (size_t i = 0; i < polled.size(); ++i) {
        if (!polled[i].revents) continue;
        Rank &child = children[owners[i].first];
        if (owners[i].second) drain(child.out, child.outLine, int(owners[i].first), stdout);
        else drain(child.err, child.errLine, int(owners[i].first), stderr);
      }
    if (polled.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // The ranks that failed since the last pass, one killed by a signal first (the others'
    // errors are mostly that they lost it), saying the rest will stop while some still run.
    std::vector<std::pair<size_t, int>> failed;  // (rank, wait status)
    for (size_t r = 0; r < children.size(); ++r) {
      Rank &child = children[r];
      int status = 0;
      if (!child.running || ::waitpid(child.pid, &status, WNOHANG) != child.pid) continue;
      child.running = false;
      --running;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed.push_back({r, status});
    }
    std::stable_partition(failed.begin(), failed.end(), [](const auto &rank) { return WIFSIGNALED(rank.second); });
    for (auto [r, status] : failed) {
      ++failures;
      fmt::print(stderr, "tlc train: rank {} (pid {}) {}{}\n", r, children[r].pid, describeExit(status),
                 !killAt && running > 0 ? fmt::format("; the other ranks stop within {} s", grace.count()) : "");
      if (!killAt) killAt = Clock::now() + grace;
    }
    if (killAt && Clock::now() > *killAt)
      for (size_t r = 0; r < children.size(); ++r)
        if (children[r].running && !children[r].killed) {
          children[r].killed = true;
          fmt::print(stderr, "tlc train: rank {} (pid {}) still runs {} s after the failure: killing it\n", r,
                     children[r].pid, grace.count());
          ::kill(children[r].pid, SIGKILL);
        }
  }
  return failures ? 1 : 0;
}

} // namespace tlc
