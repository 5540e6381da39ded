#include "comm/mpi_runtime.h"

#include <mpi.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "comm/mpi_types.h"
#include "comm/nbc_tuning.h"
#include "comm/progress_engine.h"
#include "core/error.h"
#include "core/log.h"

namespace strata {

namespace {

bool g_we_initialised = false;
bool g_finalize_skipped = false;  // operations were left in flight: never call MPI_Finalize

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

// A non-negative decimal integer, or an error naming the variable.
int parse_env_int(const char* name, const char* value) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  STRATA_CHECK(end != value && *end == '\0' && errno == 0 && v >= 0 && v <= 1 << 30,
               "launcher environment: ", name, "='", value, "' is not a non-negative integer");
  return static_cast<int>(v);
}

}  // namespace

RankEnv detect_rank_env(const std::function<const char*(const char*)>& getenv_fn) {
  auto get = [&](const char* name, int fallback) {
    const char* v = getenv_fn(name);
    return v ? parse_env_int(name, v) : fallback;
  };
  RankEnv env;
  const char* ess = getenv_fn("OMPI_MCA_ess");
  if (ess && std::string(ess) == "singleton") {
    // Open MPI started as a singleton (no launcher) exports PMIX_RANK=0 into its own environment.
    return env;
  }
  if (getenv_fn("OMPI_COMM_WORLD_RANK")) {
    env.launcher = Launcher::mpirun;
    env.rank = get("OMPI_COMM_WORLD_RANK", 0);
    env.local_rank = get("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    env.world_size = get("OMPI_COMM_WORLD_SIZE", 0);
  } else if (getenv_fn("SLURM_PROCID")) {
    env.launcher = Launcher::srun;
    env.rank = get("SLURM_PROCID", 0);
    env.local_rank = get("SLURM_LOCALID", 0);
    env.world_size = get("SLURM_NTASKS", get("SLURM_NPROCS", 0));
  } else if (getenv_fn("PMIX_RANK")) {
    // A PMIx launcher (prterun, mpirun of Open MPI 5) exports the rank but not the size.
    env.launcher = Launcher::mpirun;
    env.rank = get("PMIX_RANK", 0);
    env.local_rank = 0;
    env.world_size = 0;
  }
  STRATA_CHECK(env.world_size == 0 || env.rank < env.world_size, "launcher environment (",
               env.launcher, "): rank ", env.rank, " is not below the world size ", env.world_size);
  return env;
}

RankEnv detect_rank_env() {
  return detect_rank_env(
      [](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

void mpi_init(int* argc, char*** argv) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  STRATA_CHECK(!finalised, "mpi_init: MPI was already finalised in this process");
  int provided = MPI_THREAD_SINGLE;
  if (initialised) {
    MPI_Query_thread(&provided);
  } else {
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    STRATA_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed: ", comm::mpi_error_string(rc));
    g_we_initialised = true;
  }
  STRATA_CHECK(provided >= MPI_THREAD_MULTIPLE, "MPI provides only ", thread_level_name(provided),
               ", but strata's communication thread needs MPI_THREAD_MULTIPLE; use an MPI built "
               "with thread support (Open MPI >= 3 has it: `ompi_info | grep -i thread`)",
               initialised ? " and initialise it with MPI_Init_thread(MPI_THREAD_MULTIPLE)" : "");
  comm::create_mpi_types();
  comm::init_nbc_tuning();
  if (mpi_world_size() > 1) log::set_rank(mpi_world_rank());
}

void mpi_finalize() {
  if (!mpi_active() || g_finalize_skipped) return;
  const int abandoned = comm::ProgressEngine::shutdown();
  if (abandoned > 0) {
    // MPI_Finalize could wait forever on them; ending without it makes mpirun report this rank.
    log::error("mpi_finalize: ", abandoned,
               " communication operation(s) never completed; not calling MPI_Finalize");
    g_finalize_skipped = true;
    return;
  }
  comm::free_mpi_types();
  comm::free_nbc_tuning();
  if (g_we_initialised) MPI_Finalize();
}

void mpi_abort(int status) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_active()) MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);
}

bool mpi_active() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

int mpi_world_rank() {
  int rank = 0;
  if (mpi_active()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mpi_world_size() {
  int size = 1;
  if (mpi_active()) MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

}  // namespace strata
