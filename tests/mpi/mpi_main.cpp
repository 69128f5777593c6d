// Catch2 runner for tests that run under mpirun: MPI with MPI_THREAD_MULTIPLE around the session;
// every rank runs every test case, and a failure on any rank fails the job.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>
#include <spdlog/spdlog.h>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  spdlog::set_level(rank == 0 ? spdlog::level::info : spdlog::level::warn);
  const int failed = Catch::Session().run(argc, argv);
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed != 0 ? 1 : 0;
}
