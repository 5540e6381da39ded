#include "launch/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <thread>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/fd.h"
#include "launch/child_process.h"
#include "launch/command.h"
#include "launch/failure.h"
#include "launch/heartbeat.h"
#include "launch/hostfile.h"
#include "launch/output_tee.h"
#include "launch/watchdog.h"

namespace strata::launch {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The signal that asked the supervisor to stop (0: none). Set by the handler, read by the loop.
volatile sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) {
  g_stop_signal = sig;
}

// Installs the stop handlers for the supervisor's lifetime and restores the previous ones. The
// child runs in its own session, so a terminal's Ctrl-C reaches only us: we must pass it on.
// Without SA_RESTART, so that a signal wakes the poll at once.
class SignalGuard {
 public:
  SignalGuard() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
    // A closed console must not kill the supervisor while it still has a job to stop.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old_pipe_);
  }
  ~SignalGuard() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_{};
  struct sigaction old_pipe_ {};
};

// The supervisor's own lines: to stderr, and timestamped into launch.log.
class Reporter {
 public:
  explicit Reporter(const std::string& run_dir) {
    if (run_dir.empty()) return;
    io::make_dirs(run_dir);
    const std::string path = run_dir + "/launch.log";
    log_ = io::UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666));
    STRATA_CHECK(log_.valid(), "strata launch: cannot open '", path,
                 "' for appending: ", io::errno_text(errno));
  }
  int log_fd() const { return log_.get(); }

  void say(const std::string& text) {
    const std::string line = "strata launch: " + text + "\n";
    (void)io::write_all(2, line.data(), line.size());
    if (!log_.valid()) return;
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ ", std::gmtime(&now));
    const std::string stamped = stamp + line;
    (void)io::write_all(log_.get(), stamped.data(), stamped.size());
  }

 private:
  io::UniqueFd log_;
};

struct AttemptResult {
  int failed_rank = -1;  // the rank the launcher named, when it named one
  // The host the job lost, when the output names one; `unreachable`: its daemon could not even
  // be started (the host is down, not a rank on it).
  std::string failed_host;
  bool unreachable = false;
  bool ok = false;
  bool interrupted = false;
  int exit_status = 0;
  std::string what;  // the failure, in words
};

// Copies what is left in the pipes, for at most `seconds` (a straggler may hold them open).
void drain(OutputTee& tee, double seconds) {
  const Clock::time_point start = Clock::now();
  while (seconds_since(start) < seconds && tee.pump(50)) {
  }
}

std::vector<std::optional<Heartbeat>> read_heartbeats(const std::string& run_dir, int ranks) {
  std::vector<std::optional<Heartbeat>> beats(ranks);
  for (int r = 0; r < ranks; ++r) beats[r] = read_heartbeat(run_dir, r);
  return beats;
}

AttemptResult run_attempt(const LaunchOptions& options, const std::vector<std::string>& argv,
                          int attempt, Reporter& reporter) {
  if (!options.run_dir.empty()) clear_heartbeats(options.run_dir);
  ChildProcess child(argv, {{"STRATA_LAUNCH_ATTEMPT", std::to_string(attempt)}});
  OutputTee tee(reporter.log_fd());
  tee.add(child.stdout_fd(), 1);
  tee.add(child.stderr_fd(), 2);
  WatchdogConfig wc;
  wc.ranks = options.ranks;
  wc.heartbeat_timeout = options.run_dir.empty() ? 0 : options.heartbeat_timeout;
  wc.startup_timeout = options.startup_timeout;
  Watchdog watchdog(wc);
  const std::string launcher = argv.front();

  const Clock::time_point start = Clock::now();
  double next_check = 1.0;
  AttemptResult result;
  while (true) {
    tee.pump(200);
    if (g_stop_signal != 0) {
      const int sig = g_stop_signal;
      reporter.say(cat("received signal ", sig, " (", ::strsignal(sig), "); stopping the job"));
      child.terminate(options.kill_grace);
      drain(tee, 1.0);
      result.interrupted = true;
      result.exit_status = 128 + sig;
      result.what = cat("interrupted by signal ", sig);
      return result;
    }
    if (const std::optional<int> status = child.poll_exit()) {
      // The launcher waits for its local ranks; anything left in its session is a straggler.
      child.kill_session();
      drain(tee, 2.0);
      if (*status == 0) {
        result.ok = true;
        return result;
      }
      const std::optional<RankFailure> failure = parse_failure(tee.report());
      if (const std::optional<std::string> down = parse_unreachable_host(tee.report())) {
        result.what =
            cat(launcher, " exited with status ", *status, ": it could not start on host ", *down,
                " (the host is down or unreachable)");
        result.failed_host = *down;
        result.unreachable = true;
        result.exit_status = *status;
      } else if (failure) {
        result.what = failure->describe();
        result.failed_rank = failure->rank;
        result.exit_status =
            failure->exit_code > 0 || failure->signal > 0 ? failure->exit_status() : *status;
      } else if (const std::optional<std::string> host = parse_lost_host(tee.report())) {
        // No rank failed on its own: their peers on one host went away all at once.
        result.what =
            cat(launcher, " exited with status ", *status, ": the ranks lost their peers on host ",
                *host, " (every process there stopped, or its network link is down)");
        result.failed_host = *host;
        result.exit_status = *status;
      } else {
        result.what =
            cat(launcher, " exited with status ", *status, " without naming a failed rank");
        result.exit_status = *status;
      }
      return result;
    }
    const double elapsed = seconds_since(start);
    if (elapsed >= next_check) {
      next_check = elapsed + 1.0;
      if (wc.heartbeat_timeout > 0) {
        if (auto silence =
                watchdog.check(elapsed, read_heartbeats(options.run_dir, options.ranks))) {
          result.what = "hung: " + silence->message;
          result.exit_status = kHungExitStatus;
          // Reported once, by the caller, when the job is gone (at most kill_grace from now).
          child.terminate(options.kill_grace);
          drain(tee, 1.0);
          return result;
        }
      }
    }
  }
}

// Sleeps, but wakes for a stop signal.
void pause_for(double seconds) {
  const Clock::time_point start = Clock::now();
  while (seconds_since(start) < seconds && g_stop_signal == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// An elastic restart without a host that is down: the hostfile without it (written into the run
// directory, or beside the hostfile), the ranks its other hosts hold, and the layout `shrink`
// plans for them. False, said why, when that cannot be done.
bool drop_host(LaunchOptions& current, LaunchEnv& env, const std::string& host,
               Reporter& reporter) {
  std::vector<HostfileEntry> removed;
  const std::string rest = hostfile_without(io::read_file(current.hostfile), host, removed);
  const std::vector<HostfileEntry> left = parse_hostfile(rest);
  if (removed.empty() || left.empty()) {
    reporter.say(cat("elastic: cannot go on without host ", host, ": ",
                     removed.empty() ? "the hostfile " + current.hostfile + " does not name it"
                                     : std::string("it is the last host")));
    return false;
  }
  int capacity = 0;  // a host without slots= takes as many ranks as it has cores (Open MPI)
  for (const HostfileEntry& e : left) capacity += e.slots > 0 ? e.slots : env.cores;
  const int available = std::min(current.ranks, capacity);
  const std::optional<ElasticPlan> plan = current.shrink(available);
  if (!plan) {
    reporter.say(cat("elastic: no layout fits the ", available, " ranks of the ", left.size(),
                     " host(s) left without ", host));
    return false;
  }
  const std::string path = current.run_dir.empty() ? current.hostfile + ".elastic"
                                                   : current.run_dir + "/hostfile.elastic";
  io::write_file_atomic(path, rest);
  reporter.say(cat("elastic: host ", host, " cannot be brought back; restarting on ", plan->ranks,
                   " ranks of the ", left.size(), " host(s) left (", path, ") with ",
                   plan->description));
  current.hostfile = path;
  current.ranks = plan->ranks;
  current.args.insert(current.args.end(), plan->extra_args.begin(), plan->extra_args.end());
  env.hosts = static_cast<int>(left.size());
  return true;
}

}  // namespace

LaunchReport supervise_job(const LaunchOptions& options) {
  STRATA_CHECK(options.max_restarts >= 0, "strata launch: --max-restarts must be >= 0");
  LaunchEnv env = detect_launch_env(options);
  // Every attempt tells its ranks its number (the variable must be forwarded by name).
  env.vars.emplace_back("STRATA_LAUNCH_ATTEMPT", "1");
  std::sort(env.vars.begin(), env.vars.end());
  LaunchOptions current = options;  // an elastic restart changes the ranks and the arguments
  std::vector<std::string> argv = build_command(current, env);
  LaunchReport report;
  if (options.dry_run) {
    std::printf("%s\n", format_command(argv).c_str());
    std::fflush(stdout);
    return report;
  }

  Reporter reporter(options.run_dir);
  if (env.in_slurm && !options.hostfile.empty())
    reporter.say("--hostfile is ignored inside a SLURM allocation: srun places the ranks");
  SignalGuard signals;
  const int attempts = options.max_restarts + 1;
  std::string previous;
  int last_failed_rank = -1;
  std::string last_failed_host;
  int unreachable_streak = 0;  // attempts in a row that could not start on a host
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    report.attempts = attempt;
    if (attempt == 1)
      reporter.say(cat("starting ", current.ranks, " rank", current.ranks == 1 ? "" : "s",
                       " (job attempt 1 of ", attempts, "): ", format_command(argv)));
    else
      reporter.say(cat("restarting the job (job attempt ", attempt, " of ", attempts,
                       ") after: ", previous));
    const Clock::time_point start = Clock::now();
    const AttemptResult result = run_attempt(current, argv, attempt, reporter);
    if (result.ok) {
      char took[32];
      std::snprintf(took, sizeof took, "%.1f s", seconds_since(start));
      reporter.say(cat("job finished (job attempt ", attempt, " of ", attempts, ", ", took, ")"));
      report.exit_status = 0;
      return report;
    }
    report.exit_status = result.exit_status;
    if (result.interrupted) {
      report.interrupted = true;
      reporter.say(cat("job stopped: ", result.what));
      return report;
    }
    std::string line = cat(result.what, " (job attempt ", attempt, " of ", attempts, ")");
    report.failures.push_back(line);
    // A host that is down may come back (a reboot, a cable): without --elastic, each restart in
    // a row that finds it down waits twice as long as the one before (up to 60 s), so that the
    // restarts outlast a short outage instead of being spent in seconds.
    unreachable_streak = result.unreachable ? unreachable_streak + 1 : 0;
    const double delay_s =
        unreachable_streak > 0 && !current.elastic
            ? std::min(60.0, options.restart_delay * double(1 << std::min(unreachable_streak, 6)))
            : options.restart_delay;
    if (attempt < attempts) {
      char delay[32];
      std::snprintf(delay, sizeof delay, "%g s", delay_s);
      line +=
          cat(unreachable_streak > 0 && !current.elastic
                  ? cat("; waiting for host ", result.failed_host, " to come back: restarting in ")
                  : std::string("; restarting in "),
              delay);
    } else if (attempts > 1) {
      line += "; no restarts left";
    }
    reporter.say(line);
    previous = result.what;
    // A host that is down (its daemon cannot start), or lost again right after a restart, cannot
    // be brought back: go on on the other hosts.
    if (current.elastic && current.shrink && !current.hostfile.empty() &&
        !result.failed_host.empty() &&
        (result.unreachable || result.failed_host == last_failed_host) && attempt < attempts) {
      if (drop_host(current, env, result.failed_host, reporter)) {
        argv = build_command(current, env);
        previous += cat("; now on ", current.ranks, " ranks: ", format_command(argv));
      }
      last_failed_rank = -1;
      last_failed_host.clear();
    } else if (current.elastic && current.shrink && result.failed_rank >= 0 &&
               result.failed_rank == last_failed_rank && attempt < attempts) {
      if (const std::optional<ElasticPlan> plan = current.shrink(current.ranks - 1)) {
        reporter.say(cat("elastic: rank ", result.failed_rank,
                         " failed again after a restart; restarting on ", plan->ranks, " of the ",
                         current.ranks - 1, " remaining ranks with ", plan->description));
        current.ranks = plan->ranks;
        current.args.insert(current.args.end(), plan->extra_args.begin(), plan->extra_args.end());
        argv = build_command(current, env);
        previous += cat("; now on ", plan->ranks, " ranks: ", format_command(argv));
        last_failed_rank = -1;
      } else {
        reporter.say(cat("elastic: no layout fits the ", current.ranks - 1, " remaining ranks"));
      }
    } else {
      last_failed_rank = result.failed_rank;
      last_failed_host = result.failed_host;
    }
    if (attempt == attempts) break;
    pause_for(delay_s);
    if (g_stop_signal != 0) {
      report.interrupted = true;
      report.exit_status = 128 + g_stop_signal;
      reporter.say(
          cat("stopped by signal ", static_cast<int>(g_stop_signal), " before restarting"));
      return report;
    }
  }
  return report;
}

int supervise(const LaunchOptions& options) {
  return supervise_job(options).exit_status;
}

}  // namespace strata::launch
