#include "server/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace

Region::~Region() { munmap(base_, size_); }

absl::Status RegionRegistry::PrepareDirectory() const {
  if (!enabled()) return absl::OkStatus();
  // Made here when missing, so that a world-writable mount (a Kubernetes
  // emptyDir is 0777) can hold a directory only sortd's group may write.
  if (mkdir(options_.dir.c_str(), 0770) == 0) {
    chmod(options_.dir.c_str(), 0770);  // whatever the umask
  }
  struct stat st {};
  if (stat(options_.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--shm_dir=", options_.dir, " is not a directory"));
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
  struct stat st {};
  absl::Status refused;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    refused = absl::PermissionDeniedError(
        absl::StrCat("'", file, "' is not a regular file"));
  } else if (st.st_nlink != 1) {
    refused = absl::PermissionDeniedError(
        absl::StrCat("'", file, "' has ", st.st_nlink,
                     " links; a region's file must have exactly one"));
  } else if (st.st_uid != geteuid() && st.st_gid != dir.st_gid) {
    refused = absl::PermissionDeniedError(absl::StrCat(
        "'", file, "' belongs to uid ", st.st_uid, " gid ", st.st_gid,
        ", neither sortd's user nor the group of --shm_dir"));
  } else if (static_cast<uint64_t>(st.st_size) < bytes) {
    refused = absl::InvalidArgumentError(absl::StrCat(
        "'", file, "' holds ", st.st_size, " bytes; ", bytes, " were asked"));
  }
  if (!refused.ok()) {
    close(fd);
    return refused;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (mapped_bytes_ + bytes > options_.max_bytes) {
      close(fd);
      return absl::ResourceExhaustedError(absl::StrCat(
          "regions of ", mapped_bytes_,
          " bytes are registered and this one "
          "adds ",
          bytes, "; the limit is ", options_.max_bytes, " (--shm_max_bytes)"));
    }
    mapped_bytes_ += bytes;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    std::lock_guard<std::mutex> lock(mu_);
    mapped_bytes_ -= bytes;
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map '", file, "': ", Errno()));
  }
  auto region = std::make_shared<Region>(static_cast<std::byte*>(base), bytes);
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
  mapped_bytes_ -= it->second->size();
  region = std::move(it->second);  // unmapped when the last user lets go
  regions_.erase(it);
}

size_t RegionRegistry::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mapped_bytes_;
}

}  // namespace sortd
