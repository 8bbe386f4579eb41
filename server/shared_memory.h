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
// is unmapped. Adoption, which the driver may take seconds over for GiBs,
// runs on a worker thread of the registry's own: Register returns at once
// and the region is served through staging until its adoption lands.
// Letting an adopted region go (unpinning, then unmapping) runs on the same
// thread, whichever thread drops the region's last reference. Regions are
// adopted only while the registry's adopted bytes stay within
// Options::max_adopted_bytes (--shm_pinned_max_bytes); others stay pageable.
//
//   RegionRegistry registry({.max_bytes = 1 << 30});
//   absl::StatusOr<RegionRegistry::Registered> r = registry.Register(fd);
//   std::shared_ptr<Region> region = registry.Find(r->token);  // or null
//   registry.Unregister(r->token);  // unmapped once no request holds it
#ifndef SORTD_SERVER_SHARED_MEMORY_H_
#define SORTD_SERVER_SHARED_MEMORY_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/host_memory.h"
#include "core/mutex.h"

namespace sortd {

// The thread that adopts regions and lets adopted ones go, with the count
// of bytes adopted. Shared by a registry and its regions, so that a region
// outliving its registry still lets go in order (inline, once stopped).
class AdoptionWorker {
 public:
  explicit AdoptionWorker(size_t max_bytes) : max_bytes_(max_bytes) {}
  ~AdoptionWorker() { Stop(); }
  AdoptionWorker(const AdoptionWorker&) = delete;
  AdoptionWorker& operator=(const AdoptionWorker&) = delete;

  // Runs `job` on the worker thread (started on first use), after the jobs
  // before it, taking it from the caller; false when it cannot (stopped, no
  // memory, no thread), and `job` is left as it was for the caller to run
  // or drop.
  bool Post(std::function<void()>& job) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the jobs already posted, then ends the thread; later Posts fail.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Reserves `bytes` of the cap; false past it.
  bool Reserve(size_t bytes);
  void Unreserve(size_t bytes);
  size_t adopted_bytes() const;

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const size_t max_bytes_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  size_t adopted_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // started by the first Post, under mu_
};

// One mapped memfd.
class Region {
 public:
  Region(std::byte* base, size_t size, size_t charged,
         std::shared_ptr<AdoptionWorker> worker = nullptr);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  std::byte* base() const { return base_; }
  size_t size() const { return size_; }
  // What it counts against --shm_max_bytes: its resident bytes when it was
  // registered (every page of it, since sparse files are refused).
  size_t charged() const { return charged_; }

  // Has each of `memories` adopt the region (HostMemory::Adopt) until it
  // is unmapped, when its charged bytes fit the worker's cap (none: no
  // cap); returns how many did. Blocks for as long as the memories take:
  // the registry calls it on its worker thread.
  int AdoptInto(const std::vector<std::shared_ptr<HostMemory>>& memories);
  // How many memories hold the region adopted now.
  int adopted() const;
  // For a device re-created after a failure: lets go of `old`'s hold on
  // the region, then has `fresh` (null: none) adopt it, within the share
  // of the cap the region holds already (a region never adopted stays
  // pageable). Returns whether `fresh` adopted it. Blocks as AdoptInto.
  bool Readopt(const std::shared_ptr<HostMemory>& old,
               const std::shared_ptr<HostMemory>& fresh);

 private:
  std::byte* base_;
  size_t size_;
  size_t charged_;
  const std::shared_ptr<AdoptionWorker> worker_;
  mutable Mutex mu_;
  // Let go before the unmapping.
  std::vector<std::shared_ptr<void>> adoptions_ ABSL_GUARDED_BY(mu_);
  // Which memory holds each of adoptions_, by index.
  std::vector<std::shared_ptr<HostMemory>> adopters_ ABSL_GUARDED_BY(mu_);
  bool reserved_ ABSL_GUARDED_BY(mu_) = false;  // charged_ in worker's cap
};

class RegionRegistry {
 public:
  struct Options {
    bool enabled = false;  // false: shared memory is off
    size_t max_bytes = size_t{16} << 30;
    // Regions mapped at once, all clients (each is a mapping of the
    // process, whose number the kernel bounds).
    size_t max_regions = 1024;
    // Bytes of regions adopted (page-locked) at once, all devices counting
    // a region once (--shm_pinned_max_bytes); regions past it stay
    // pageable.
    size_t max_adopted_bytes = size_t{8} << 30;
  };
  struct Registered {
    std::string token;  // 128 random bits, hex
    size_t bytes = 0;
  };

  explicit RegionRegistry(const Options& options);
  // Lets every region go (each unmapped once no request holds it), and
  // ends the worker thread after the adoptions and releases posted.
  ~RegionRegistry();
  RegionRegistry(const RegionRegistry&) = delete;
  RegionRegistry& operator=(const RegionRegistry&) = delete;

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
  // mapped, on the registry's worker thread: this returns at once. A
  // memory that cannot adopt a region, or a region past
  // max_adopted_bytes, leaves it to staging. Only the first call counts.
  void PinWith(std::vector<std::shared_ptr<HostMemory>> memories);

  // A device was re-created after a failure: its old host memory `old`
  // lets go of every region and the new one `fresh` (null: none) adopts
  // them in its place, on the worker thread; regions registered from now
  // on are adopted by `fresh`. Returns at once. Nothing when `old` was not
  // given to PinWith.
  void Repin(const std::shared_ptr<HostMemory>& old,
             std::shared_ptr<HostMemory> fresh);

  size_t mapped_bytes() const;
  size_t regions() const;
  // Charged bytes of the regions adopted now (each counted once).
  size_t adopted_bytes() const { return worker_->adopted_bytes(); }
  size_t max_adopted_bytes() const { return options_.max_adopted_bytes; }

 private:
  // Has `region` adopted on the worker thread.
  void PostAdoption(const std::shared_ptr<Region>& region,
                    std::vector<std::shared_ptr<HostMemory>> memories);
  // Register's steps.
  // Charges a region of `charged` bytes to the registry, or refuses it when
  // max_regions or --shm_max_bytes would be passed. Requires mu_ held.
  absl::Status ChargeLocked(size_t charged) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Maps `size` bytes of memfd `fd` as a region; where that fails, gives
  // the charge back (taking mu_ for it: requires mu_ not held).
  absl::StatusOr<std::shared_ptr<Region>> Map(int fd, size_t size,
                                              size_t charged)
      ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  const std::shared_ptr<AdoptionWorker> worker_;
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<Region>> regions_ ABSL_GUARDED_BY(mu_);
  size_t mapped_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<HostMemory>> pin_with_ ABSL_GUARDED_BY(mu_);
  bool pinned_ ABSL_GUARDED_BY(mu_) = false;  // PinWith called
};

}  // namespace sortd

#endif  // SORTD_SERVER_SHARED_MEMORY_H_
