#include "client/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
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
  void* base = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int error = errno;
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
