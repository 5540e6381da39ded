#include "launch/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/fd.h"

extern char** environ;

namespace strata::launch {

namespace {

std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string_view rest(path ? path : "/usr/bin:/bin");
  while (true) {
    const size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  fail("strata launch: '", name, "' not found on PATH (", path ? path : "", ")");
}

int status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

}  // namespace

std::vector<pid_t> session_members(pid_t sid) {
  std::vector<pid_t> members;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat;
    try {
      stat = io::read_file(entry.path().string() + "/stat");
    } catch (const Error&) {
      continue;  // exited meanwhile
    }
    // "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0, pgrp = 0, session = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d %d %d", &state, &ppid, &pgrp, &session) != 4)
      continue;
    if (session == sid && state != 'Z') members.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return members;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::vector<std::pair<std::string, std::string>>& extra_env) {
  STRATA_CHECK(!argv.empty(), "strata launch: empty command");
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed (the parent may have threads).
  const std::string path = find_on_path(argv[0]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    bool replaced = false;
    for (const auto& [k, v] : extra_env)
      if (entry.size() > k.size() && entry.substr(0, k.size()) == k && entry[k.size()] == '=')
        replaced = true;
    if (!replaced) env_strings.emplace_back(entry);
  }
  for (const auto& [k, v] : extra_env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  int out[2], err[2];
  STRATA_CHECK(::pipe2(out, O_CLOEXEC) == 0, "strata launch: pipe failed: ", std::strerror(errno));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    fail("strata launch: pipe failed: ", std::strerror(errno));
  }
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();

  pid_ = ::fork();
  if (pid_ == 0) {
    ::setsid();
    // If the supervisor dies without stopping the job (SIGKILL, a crash), the launcher gets
    // SIGTERM and tears the job down rather than running on unsupervised. The check after
    // prctl covers a supervisor that died before it took effect. (The signal follows the
    // thread that forked: the supervisor's thread must live as long as the job.)
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    // The supervisor ignores SIGPIPE, and an ignored signal stays ignored across exec.
    ::signal(SIGPIPE, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGHUP, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve(path.c_str(), args.data(), envp.data());
    const char msg[] = "strata launch: exec failed\n";
    [[maybe_unused]] ssize_t n = ::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  const int fork_errno = errno;
  if (devnull >= 0) ::close(devnull);
  ::close(out[1]);
  ::close(err[1]);
  if (pid_ < 0) {
    ::close(out[0]);
    ::close(err[0]);
    fail("strata launch: fork failed: ", std::strerror(fork_errno));
  }
  out_fd_ = out[0];
  err_fd_ = err[0];
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !status_) terminate(0);
  kill_session();
  close_output();
}

void ChildProcess::close_output() {
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
  out_fd_ = err_fd_ = -1;
}

std::optional<int> ChildProcess::poll_exit() {
  if (status_) return status_;
  int ws = 0;
  const pid_t r = ::waitpid(pid_, &ws, WNOHANG);
  if (r == pid_) status_ = status_of(ws);
  return status_;
}

int ChildProcess::terminate(double grace) {
  using clock = std::chrono::steady_clock;
  if (!poll_exit()) {
    ::kill(pid_, SIGTERM);
    const auto deadline = clock::now() + std::chrono::duration<double>(grace);
    while (!poll_exit() && clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill_session();
  if (!status_) {
    int ws = 0;
    if (::waitpid(pid_, &ws, 0) == pid_)
      status_ = status_of(ws);  // SIGKILLed: returns at once
    else
      status_ = 128 + SIGKILL;
  }
  return *status_;
}

void ChildProcess::kill_session() {
  if (pid_ <= 0) return;
  // Repeated because a process may fork while we kill; a few rounds are enough in practice.
  for (int round = 0; round < 5; ++round) {
    const std::vector<pid_t> members = session_members(pid_);
    if (members.empty()) return;
    for (pid_t p : members) ::kill(p, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace strata::launch
