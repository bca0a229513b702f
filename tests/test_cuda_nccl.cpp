// comm::NcclComm and select_local_device in one process (singleton MPI_Init, no mpiexec): the
// device-choice messages and NCCL's error strings on the CPU; with a GPU, a 1-rank communicator
// whose all-reduce and broadcast leave the data as it was, whose reduce-scatter and all-gather
// copy it, and which counts 0 bytes (p = 1). Device cases skip (GTEST_SKIP) without a device.
#include <gtest/gtest.h>

#ifdef MPITRON_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <string>
#include <utility>
#include <vector>

#include "base/check.hpp"
#include "base/cuda_check.hpp"
#include "comm/group.hpp"
#include "comm/nccl/nccl_comm.hpp"
#include "tests/cuda_test_support.hpp"
#include "tests/mpi_environment.hpp"

using namespace mpitron;
using comm::Group;
using comm::local_device_error;
using comm::NcclComm;
using cuda_test::DeviceArray;
using cuda_test::Stream;

namespace {

[[maybe_unused]] ::testing::Environment* const mpi_env =
    ::testing::AddGlobalTestEnvironment(new mpitron::testing::MpiEnvironment);

std::vector<float> ramp(size_t n, float start) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = start + 0.25f * static_cast<float>(i);
  return x;
}

// The uploads run on the legacy default stream and may still be in flight when cudaMemcpy returns
// (pageable source), while the tests' stream does not wait for it: finish them first.
void finish_uploads() {
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace

// ---- CPU: no device needed ----

TEST(NcclLocalDevice, ErrorMessages) {
  EXPECT_EQ(local_device_error(1, 1, true), "");
  EXPECT_EQ(local_device_error(4, 4, true), "");
  EXPECT_EQ(local_device_error(2, 8, true), "");
  EXPECT_EQ(local_device_error(4, 1, false), "");  // --comm mpi may share a GPU
  EXPECT_EQ(local_device_error(4, 1, true),
            "--comm nccl needs one GPU per rank: this node runs 4 ranks and has 1 GPU (use --comm "
            "mpi to share a GPU)");
  EXPECT_EQ(local_device_error(3, 2, true),
            "--comm nccl needs one GPU per rank: this node runs 3 ranks and has 2 GPUs (use --comm "
            "mpi to share a GPU)");
  EXPECT_EQ(local_device_error(1, 0, false),
            "--device cuda: no CUDA device (cudaGetDeviceCount: found 0 devices)");
  EXPECT_EQ(local_device_error(2, 0, true, "no CUDA-capable device is detected"),
            "--device cuda: no CUDA device (cudaGetDeviceCount: no CUDA-capable device is "
            "detected)");
}

TEST(NcclCheck, ErrorStringNamesTheCode) {
  for (ncclResult_t r : {ncclUnhandledCudaError, ncclSystemError, ncclInternalError,
                         ncclInvalidArgument, ncclInvalidUsage}) {
    const std::string s = comm::nccl_error_string(r);
    const std::string code = ncclGetErrorString(r);
    ASSERT_FALSE(code.empty());
    EXPECT_EQ(s.substr(0, code.size()), code) << s;
  }
  int version = 0;
  NCCL_CHECK(ncclGetVersion(&version));
  EXPECT_GE(version, NCCL_VERSION_CODE) << "libnccl is older than the nccl.h it was built with";
}

// Runs everywhere: without a device it must refuse with the runtime's reason, not crash.
TEST(NcclLocalDevice, SelectOnOneRank) {
  const std::string why = cuda_test::no_device_reason();
  if (!why.empty()) {
    for (bool exclusive : {true, false}) {
      try {
        comm::select_local_device(MPI_COMM_WORLD, exclusive);
        ADD_FAILURE() << "select_local_device found a device where the test support found none";
      } catch (const UsageError& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("--device cuda: no CUDA device (cudaGetDeviceCount: ", 0), 0u) << msg;
        int count = 0;
        const cudaError_t err = cudaGetDeviceCount(&count);
        if (err != cudaSuccess) {
          EXPECT_NE(msg.find(cudaGetErrorString(err)), std::string::npos) << msg;
        }
      }
    }
    return;  // the refusal is what this machine can show
  }
  EXPECT_EQ(comm::select_local_device(MPI_COMM_WORLD, true), 0);
  EXPECT_EQ(comm::select_local_device(MPI_COMM_WORLD, false), 0);
  int current = -1;
  CUDA_CHECK(cudaGetDevice(&current));
  EXPECT_EQ(current, 0);
}

// ---- device ----

TEST(NcclComm, OneRankCollectivesCopyAndCountNothing) {
  SKIP_WITHOUT_DEVICE();
  ASSERT_EQ(comm::select_local_device(MPI_COMM_WORLD, true), 0);
  Group solo = Group::solo();
  NcclComm nc(solo);
  ASSERT_EQ(nc.size(), 1);
  ASSERT_EQ(nc.rank(), 0);
  Stream stream;
  const size_t n = 100003;
  const std::vector<float> x = ramp(n, -7.5f);
  DeviceArray<float> a(x), b(n);
  finish_uploads();

  nc.allreduce_sum(a.ptr, n, stream.s);
  nc.allreduce_max(a.ptr, n, stream.s);
  nc.broadcast(a.ptr, n, 0, stream.s);
  nc.synchronize(stream.s);
  EXPECT_EQ(a.download(), x);

  CUDA_CHECK(cudaMemsetAsync(b.ptr, 0, n * sizeof(float), stream.s));
  nc.reduce_scatter_sum(a.ptr, b.ptr, n, stream.s);
  stream.sync();
  EXPECT_EQ(b.download(), x);

  CUDA_CHECK(cudaMemsetAsync(b.ptr, 0, n * sizeof(float), stream.s));
  nc.all_gather(a.ptr, b.ptr, n, stream.s);
  stream.sync();
  EXPECT_EQ(b.download(), x);

  // In place, the forms NCCL allows (rank 0's block is the buffer's start).
  nc.reduce_scatter_sum(b.ptr, b.ptr, n, stream.s);
  nc.all_gather(b.ptr, b.ptr, n, stream.s);
  stream.sync();
  EXPECT_EQ(b.download(), x);

  // Empty calls are no-ops, null pointers included.
  nc.allreduce_sum(nullptr, 0, stream.s);
  nc.reduce_scatter_sum(nullptr, nullptr, 0, stream.s);
  nc.all_gather(nullptr, nullptr, 0, stream.s);
  nc.broadcast(nullptr, 0, 0, stream.s);
  nc.synchronize(stream.s);
  nc.check_async_error();
  EXPECT_EQ(nc.bytes_sent, 0u);  // p = 1 sends nothing
  EXPECT_EQ(solo.bytes_sent, 0u);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(NcclComm, WorldGroupAndMoves) {
  SKIP_WITHOUT_DEVICE();
  ASSERT_EQ(comm::select_local_device(MPI_COMM_WORLD, true), 0);
  Group world = Group::world();
  ASSERT_EQ(world.size(), 1);
  NcclComm a(world);
  EXPECT_EQ(world.bytes_sent, 0u);  // the id's broadcast is setup, not counted
  a.bytes_sent = 7;
  NcclComm b(std::move(a));
  EXPECT_EQ(a.size(), 0);  // NOLINT(bugprone-use-after-move): moved-from is null
  EXPECT_EQ(a.handle(), nullptr);
  EXPECT_EQ(b.size(), 1);
  EXPECT_EQ(b.bytes_sent, 7u);
  NcclComm c;
  c = std::move(b);
  EXPECT_EQ(b.handle(), nullptr);  // NOLINT(bugprone-use-after-move)
  ASSERT_NE(c.handle(), nullptr);
  // A second communicator over the same group, then assignment over a live one destroys it.
  NcclComm d(world);
  c = std::move(d);

  Stream stream;
  const std::vector<float> x = ramp(33, 1.0f);
  DeviceArray<float> buf(x);
  finish_uploads();
  c.allreduce_sum(buf.ptr, x.size(), stream.s);
  c.synchronize(stream.s);
  EXPECT_EQ(buf.download(), x);
  EXPECT_EQ(c.bytes_sent, 0u);  // d's counter came with it
}

#else  // built without NCCL

TEST(CudaNccl, NotBuilt) {
  GTEST_SKIP() << "built without NCCL (CMake found no nccl.h / libnccl): comm/nccl is not compiled";
}

#endif
