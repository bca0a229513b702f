// The trainer's device side, in one place so that it can become the device object of DESIGN §4:
// which device and communication library (enums, parsed once at the command line), the checks
// that a family, precision and layout run there, the NCCL stream and events of --comm nccl, and
// the host copies through which files read and write another device's state.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/allocator.hpp"
#include "base/device.hpp"
#include "src/model/family.hpp"
#include "src/model/layer_ops.hpp"
#include "src/model/model.hpp"
#include "src/model/precision.hpp"
#include "src/model/staging_queue.hpp"
#include "src/model/tensor_parallel.hpp"
#include "src/train/grad_sync.hpp"
#include "src/train/step_backend.hpp"

#ifdef MPITRON_HAVE_NCCL
#include <cuda_runtime.h>

#include "comm/nccl/nccl_comm.hpp"
#endif

namespace mpitron {

struct Layout;

enum class CommKind { mpi, nccl };  // how a GPU's dp ranks sum gradients

// The --comm names mpi, nccl; UsageError naming the valid ones for anything else.
CommKind parse_comm(const std::string& name);
const char* comm_name(CommKind c);

// --device and --comm: one the build has, for a family, precision and layout it runs; makes the
// rank's GPU current (ranks of one node share its GPUs round-robin: --comm mpi stages their
// collectives on the host). Collective over MPI_COMM_WORLD for --device cuda.
void check_device(Device device, CommKind comm, DType precision, const ModelFamily& family,
                  const Layout& layout);

#ifdef MPITRON_HAVE_NCCL
// --comm nccl: NCCL over the dp ranks on a stream of its own, so that gradient buckets are
// summed while backward's kernels go on. Each collective first waits (an event) for what the
// compute stream has queued so far; synchronize makes the host wait for NCCL's stream, so the
// work queued after it (norm, update, the next forward) sees the results.
struct NcclDp {
  comm::NcclComm comm;
  cudaStream_t stream = nullptr;
  cudaEvent_t queued = nullptr;  // recorded on the compute stream before each collective
  NcclDp() = default;
  NcclDp(const NcclDp&) = delete;
  NcclDp& operator=(const NcclDp&) = delete;
  // on_compute_stream: the collectives on the compute stream (in order with the layers), not on
  // a stream of their own after an event.
  void open(comm::Group& dp, bool on_compute_stream);
  void after_compute() const;
  // No wait for the stream: the communicator's teardown finishes its work, or aborts it after
  // an asynchronous error (a dead peer would make a plain wait hang); the stream is released
  // when its work is done. Errors ignored: a failing run may be tearing down.
  ~NcclDp();
};
#endif

// Where the training state lives and how it moves: the device's step ops, layer table and
// allocator, a host allocator for the data and the file copies, and the dp collectives of
// --comm nccl. Not movable: GradSync keeps the address of `dp_collectives`.
struct TrainDevice {
  Device device;
  CommKind comm;
  const StepBackend& ops;
  const LayerOps& layers;
  const bool on_host;  // --device cpu: nothing moves between host and device
  // --offload optimizer: the optimizer state lives in host_alloc (files read and write it there).
  bool state_on_host = false;
  // --offload optimizer,master: the fp32 master weights (Model::params) live in host_alloc too.
  bool params_on_host = false;
  DeviceAllocator alloc;  // the device's memory: model, gradients, moments (peak in the trace)
  DeviceAllocator host_alloc{"cpu"};  // another device's host side: the data and file copies
  // Off the CPU: the offloaded update's and the master weights' copies, overlapping the host's
  // work, through staging buffers of pinned_alloc (page-locked on a GPU).
  StagingQueue staging;
  DeviceAllocator pinned_alloc;
  // Another device's parameters, buffers and moments pass through these on their way to and from
  // files (checkpoints, --init-from); unused on the CPU.
  Buffer<float> file_params, file_buffers, file_m, file_v;
#ifdef MPITRON_HAVE_NCCL
  NcclDp nccl_dp;
  comm::NcclComm nccl_tp;         // the TP group's, on the compute stream
  comm::NcclComm nccl_embedding;  // the first and last stage's, on the compute stream
#endif
  DeviceCollectives dp_collectives;
  tp::TpDeviceCollectives tp_collectives;
  DeviceCollectives embedding_collectives;

  TrainDevice(Device d, CommKind c);
  TrainDevice(const TrainDevice&) = delete;
  TrainDevice& operator=(const TrainDevice&) = delete;

  // Where the data's batches live: the host's memory on every device (the model copies its
  // tokens in), so the device allocator's peak is the model's and optimizer's, as the plan's.
  DeviceAllocator& data_alloc() {
    return host_alloc;
  }

  // --comm nccl: opens NCCL over dp and returns its collectives for GradSync; nullptr for MPI.
  // After open_tp_collectives: with a TP communicator they share its (the compute) stream.
  const DeviceCollectives* open_dp_collectives(comm::Group& dp);
  // --comm nccl above tp 1: opens NCCL over tp (collective over it) and returns its all-reduces
  // for the model's tensor parallelism, queued on the compute stream; nullptr otherwise (MPI).
  const tp::TpDeviceCollectives* open_tp_collectives(comm::Group& tp);
  // --comm nccl on a first or last stage of a pipeline: opens NCCL over the embedding group
  // (collective over it) and returns its all-reduce for the tied embedding's gradient, on the
  // compute stream; nullptr otherwise (MPI).
  const DeviceCollectives* open_embedding_collectives(comm::Group& embedding);
  // Bytes this rank's NCCL communicators sent (0 without NCCL).
  uint64_t nccl_bytes_sent() const;

  // Off the host: the file copies of parameters, buffers and a moment shard of `shard` floats.
  void allocate_file_copies(const Model& model, size_t shard);
  // Where files read and write the parameters, buffers and moments: the device's own buffers on
  // the CPU, else the host copies (download before a write, upload after a read).
  float* params_for_files(Model& model) {
    return on_host || params_on_host ? model.params.data() : file_params.data();
  }
  float* buffers_for_files(Model& model) {
    return on_host ? model.buffers.data() : file_buffers.data();
  }
  float* m_for_files(Buffer<float>& m) {
    return on_host || state_on_host ? m.data() : file_m.data();
  }
  float* v_for_files(Buffer<float>& v) {
    return on_host || state_on_host ? v.data() : file_v.data();
  }
  void download_state(Model& model, Buffer<float>& m, Buffer<float>& v);
  void upload_state(Model& model, Buffer<float>& m, Buffer<float>& v);
};

}  // namespace mpitron
