#include "server/shared_memory.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"

namespace sortd {
namespace {

// 128 random bits as hex.
std::string NewHandle() {
  static std::mutex mu;
  static std::random_device device;
  std::lock_guard<std::mutex> lock(mu);
  std::string handle;
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&handle, absl::Hex(device(), absl::kZeroPad8));
  }
  return handle;
}

std::string Errno() { return std::strerror(errno); }

// A client can shrink its file while the server works on the mapping (or
// tmpfs can run out of pages for it); touching a page past the end then
// raises SIGBUS, which would kill the server. Every region's address range
// is listed here, and a SIGBUS inside one maps a page of zeros over the
// faulting address, so the work goes on, and marks the region broken, so
// that its answer is DATA_LOSS instead.
struct GuardedRange {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<bool>* broken = nullptr;
};
std::array<GuardedRange, 4096> guarded;
std::mutex guarded_mu;  // for claiming and freeing slots (not the handler)
struct sigaction previous_bus;

void OnBus(int signal, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardedRange& g : guarded) {
    if (addr >= g.begin.load(std::memory_order_acquire) &&
        addr < g.end.load(std::memory_order_acquire)) {
      const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
      void* at = reinterpret_cast<void*>(addr & ~(page - 1));
      if (mmap(at, page, PROT_READ | PROT_WRITE,
               MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED) {
        g.broken->store(true, std::memory_order_release);
        return;  // the faulting access runs again, on the zero page
      }
    }
  }
  // Not ours: what would have happened without this handler.
  if (previous_bus.sa_flags & SA_SIGINFO) {
    previous_bus.sa_sigaction(signal, info, context);
  } else if (previous_bus.sa_handler != SIG_IGN &&
             previous_bus.sa_handler != SIG_DFL) {
    previous_bus.sa_handler(signal);
  } else {
    ::signal(SIGBUS, SIG_DFL);  // the access faults again and ends us
  }
}

void InstallBusHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = OnBus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &previous_bus);
  });
}

}  // namespace

Region::Region(std::byte* base, size_t size, size_t charged)
    : base_(base), size_(size), charged_(charged) {
  InstallBusHandler();
  std::lock_guard<std::mutex> lock(guarded_mu);
  for (size_t i = 0; i < guarded.size(); ++i) {
    if (guarded[i].end.load() == 0) {
      guarded[i].broken = &broken_;
      guarded[i].begin.store(reinterpret_cast<uintptr_t>(base));
      guarded[i].end.store(reinterpret_cast<uintptr_t>(base) + charged);
      slot_ = static_cast<int>(i);
      break;
    }
  }
}

Region::~Region() {
  if (slot_ >= 0) {
    std::lock_guard<std::mutex> lock(guarded_mu);
    guarded[slot_].end.store(0);
    guarded[slot_].begin.store(0);
  }
  munmap(base_, size_);
}

absl::Status RegionRegistry::PrepareDirectory() const {
  if (!enabled()) return absl::OkStatus();
  // Made here when missing, so that a world-writable mount (a Kubernetes
  // emptyDir is 0777) can hold a directory only sortd's group may write;
  // setgid, so that the files clients make in it take its group.
  if (mkdir(options_.dir.c_str(), 02770) == 0) {
    chmod(options_.dir.c_str(), 02770);  // whatever the umask
  }
  struct stat st {};
  if (lstat(options_.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--shm_dir=", options_.dir,
                     " is not a directory (symbolic links are refused)"));
  }
  if (st.st_uid != geteuid() && st.st_uid != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--shm_dir=", options_.dir, " belongs to uid ", st.st_uid,
        ", neither sortd's user nor root: whoever owns it decides which "
        "files sortd maps"));
  }
  if (st.st_mode & S_IWOTH) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--shm_dir=", options_.dir,
        " is writable by every user: any local user could plant files in "
        "it; give it to sortd's user and its clients' group (mode 0770 or "
        "stricter)"));
  }
  return absl::OkStatus();
}

// Whether the open file `fd` may back a region of `bytes`: a regular file
// with one link, owned by sortd's user or by the group of --shm_dir
// (`dir_gid`), holding at least `bytes`.
static absl::Status CheckRegionFile(int fd, const std::string& file,
                                    size_t bytes, gid_t dir_gid) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(
        absl::StrCat("'", file, "' is not a regular file"));
  }
  if (st.st_nlink != 1) {
    return absl::PermissionDeniedError(
        absl::StrCat("'", file, "' has ", st.st_nlink,
                     " links; a region's file must have exactly one"));
  }
  if (st.st_uid != geteuid() && st.st_gid != dir_gid) {
    return absl::PermissionDeniedError(absl::StrCat(
        "'", file, "' belongs to uid ", st.st_uid, " gid ", st.st_gid,
        ", neither sortd's user nor the group of --shm_dir"));
  }
  if (static_cast<uint64_t>(st.st_size) < bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", file, "' holds ", st.st_size, " bytes; ", bytes, " were asked"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RegionRegistry::Register(const std::string& file,
                                                     size_t bytes) {
  if (!enabled()) {
    return absl::FailedPreconditionError(
        "shared memory is off on this server (start sortd with --shm_dir)");
  }
  if (file.empty() || file == "." || file == ".." ||
      file.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "file '", file, "': expected a name directly inside --shm_dir"));
  }
  if (bytes == 0) {
    return absl::InvalidArgumentError("a region needs at least one byte");
  }
  struct stat dir {};
  if (stat(options_.dir.c_str(), &dir) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--shm_dir=", options_.dir, ": ", Errno()));
  }
  const std::string path = absl::StrCat(options_.dir, "/", file);
  const int fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open '", file, "' in --shm_dir: ", Errno(),
                     errno == ELOOP ? " (symbolic links are refused)" : ""));
  }
  absl::Status refused = CheckRegionFile(fd, file, bytes, dir.st_gid);
  if (!refused.ok()) {
    close(fd);
    return refused;
  }
  // Whole pages, as the mapping takes them.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t charged = (bytes + page - 1) / page * page;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (regions_.size() >= options_.max_regions) {
      close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat(regions_.size(),
                       " regions are registered, the most "
                       "this server maps at once"));
    }
    if (mapped_bytes_ + charged > options_.max_bytes) {
      close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat("regions of ", mapped_bytes_,
                       " bytes are registered and this one "
                       "adds ",
                       charged, "; the limit is ", options_.max_bytes,
                       " (--shm_max_bytes)"));
    }
    mapped_bytes_ += charged;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    std::lock_guard<std::mutex> lock(mu_);
    mapped_bytes_ -= charged;
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map '", file, "': ", Errno()));
  }
  auto region =
      std::make_shared<Region>(static_cast<std::byte*>(base), bytes, charged);
  std::string handle = NewHandle();
  std::lock_guard<std::mutex> lock(mu_);
  regions_.emplace(handle, std::move(region));
  return handle;
}

std::shared_ptr<Region> RegionRegistry::Find(const std::string& handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(handle);
  return it == regions_.end() ? nullptr : it->second;
}

void RegionRegistry::Unregister(const std::string& handle) {
  std::shared_ptr<Region> region;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(handle);
  if (it == regions_.end()) return;
  mapped_bytes_ -= it->second->charged();
  region = std::move(it->second);  // unmapped when the last user lets go
  regions_.erase(it);
}

size_t RegionRegistry::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mapped_bytes_;
}

}  // namespace sortd
