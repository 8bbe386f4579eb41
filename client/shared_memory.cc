#include "client/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"

namespace sortd {

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(
    Client& client, const std::string& dir, size_t bytes) {
  std::unique_ptr<SharedRegion> region(new SharedRegion);
  std::random_device random;
  const std::string name = absl::StrCat("sortd-", getpid(), "-",
                                        absl::Hex(random(), absl::kZeroPad8));
  region->path_ = absl::StrCat(dir, "/", name);
  const int fd = open(region->path_.c_str(),
                      O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0660);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create ", region->path_, ": ", std::strerror(errno)));
  }
  // Readable and writable by the directory's group (sortd's), whatever the
  // umask; every page allocated now, so that a full file system says so
  // here rather than as a fault in either process later.
  void* base = MAP_FAILED;
  int error = fchmod(fd, 0660) == 0
                  ? posix_fallocate(fd, 0, static_cast<off_t>(bytes))
                  : errno;
  if (error == 0) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) error = errno;
  }
  close(fd);
  if (base == MAP_FAILED) {
    unlink(region->path_.c_str());
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot size or map ", region->path_, ": ", std::strerror(error)));
  }
  region->data_ = static_cast<std::byte*>(base);
  region->size_ = bytes;

  region->stream_ = client.SharedMemoryStream(&region->context_);
  v1::SharedMemoryRequest request;
  request.set_file(name);
  request.set_bytes(bytes);
  v1::SharedMemoryResponse response;
  if (!region->stream_->Write(request) || !region->stream_->Read(&response)) {
    region->stream_->WritesDone();
    grpc::Status s = region->stream_->Finish();
    region->stream_.reset();
    return absl::Status(
        static_cast<absl::StatusCode>(s.error_code()),
        absl::StrCat("registering ", region->path_, ": ", s.error_message()));
  }
  region->handle_ = response.region();
  return region;
}

SharedRegion::~SharedRegion() {
  if (stream_ != nullptr) {
    stream_->WritesDone();
    (void)stream_->Finish();
  }
  if (data_ != nullptr) munmap(data_, size_);
  if (!path_.empty()) unlink(path_.c_str());
}

}  // namespace sortd
