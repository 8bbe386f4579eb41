#include "server/shared_memory.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace sortd {
namespace {

constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
constexpr int kRefusedSeals = F_SEAL_WRITE | F_SEAL_FUTURE_WRITE;

// 128 bits from the kernel's random source, as 32 hex digits.
absl::StatusOr<std::string> NewToken() {
  unsigned char bits[16];
  size_t got = 0;
  while (got < sizeof bits) {
    const ssize_t n = getrandom(bits + got, sizeof bits - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(absl::StrCat(
          "no random bits for a region token: ", std::strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bits), sizeof bits));
}

// Whether `fd` may back a region: a memfd of shmem pages, open for reading
// and writing, sealed so that it can neither shrink nor grow nor be sealed
// further, not sealed against writes, every page allocated. Sets *size to
// its size and *resident to its allocated bytes.
absl::Status CheckRegionFd(int fd, size_t* size, size_t* resident) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        "the descriptor is not a regular file: send a memfd "
        "(memfd_create with MFD_ALLOW_SEALING)");
  }
  struct statfs fs {};
  if (fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
    return absl::InvalidArgumentError(
        "the descriptor is not a memfd of ordinary shared memory (hugetlbfs "
        "and files of other file systems are refused): use memfd_create "
        "without MFD_HUGETLB");
  }
  const int mode = fcntl(fd, F_GETFL);
  if (mode < 0 || (mode & O_ACCMODE) != O_RDWR) {
    return absl::InvalidArgumentError(
        "the descriptor is not open for reading and writing: the server "
        "writes the sorted arrays into the region");
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return absl::InvalidArgumentError(
        "the descriptor cannot be sealed: make it with memfd_create and "
        "MFD_ALLOW_SEALING");
  }
  if ((seals & kRequiredSeals) != kRequiredSeals) {
    return absl::InvalidArgumentError(
        "the memfd is not sealed with F_SEAL_SHRINK, F_SEAL_GROW and "
        "F_SEAL_SEAL: a file that can still shrink could take pages away "
        "from under the server (size it, allocate it, then add the seals)");
  }
  if ((seals & kRefusedSeals) != 0) {
    return absl::InvalidArgumentError(
        "the memfd is sealed against writes: the server writes the sorted "
        "arrays into the region");
  }
  if (st.st_size <= 0) {
    return absl::InvalidArgumentError("the memfd is empty");
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  *size = static_cast<size_t>(st.st_size);
  *resident = static_cast<size_t>(st.st_blocks) * 512;
  if (*resident < (*size + page - 1) / page * page) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the memfd has pages not yet allocated (", *resident, " of ", *size,
        " bytes): allocate them all (fallocate) before sealing, so that the "
        "region's memory is the client's, not the server's"));
  }
  return absl::OkStatus();
}

}  // namespace

bool AdoptionWorker::Post(std::function<void()>& job) {
  MutexLock lock(&mu_);
  if (stopping_) return false;
  try {
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    jobs_.push_back(std::move(job));
  } catch (const std::exception&) {  // bad_alloc, or no thread to be had
    return false;
  }
  cv_.NotifyOne();
  return true;
}

void AdoptionWorker::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.NotifyOne();
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the last job let the last holder go: it ends alone
  } else {
    thread_.join();
  }
}

void AdoptionWorker::Loop() {
  mu_.Lock();
  for (;;) {
    while (!stopping_ && jobs_.empty()) cv_.Wait(&mu_);
    if (jobs_.empty()) break;  // stopping, and every job run
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    mu_.Unlock();
    try {
      job();
    } catch (const std::exception&) {
      // A memory that threw (bad_alloc in a driver's wrapper): that region
      // stays pageable; the thread serves on.
    }
    job = nullptr;  // what it held is let go here, unlocked
    mu_.Lock();
  }
  mu_.Unlock();
}

bool AdoptionWorker::Reserve(size_t bytes) {
  MutexLock lock(&mu_);
  if (bytes > max_bytes_ || adopted_bytes_ > max_bytes_ - bytes) return false;
  adopted_bytes_ += bytes;
  return true;
}

void AdoptionWorker::Unreserve(size_t bytes) {
  MutexLock lock(&mu_);
  adopted_bytes_ -= bytes;
}

size_t AdoptionWorker::adopted_bytes() const {
  MutexLock lock(&mu_);
  return adopted_bytes_;
}

Region::Region(std::byte* base, size_t size, size_t charged,
               std::shared_ptr<AdoptionWorker> worker)
    : base_(base), size_(size), charged_(charged), worker_(std::move(worker)) {}

Region::~Region() {
  std::vector<std::shared_ptr<void>> adoptions;
  bool reserved = false;
  {
    MutexLock lock(&mu_);
    adoptions.swap(adoptions_);
    reserved = reserved_;
  }
  if (adoptions.empty()) {  // never adopted, or every holder let go
    munmap(base_, size_);
    if (reserved && worker_ != nullptr) worker_->Unreserve(charged_);
    return;
  }
  // Unpinning can take the driver as long as pinning did: the worker lets
  // go of every device's hold first, and only then unmaps the pages. The
  // handles are let go by clearing the vector they are in, not by the
  // last reference to it, so no copy held here can outlive the unmapping.
  auto release = [base = base_, size = size_, charged = charged_, reserved,
                  worker = worker_](std::vector<std::shared_ptr<void>>& held) {
    held.clear();  // no device may still treat the pages as its own
    munmap(base, size);
    if (reserved && worker != nullptr) worker->Unreserve(charged);
  };
  std::shared_ptr<std::vector<std::shared_ptr<void>>> held;
  try {
    held = std::make_shared<std::vector<std::shared_ptr<void>>>(
        std::move(adoptions));
    if (worker_ != nullptr) {
      std::function<void()> job = [held, release] { release(*held); };
      if (worker_->Post(job)) return;
    }
  } catch (const std::bad_alloc&) {
  }
  // Worker stopped, or no memory to ask it: here, in the same order.
  release(held != nullptr ? *held : adoptions);
}

int Region::AdoptInto(
    const std::vector<std::shared_ptr<HostMemory>>& memories) {
  if (memories.empty()) return 0;
  {
    MutexLock lock(&mu_);
    if (reserved_ || !adoptions_.empty()) return 0;  // adopted already
  }
  if (worker_ != nullptr && !worker_->Reserve(charged_)) return 0;  // cap
  int adopted = 0;
  for (const std::shared_ptr<HostMemory>& memory : memories) {
    std::shared_ptr<void> handle;
    try {
      handle = memory->Adopt(base_, size_);
    } catch (const std::exception&) {  // that device copies through staging
    }
    if (handle == nullptr) continue;
    MutexLock lock(&mu_);
    try {
      adopters_.reserve(adoptions_.size() + 1);
      adoptions_.push_back(std::move(handle));
      adopters_.push_back(memory);
      ++adopted;
    } catch (const std::bad_alloc&) {
      // The handle lets go here: that device copies through staging.
      if (adopters_.size() < adoptions_.size()) adoptions_.pop_back();
    }
  }
  if (worker_ != nullptr) {
    if (adopted == 0) {
      worker_->Unreserve(charged_);
    } else {
      MutexLock lock(&mu_);
      reserved_ = true;
    }
  }
  return adopted;
}

bool Region::Readopt(const std::shared_ptr<HostMemory>& old,
                     const std::shared_ptr<HostMemory>& fresh) {
  std::shared_ptr<void> released;
  {
    MutexLock lock(&mu_);
    if (!reserved_) return false;  // never adopted: stays pageable
    for (size_t i = 0; i < adopters_.size(); ++i) {
      if (adopters_[i] != old) continue;
      released = std::move(adoptions_[i]);
      adoptions_.erase(adoptions_.begin() + static_cast<ptrdiff_t>(i));
      adopters_.erase(adopters_.begin() + static_cast<ptrdiff_t>(i));
      break;
    }
  }
  released.reset();  // the old device's hold, before the new one pins
  std::shared_ptr<void> handle;
  if (fresh != nullptr) {
    try {
      handle = fresh->Adopt(base_, size_);
    } catch (const std::exception&) {
    }
  }
  MutexLock lock(&mu_);
  if (handle != nullptr) {
    try {
      adopters_.reserve(adoptions_.size() + 1);
      adoptions_.push_back(std::move(handle));
      adopters_.push_back(fresh);
      return true;
    } catch (const std::bad_alloc&) {
      if (adopters_.size() < adoptions_.size()) adoptions_.pop_back();
    }
  }
  // Held by no memory any more: its share of the cap goes back.
  if (adoptions_.empty() && reserved_ && worker_ != nullptr) {
    reserved_ = false;
    worker_->Unreserve(charged_);
  }
  return false;
}

int Region::adopted() const {
  MutexLock lock(&mu_);
  return static_cast<int>(adoptions_.size());
}

RegionRegistry::RegionRegistry(const Options& options)
    : options_(options),
      worker_(std::make_shared<AdoptionWorker>(options.max_adopted_bytes)) {}

RegionRegistry::~RegionRegistry() {
  std::map<std::string, std::shared_ptr<Region>> regions;
  {
    MutexLock lock(&mu_);
    regions.swap(regions_);
    mapped_bytes_ = 0;
  }
  regions.clear();  // adopted ones post their release to the worker
  worker_->Stop();  // which runs it before it ends
}

void RegionRegistry::PostAdoption(
    const std::shared_ptr<Region>& region,
    std::vector<std::shared_ptr<HostMemory>> memories) {
  // Weak: a region unregistered before its turn is not adopted at all.
  std::weak_ptr<Region> weak = region;
  try {
    std::function<void()> job = [weak, memories = std::move(memories)] {
      if (std::shared_ptr<Region> r = weak.lock()) r->AdoptInto(memories);
    };
    worker_->Post(job);
  } catch (const std::bad_alloc&) {
    // Not adopted: served through staging.
  }
}

absl::Status RegionRegistry::ChargeLocked(size_t charged) {
  if (regions_.size() >= options_.max_regions) {
    return absl::ResourceExhaustedError(
        absl::StrCat(regions_.size(),
                     " regions are registered, the most this server maps "
                     "at once; unregister one first"));
  }
  if (charged > options_.max_bytes ||
      mapped_bytes_ > options_.max_bytes - charged) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "regions of ", mapped_bytes_,
        " bytes are registered and this one "
        "adds ",
        charged, "; the limit is ", options_.max_bytes, " (--shm_max_bytes)"));
  }
  mapped_bytes_ += charged;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Region>> RegionRegistry::Map(int fd, size_t size,
                                                            size_t charged) {
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int error = errno;
    MutexLock lock(&mu_);
    mapped_bytes_ -= charged;
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map the memfd: ", std::strerror(error)));
  }
  try {
    return std::make_shared<Region>(static_cast<std::byte*>(base), size,
                                    charged, worker_);
  } catch (const std::bad_alloc&) {
    munmap(base, size);
    MutexLock lock(&mu_);
    mapped_bytes_ -= charged;
    return absl::ResourceExhaustedError("no memory to register a region");
  }
}

absl::StatusOr<RegionRegistry::Registered> RegionRegistry::Register(int fd) {
  if (!enabled()) {
    return absl::FailedPreconditionError(
        "shared memory is off on this server (start sortd with "
        "--shm_socket)");
  }
  size_t size = 0, resident = 0;
  if (absl::Status s = CheckRegionFd(fd, &size, &resident); !s.ok()) return s;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t charged = std::max(resident, (size + page - 1) / page * page);
  absl::StatusOr<std::string> token = NewToken();
  if (!token.ok()) return token.status();
  {
    MutexLock lock(&mu_);
    if (absl::Status s = ChargeLocked(charged); !s.ok()) return s;
  }
  absl::StatusOr<std::shared_ptr<Region>> mapped = Map(fd, size, charged);
  if (!mapped.ok()) return mapped.status();
  std::shared_ptr<Region> region = *std::move(mapped);
  std::vector<std::shared_ptr<HostMemory>> pin_with;
  try {
    MutexLock lock(&mu_);
    pin_with = pin_with_;
    regions_.emplace(*token, region);
  } catch (const std::bad_alloc&) {
    MutexLock lock(&mu_);  // unmapped as `region` goes
    mapped_bytes_ -= charged;
    return absl::ResourceExhaustedError("no memory to register a region");
  }
  // Adopted later, on the worker: this is the socket's thread.
  if (!pin_with.empty()) PostAdoption(region, std::move(pin_with));
  return Registered{.token = *std::move(token), .bytes = size};
}

std::shared_ptr<Region> RegionRegistry::Find(const std::string& token) const {
  MutexLock lock(&mu_);
  auto it = regions_.find(token);
  return it == regions_.end() ? nullptr : it->second;
}

void RegionRegistry::PinWith(
    std::vector<std::shared_ptr<HostMemory>> memories) {
  if (memories.empty()) return;
  std::vector<std::shared_ptr<Region>> registered;
  try {
    MutexLock lock(&mu_);
    if (pinned_) return;
    pin_with_ = memories;
    pinned_ = true;
    // Those registered from now on are posted by Register.
    for (const auto& [token, region] : regions_) registered.push_back(region);
  } catch (const std::bad_alloc&) {
    // Startup: those not listed stay pageable.
  }
  for (const std::shared_ptr<Region>& region : registered) {
    PostAdoption(region, memories);
  }
}

void RegionRegistry::Repin(const std::shared_ptr<HostMemory>& old,
                           std::shared_ptr<HostMemory> fresh) {
  if (old == nullptr || old == fresh) return;
  std::vector<std::shared_ptr<Region>> registered;
  try {
    MutexLock lock(&mu_);
    auto it = std::find(pin_with_.begin(), pin_with_.end(), old);
    if (it == pin_with_.end()) return;
    if (fresh != nullptr) {
      *it = fresh;
    } else {
      pin_with_.erase(it);
    }
    for (const auto& [token, region] : regions_) registered.push_back(region);
  } catch (const std::bad_alloc&) {
    // Those not listed keep the old memory's hold until they go.
  }
  for (const std::shared_ptr<Region>& region : registered) {
    std::weak_ptr<Region> weak = region;
    try {
      std::function<void()> job = [weak, old, fresh] {
        if (std::shared_ptr<Region> r = weak.lock()) r->Readopt(old, fresh);
      };
      worker_->Post(job);
    } catch (const std::bad_alloc&) {
    }
  }
}

void RegionRegistry::Unregister(const std::string& token) {
  std::shared_ptr<Region> region;  // unmapped when the last user lets go,
  MutexLock lock(&mu_);            // after the lock (declared first)
  auto it = regions_.find(token);
  if (it == regions_.end()) return;
  mapped_bytes_ -= it->second->charged();
  region = std::move(it->second);
  regions_.erase(it);
}

size_t RegionRegistry::mapped_bytes() const {
  MutexLock lock(&mu_);
  return mapped_bytes_;
}

size_t RegionRegistry::regions() const {
  MutexLock lock(&mu_);
  return regions_.size();
}

}  // namespace sortd
