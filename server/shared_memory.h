// Shared-memory regions of co-located clients (the SharedMemory RPC).
//
// A client on the server's host creates a file in the server's --shm_dir
// (in Kubernetes: an emptyDir with medium Memory shared by sortd and its
// sidecar), maps it, and registers it; the server maps the same file and
// answers an unguessable handle. Sort requests then name the handle and
// offsets instead of carrying arrays, so no array bytes cross the socket.
//
// What the server maps is bounded and checked: only files directly inside
// the configured directory (a name, no path; opened without following
// symbolic links), regular files with a single link, owned by the server's
// user or by the directory's group, no larger than the file is; the
// directory itself must belong to sortd's user (or root), not be a symbolic
// link, and not be writable by others. The bytes mapped by all regions
// together (in whole pages) and their number are bounded. A region lives as
// long as the stream that registered it and every request still using it.
//
//   RegionRegistry registry({.dir = "/dev/shm/sortd"});
//   if (absl::Status s = registry.PrepareDirectory(); !s.ok()) ...
//   absl::StatusOr<std::string> handle = registry.Register("a", 1 << 20);
//   std::shared_ptr<Region> r = registry.Find(*handle);   // null: unknown
//   registry.Unregister(*handle);   // unmapped once no request holds it
#ifndef SORTD_SERVER_SHARED_MEMORY_H_
#define SORTD_SERVER_SHARED_MEMORY_H_

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sortd {

// One mapped file.
class Region {
 public:
  Region(std::byte* base, size_t size, size_t charged);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  std::byte* base() const { return base_; }
  size_t size() const { return size_; }
  // What it counts against --shm_max_bytes: its size in whole pages.
  size_t charged() const { return charged_; }
  // True once a page of it could not be read or written (the client shrank
  // its file, or the file system had no page for it): work on it since
  // then saw zeros, and its answers are lost.
  bool broken() const { return broken_.load(std::memory_order_acquire); }

 private:
  std::byte* base_;
  size_t size_;
  size_t charged_;
  std::atomic<bool> broken_{false};
  int slot_ = -1;  // in the SIGBUS guard's table
};

class RegionRegistry {
 public:
  struct Options {
    std::string dir;  // empty: shared memory is off
    size_t max_bytes = size_t{16} << 30;
    // Regions mapped at once, all clients (each is a mapping of the
    // process, whose number the kernel bounds).
    size_t max_regions = 1024;
  };

  explicit RegionRegistry(const Options& options) : options_(options) {}

  // Creates the directory (mode 0770: sortd's user and group) if it does
  // not exist; FAILED_PRECONDITION when it is unusable (not a directory,
  // writable by others). OK when shared memory is off.
  absl::Status PrepareDirectory() const;
  bool enabled() const { return !options_.dir.empty(); }

  // Maps `bytes` bytes of `file` and returns the region's handle.
  absl::StatusOr<std::string> Register(const std::string& file, size_t bytes);
  // The region, or null when the handle is unknown (never registered, or
  // its stream has closed).
  std::shared_ptr<Region> Find(const std::string& handle) const;
  void Unregister(const std::string& handle);

  size_t mapped_bytes() const;

 private:
  const Options options_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Region>> regions_;
  size_t mapped_bytes_ = 0;
};

}  // namespace sortd

#endif  // SORTD_SERVER_SHARED_MEMORY_H_
