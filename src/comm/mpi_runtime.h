// The MPI runtime of a process: start-up with MPI_THREAD_MULTIPLE (the progress engine's thread
// issues and tests requests while the main thread creates communicators), shut-down, and the rank
// environment that launchers export, readable before MPI starts (to name a log file, pick a
// device, or decide whether this is a distributed run at all).
#pragma once
#include <functional>
#include <string_view>

#include "core/enum_names.h"

namespace strata {

// Who started this process: nobody (a plain process), mpirun (or a PMIx launcher) or srun.
enum class Launcher { none, mpirun, srun };
template <>
struct EnumNames<Launcher> {
  static constexpr std::string_view names[] = {"none", "mpirun", "srun"};
};

struct RankEnv {
  int rank = 0;
  int local_rank = 0;  // rank among the processes of this node
  int world_size = 1;  // 0 when the launcher does not say (PMIx alone)
  Launcher launcher = Launcher::none;
};

// Reads Open MPI's OMPI_COMM_WORLD_{RANK,LOCAL_RANK,SIZE}, then SLURM's SLURM_{PROCID,LOCALID,
// NTASKS} (srun), then PMIx's PMIX_RANK; none of them (or an Open MPI singleton, which exports
// PMIX_RANK itself once initialised): a single process (rank 0 of 1, Launcher::none).
// Makes no MPI call. A malformed value is an error naming the variable.
RankEnv detect_rank_env();
// The same over any lookup (tests): getenv_fn(name) returns the value or nullptr.
RankEnv detect_rank_env(const std::function<const char*(const char*)>& getenv_fn);

// Initialises MPI with MPI_THREAD_MULTIPLE (an error if MPI provides less), the bf16/f16 reduction
// ops, and the log's rank prefix. Without a launcher, MPI starts as a singleton (world size 1).
// Idempotent; also accepts an MPI that the caller initialised (with MPI_THREAD_MULTIPLE).
void mpi_init(int* argc = nullptr, char*** argv = nullptr);
// Stops the progress engine, frees the reduction ops and finalises MPI. Idempotent. When
// operations are still in flight (a caller never waited for them) it logs them and skips
// MPI_Finalize, which could wait forever. Not reached after a communication timeout: the process
// then ends with std::_Exit (MPI_Finalize would hang).
void mpi_finalize();
// Ends the whole job now (MPI_Abort) with `status`, after flushing stdout and stderr: for a rank
// that hit an error its peers cannot know about (they would otherwise wait until their timeout,
// and MPI_Finalize on this rank could block on them). Exits directly when MPI is not active.
[[noreturn]] void mpi_abort(int status);
bool mpi_active();  // initialised and not yet finalised
int mpi_world_rank();
int mpi_world_size();

// mpi_init for a scope: `MpiSession mpi(&argc, &argv);` at the top of main.
class MpiSession {
 public:
  MpiSession(int* argc = nullptr, char*** argv = nullptr) { mpi_init(argc, argv); }
  ~MpiSession() { mpi_finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

}  // namespace strata
