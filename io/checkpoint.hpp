// Checkpoints, ckpt_<step>.h5: every tensor at its global name and global shape, each rank
// writing its hyperslab blocks (parallel HDF5) or sending them to rank 0 (serial HDF5), so a
// checkpoint written by one layout loads in any other (ARCHITECTURE.md, "Invariants" and "Files").
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/h5.hpp"

namespace mpitron::io {

// A hyperslab block of a global tensor: elements start[d] <= i_d < start[d] + count[d].
// For a scalar tensor (shape {}) both are empty and the block is the one element.
struct Block {
  std::vector<int64_t> start, count;
};

// What a dataset stores: float32 (parameters, moments), or uint8 (8-bit optimizer codes).
enum class ElementType { f32, u8 };

struct TensorPiece {
  std::string dataset;  // e.g. "params/h.0.attn.c_attn.weight" or "optim/wte.weight/m"
  std::vector<int64_t> global_shape;
  std::vector<Block> blocks;  // this rank's disjoint part of the tensor (empty: owns nothing)
  // The blocks' elements one block after another, each block in row-major order (for blocks in
  // increasing flat order, e.g. from flat_range_blocks, that is the global row-major order).
  float* data = nullptr;
  ElementType type = ElementType::f32;
  uint8_t* codes = nullptr;  // a u8 piece's elements, laid out as data's (data unused)
  // Instead of data, for a piece of the whole tensor (blocks flat_range_blocks(shape, 0, numel))
  // written by one rank with CheckpointIo::gather: fill(begin, end, out) puts the row-major
  // elements [begin, end) in out just before they are written, in increasing order, a chunk at a
  // time, so the writer never holds the tensor whole (mpitron import streams a mapped file so).
  std::function<void(int64_t begin, int64_t end, float* out)> fill = nullptr;
};

// Blocks covering elements [begin, end) of the row-major flattening of a tensor of `shape`,
// in increasing order, so their concatenation is that flat range: for 2-D a partial row, whole
// rows, a partial row (at most 3); in N-d at most 2N-1. Empty when begin == end.
// Requires 0 <= begin <= end <= numel(shape).
std::vector<Block> flat_range_blocks(const std::vector<int64_t>& shape, int64_t begin, int64_t end);

// How write_checkpoint moves data: every rank writes with collective MPI-IO (parallel HDF5 only),
// or ranks send their blocks to rank 0, which writes alone (works with any HDF5).
enum class CheckpointIo { collective, gather };

// Collective over comm: every rank passes every dataset, in the same order and with the same
// shapes (blocks empty where it owns none; checked, a mismatch aborts). Writes path + ".tmp" and
// renames it to path when complete (rank 0 renames, all ranks return after), so a crash never
// leaves a half-written checkpoint under the real name. Datasets are float32 (uint8 for u8
// pieces) at global shape.
// root_attrs become root attributes; group_attrs maps a group path ("rng", "data") to the
// attributes of that group (created). Attribute values must be equal on every rank.
// Creates the folder when missing. Throws UsageError on every rank when the file cannot be
// created or renamed. tensor_written (if set) runs on every rank after each tensor's write: a
// long write's progress, for a watchdog.
void write_checkpoint(const std::string& path, const Attributes& root_attrs,
                      const std::map<std::string, Attributes>& group_attrs,
                      const std::vector<TensorPiece>& tensors, MPI_Comm comm,
                      const std::function<void()>& tensor_written = {});
// Same with the transport chosen: the one above is collective with parallel HDF5 (the
// MPITRON_PARALLEL_HDF5 build), gather otherwise. collective without parallel HDF5 aborts.
void write_checkpoint(const std::string& path, const Attributes& root_attrs,
                      const std::map<std::string, Attributes>& group_attrs,
                      const std::vector<TensorPiece>& tensors, MPI_Comm comm, CheckpointIo io,
                      const std::function<void()>& tensor_written = {});

struct CheckpointHeader {
  Attributes root;
  std::map<std::string, Attributes> groups;  // every group that has attributes ("rng", "data")
  std::map<std::string, std::vector<int64_t>>
      shapes;  // dataset path ("params/wte.weight") -> shape
};

// Attributes and every dataset's shape, without data. UsageError on a missing or corrupt file.
CheckpointHeader read_checkpoint_header(const std::string& path);

// Each rank reads its own blocks into data (independent I/O; not collective). Every dataset is
// checked before any is read: UsageError naming the dataset when it is missing or its shape
// differs from global_shape, or when a chunk fails its Fletcher-32 checksum (tensors are written
// chunked with one). Stored values of any float type are converted to float32; u8 pieces read
// unsigned 8-bit integer datasets.
void read_checkpoint_tensors(const std::string& path, const std::vector<TensorPiece>& tensors);

// Path of ckpt_<step>.h5 with the largest step in dir, or "" when there is none or dir does not
// exist (*.tmp and other names are ignored).
std::string latest_checkpoint(const std::string& dir);

// Every float (and uint8) dataset read whole, so HDF5 checks each chunk's Fletcher-32 checksum.
struct CheckpointVerification {
  int64_t tensors = 0;
  std::vector<std::string> failed;     // fail their checksum or cannot be read
  std::vector<std::string> unchecked;  // written without checksums (an older writer)
};
CheckpointVerification verify_checkpoint(const std::string& path);

// (step, path) of every ckpt_<step>.h5 in dir, by step.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir);

// Removes the ckpt_<step>.h5.tmp files an interrupted write left in dir; returns their paths.
std::vector<std::string> remove_stale_checkpoint_writes(const std::string& dir);

// Removes all but the newest `keep` checkpoints in dir (at least the newest one always stays);
// returns the removed paths.
std::vector<std::string> remove_old_checkpoints(const std::string& dir, int keep);

}  // namespace mpitron::io
