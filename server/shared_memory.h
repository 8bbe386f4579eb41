// Shared-memory regions of co-located clients.
//
// A client on the server's host makes a memfd, sizes it, allocates its
// pages, seals it against shrinking, growing and further sealing, and hands
// the file descriptor to sortd over the Unix socket of --shm_socket
// (server/shm_socket.h). The server maps it and answers an unguessable
// region token; Sort and Echo requests then name the token and offsets
// instead of carrying arrays, so no array bytes cross the gRPC socket.
//
// Nothing is opened by name: the region is the descriptor the client sent,
// and the checks are on that descriptor. A region must be a memfd on shmem
// (not hugetlbfs, where a page missing at fault time raises SIGBUS) sealed
// with F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL and not against writes, so
// that no page the server maps can disappear under it; its pages must all
// be allocated (a sparse file would have the server fault pages in on its
// own account). Regions are charged by those resident bytes against
// --shm_max_bytes, and their number is bounded.
//
// With PinWith, every region is also adopted by each device's host memory
// (HostMemory::Adopt: page-locked for that device's transfers, which then
// read and write the region directly instead of through staging) until it
// is unmapped.
//
//   RegionRegistry registry({.max_bytes = 1 << 30});
//   absl::StatusOr<RegionRegistry::Registered> r = registry.Register(fd);
//   std::shared_ptr<Region> region = registry.Find(r->token);  // or null
//   registry.Unregister(r->token);  // unmapped once no request holds it
#ifndef SORTD_SERVER_SHARED_MEMORY_H_
#define SORTD_SERVER_SHARED_MEMORY_H_

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/host_memory.h"

namespace sortd {

// One mapped memfd.
class Region {
 public:
  Region(std::byte* base, size_t size, size_t charged);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  std::byte* base() const { return base_; }
  size_t size() const { return size_; }
  // What it counts against --shm_max_bytes: its resident bytes when it was
  // registered (every page of it, since sparse files are refused).
  size_t charged() const { return charged_; }

  // Has each of `memories` adopt the region (HostMemory::Adopt) until it
  // is unmapped; returns how many did.
  int AdoptInto(const std::vector<std::shared_ptr<HostMemory>>& memories);
  int adopted() const;

 private:
  std::byte* base_;
  size_t size_;
  size_t charged_;
  mutable std::mutex mu_;
  // Let go before the unmapping.
  std::vector<std::shared_ptr<void>> adoptions_ ABSL_GUARDED_BY(mu_);
};

class RegionRegistry {
 public:
  struct Options {
    bool enabled = false;  // false: shared memory is off
    size_t max_bytes = size_t{16} << 30;
    // Regions mapped at once, all clients (each is a mapping of the
    // process, whose number the kernel bounds).
    size_t max_regions = 1024;
  };
  struct Registered {
    std::string token;  // 128 random bits, hex
    size_t bytes = 0;
  };

  explicit RegionRegistry(const Options& options) : options_(options) {}

  bool enabled() const { return options_.enabled; }

  // Maps the whole of the memfd `fd` (which stays the caller's to close)
  // and returns the region's token, or why the descriptor is refused:
  // INVALID_ARGUMENT for a descriptor that is not a sealed memfd of pages
  // (the message says what to change), RESOURCE_EXHAUSTED past the bounds.
  absl::StatusOr<Registered> Register(int fd);
  // The region, or null when the token is unknown (never registered, or
  // its registration has ended).
  std::shared_ptr<Region> Find(const std::string& token) const;
  void Unregister(const std::string& token);

  // Regions registered from now on, and those registered already, are
  // adopted by each of `memories` (one per device) for as long as they are
  // mapped. A memory that cannot adopt a region leaves it to staging.
  void PinWith(std::vector<std::shared_ptr<HostMemory>> memories);

  size_t mapped_bytes() const;
  size_t regions() const;

 private:
  const Options options_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Region>> regions_ ABSL_GUARDED_BY(mu_);
  size_t mapped_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<HostMemory>> pin_with_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sortd

#endif  // SORTD_SERVER_SHARED_MEMORY_H_
