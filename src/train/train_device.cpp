// The trainer's device side (train_device.hpp): names, checks, NCCL's stream and events, and the
// host copies of another device's state for files.
#include "src/train/train_device.hpp"

#include <fmt/format.h>

#include "base/check.hpp"
#include "base/staged_memory.hpp"
#include "comm/world.hpp"
#include "src/train/trainer.hpp"

#ifdef MPITRON_HAVE_CUDA
#include "src/cuda/device_memory.cuh"
#endif
#ifdef MPITRON_HAVE_NCCL
#include "base/cuda_check.hpp"
#endif

namespace mpitron {

CommKind parse_comm(const std::string& name) {
  if (name == "mpi") return CommKind::mpi;
  if (name == "nccl") return CommKind::nccl;
  throw UsageError(fmt::format("--comm {}: not a communication library (mpi or nccl)", name));
}

const char* comm_name(CommKind c) {
  return c == CommKind::nccl ? "nccl" : "mpi";
}

void check_device(Device device, CommKind comm_kind, DType precision, const ModelFamily& family,
                  const Layout& L) {
  const char* dev = device_name(device);
  if (precision != DType::f32 && !family.mixed_precision)
    throw UsageError(fmt::format("--precision {} trains the {} so far; the {} family runs in fp32",
                                 precision_name(precision),
                                 family_types_with(&ModelFamily::mixed_precision), family.type));
  if (comm_kind == CommKind::nccl) {
    if (device != Device::cuda)
      throw UsageError(
          fmt::format("--comm nccl sums a GPU's gradients: it needs --device cuda "
                      "(got --device {})",
                      dev));
#ifndef MPITRON_HAVE_NCCL
    throw UsageError("--comm nccl: this build has no NCCL (use --comm mpi)");
#endif
    if (L.zero > 1 || L.dp_reduce != comm::DpReduce::allreduce)
      throw UsageError(fmt::format(
          "--comm nccl reduces with NCCL's allreduce at ZeRO 0 or 1 (got --zero {} --dp-reduce "
          "{}): use --comm mpi for the others",
          L.zero, comm::dp_reduce_name(L.dp_reduce)));
  }
  if (device == Device::cpu) return;
  step_backend(device);  // UsageError where this build has no CUDA backend
  if (!family.on_device)
    throw UsageError(fmt::format("--device {} trains the {} so far; the {} family runs on the cpu",
                                 dev, family_types_with(&ModelFamily::on_device), family.type));
  if (device != Device::cuda) return;
#ifdef MPITRON_HAVE_CUDA
  MPI_Comm node = MPI_COMM_NULL;
  int local_rank = 0;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local_rank));
  MPI_CHECK(MPI_Comm_free(&node));
  std::string error;
  try {
#ifdef MPITRON_HAVE_NCCL
    // NCCL refuses two ranks on one GPU: one each, or a clear line on every rank.
    if (comm_kind == CommKind::nccl) {
      comm::select_local_device(MPI_COMM_WORLD, true);
      return;
    }
#endif
    cuda::select_device(local_rank);
  } catch (const UsageError& e) {
    error = e.what();
  }
  comm::throw_first_error(error, MPI_COMM_WORLD);  // a node without a GPU may be any rank's
#endif
}

#ifdef MPITRON_HAVE_NCCL
void NcclDp::open(comm::Group& dp, bool on_compute_stream) {
  comm = comm::NcclComm(dp);
  if (on_compute_stream) {
    stream = cudaStreamPerThread;
    return;
  }
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&queued, cudaEventDisableTiming));
}

void NcclDp::after_compute() const {
  if (stream == cudaStreamPerThread) return;  // in order already
  CUDA_CHECK(cudaEventRecord(queued, cudaStreamPerThread));
  CUDA_CHECK(cudaStreamWaitEvent(stream, queued, 0));
}

NcclDp::~NcclDp() {
  comm = comm::NcclComm();
  if (queued) cudaEventDestroy(queued);
  if (stream && stream != cudaStreamPerThread) cudaStreamDestroy(stream);
}
#endif

namespace {
DeviceAllocator device_memory(Device device) {
#ifdef MPITRON_HAVE_CUDA
  if (device == Device::cuda) return cuda::device_allocator();
#endif
  DeviceAllocator a{device_name(device)};
  if (device == Device::cpu_staged) {  // addresses the host cannot use (base/staged_memory.hpp)
    a.raw_allocate = staged_memory::allocate;
    a.raw_release = staged_memory::release;
  }
  return a;
}
}  // namespace

TrainDevice::TrainDevice(Device d, CommKind c)
    : device(d),
      comm(c),
      ops(step_backend(d)),
      layers(layer_ops<float>(d)),
      on_host(d == Device::cpu),
      alloc(device_memory(d)),
      staging(d),
      pinned_alloc(staging.pinned_allocator()) {}

const DeviceCollectives* TrainDevice::open_dp_collectives([[maybe_unused]] comm::Group& dp) {
#ifdef MPITRON_HAVE_NCCL
  if (comm == CommKind::nccl) {
    // Beside a TP communicator (opened first), whose all-reduces run inside backward on the
    // compute stream, the dp buckets run there too: two communicators' kernels at once on one
    // GPU may deadlock when they do not fit side by side (NCCL's rule for concurrent use).
    nccl_dp.open(dp, tp_collectives.ctx != nullptr);
    DeviceCollectives& d = dp_collectives;
    d.ctx = &nccl_dp;
    d.allreduce_sum = [](void* c, float* buf, size_t n) {
      auto* x = static_cast<NcclDp*>(c);
      x->after_compute();
      x->comm.allreduce_sum(buf, n, x->stream);
    };
    d.reduce_scatter_sum = [](void* c, const float* send, float* recv, size_t count) {
      auto* x = static_cast<NcclDp*>(c);
      x->after_compute();
      x->comm.reduce_scatter_sum(send, recv, count, x->stream);
    };
    d.all_gather = [](void* c, const float* send, float* recv, size_t count) {
      auto* x = static_cast<NcclDp*>(c);
      x->after_compute();
      x->comm.all_gather(send, recv, count, x->stream);
    };
    d.synchronize = [](void* c) {
      auto* x = static_cast<NcclDp*>(c);
      x->comm.synchronize(x->stream);
    };
    return &dp_collectives;
  }
#endif
  return nullptr;
}

const tp::TpDeviceCollectives* TrainDevice::open_tp_collectives([[maybe_unused]] comm::Group& tp) {
#ifdef MPITRON_HAVE_NCCL
  if (comm == CommKind::nccl && tp.size() > 1) {
    nccl_tp = comm::NcclComm(tp);
    tp_collectives.ctx = &nccl_tp;
    // The compute stream (the layers' and step ops'): in order with the layers around each call.
    tp_collectives.allreduce_sum = [](void* c, float* buf, size_t n) {
      static_cast<comm::NcclComm*>(c)->allreduce_sum(buf, n, cudaStreamPerThread);
    };
    tp_collectives.allreduce_max = [](void* c, float* buf, size_t n) {
      static_cast<comm::NcclComm*>(c)->allreduce_max(buf, n, cudaStreamPerThread);
    };
    return &tp_collectives;
  }
#endif
  return nullptr;
}

const DeviceCollectives* TrainDevice::open_embedding_collectives(
    [[maybe_unused]] comm::Group& embedding) {
#ifdef MPITRON_HAVE_NCCL
  if (comm == CommKind::nccl && embedding.size() > 1) {
    nccl_embedding = comm::NcclComm(embedding);
    DeviceCollectives& d = embedding_collectives;
    d.ctx = &nccl_embedding;
    // The compute stream: after the last backward's kernels, before the dp reduction's event.
    d.allreduce_sum = [](void* c, float* buf, size_t n) {
      static_cast<comm::NcclComm*>(c)->allreduce_sum(buf, n, cudaStreamPerThread);
    };
    d.synchronize = [](void*) { CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread)); };
    return &embedding_collectives;
  }
#endif
  return nullptr;
}

uint64_t TrainDevice::nccl_bytes_sent() const {
#ifdef MPITRON_HAVE_NCCL
  return nccl_dp.comm.bytes_sent + nccl_tp.bytes_sent + nccl_embedding.bytes_sent;
#else
  return 0;
#endif
}

void TrainDevice::allocate_file_copies(const Model& model, size_t shard) {
  if (on_host) return;
  if (!params_on_host) file_params = Buffer<float>(host_alloc, model.params.size());
  file_buffers = Buffer<float>(host_alloc, model.buffers.size());
  if (state_on_host) return;
  file_m = Buffer<float>(host_alloc, shard);
  file_v = Buffer<float>(host_alloc, shard);
}

void TrainDevice::download_state(Model& model, Buffer<float>& m, Buffer<float>& v) {
  if (on_host) return;
  if (!params_on_host)
    layers.download(file_params.data(), model.params.data(), model.params.size());
  layers.download(file_buffers.data(), model.buffers.data(), model.buffers.size());
  if (state_on_host) return;
  layers.download(file_m.data(), m.data(), m.size());
  layers.download(file_v.data(), v.data(), v.size());
}

void TrainDevice::upload_state(Model& model, Buffer<float>& m, Buffer<float>& v) {
  if (on_host) return;
  if (!params_on_host) layers.upload(model.params.data(), file_params.data(), model.params.size());
  layers.upload(model.buffers.data(), file_buffers.data(), model.buffers.size());
  if (state_on_host) return;
  layers.upload(m.data(), file_m.data(), m.size());
  layers.upload(v.data(), file_v.data(), v.size());
}

}  // namespace mpitron
