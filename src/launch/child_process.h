// The launcher process (mpirun or srun) as the supervisor's child: started in a session of its
// own with its output piped back, and ended with everything it started on this host.
//
// A session, not a process group: mpirun puts every rank in a process group of its own, so
// killing the launcher's group would leave the ranks running; they all stay in its session.
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata::launch {

class ChildProcess {
 public:
  // Starts argv[0] (searched on PATH) with `extra_env` added to this process's environment,
  // stdin from /dev/null, stdout and stderr piped. Throws strata::Error when it cannot start.
  ChildProcess(const std::vector<std::string>& argv,
               const std::vector<std::pair<std::string, std::string>>& extra_env);
  ~ChildProcess();  // kills whatever is left of the session and reaps the child
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  int stdout_fd() const { return out_fd_; }
  int stderr_fd() const { return err_fd_; }
  void close_output();  // closes the pipes once they are drained

  // The exit status once the child has exited (reaped here): its code, or 128 + signal.
  std::optional<int> poll_exit();

  // SIGTERM to the child, which forwards it to the ranks (mpirun, srun) and tears the job down;
  // after `grace` seconds, SIGKILL to every process left in the session. Returns the status.
  int terminate(double grace);

  // SIGKILL to every process of the session still alive (stragglers after the child exited).
  void kill_session();

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::optional<int> status_;
};

// Processes whose session is `sid` (read from /proc).
std::vector<pid_t> session_members(pid_t sid);

}  // namespace strata::launch
