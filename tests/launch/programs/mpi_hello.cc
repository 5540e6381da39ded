// The smallest MPI job: every rank prints and records (in OUT_DIR/hello_rank_R.txt) its MPI rank
// and world size and what the launcher told it (SLURM_PROCID, PMIX_RANK), so that the SLURM test
// can check that `strata launch` inside an allocation started one MPI world of the right size;
// and in OUT_DIR/host_rank_R.txt the host it ran on (the multi-host test's placement check).
//
//   mpi_hello OUT_DIR
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* procid = std::getenv("SLURM_PROCID");
  const char* pmix = std::getenv("PMIX_RANK");
  const std::string line = "mpi_hello rank " + std::to_string(rank) + " size " +
                           std::to_string(size) + " slurm_procid " + (procid ? procid : "-") +
                           " pmix_rank " + (pmix ? pmix : "-");
  std::printf("%s\n", line.c_str());
  if (argc > 1) {
    std::ofstream(std::string(argv[1]) + "/hello_rank_" + std::to_string(rank) + ".txt")
        << line << "\n";
    char host[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    MPI_Get_processor_name(host, &length);
    std::ofstream(std::string(argv[1]) + "/host_rank_" + std::to_string(rank) + ".txt")
        << host << "\n";
  }
  MPI_Barrier(MPI_COMM_WORLD);  // a world that is not one would hang here, not pass
  MPI_Finalize();
  return 0;
}
