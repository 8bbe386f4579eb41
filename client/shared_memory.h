// A shared-memory region between this process and a sortd on the same host:
// arrays written into it are sorted without their bytes crossing the gRPC
// socket.
//
// The region is a memfd that this process makes, sizes, allocates and seals
// (it can neither shrink nor grow), maps, and hands to sortd over the Unix
// socket of the server's --shm_socket (in Kubernetes, on a volume shared by
// sortd's container and the client's). The connection stays open while the
// region lives; destroying the region closes it (the server unmaps the
// region once no request of it is running) and unmaps it here.
//
//   auto region = SharedRegion::Create("/run/sortd/shm/sortd.sock", 1 << 30);
//   std::memcpy((*region)->data(), keys.data(), n * 4);
//   v1::SortRequest request;
//   request.set_u32_keys("");                  // the type; arrays in region
//   v1::SharedArrays* shared = request.mutable_shared();
//   shared->set_region((*region)->token());
//   shared->set_count(n);
//   shared->set_keys_out_offset(n * 4);        // sorted keys after the input
//   absl::StatusOr<v1::SortResponse> r = client->Sort(request);
#ifndef SORTD_CLIENT_SHARED_MEMORY_H_
#define SORTD_CLIENT_SHARED_MEMORY_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sortd {

class SharedRegion {
 public:
  // A new sealed memfd of `bytes` bytes (every page allocated), mapped and
  // registered with the sortd listening on the Unix socket `socket_path`.
  // The server's refusal comes back with its code and message.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(
      const std::string& socket_path, size_t bytes,
      absl::Duration timeout = absl::Seconds(10));
  ~SharedRegion();

  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  // For SharedArrays.region.
  const std::string& token() const { return token_; }

 private:
  SharedRegion() = default;

  std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string token_;
  int socket_ = -1;  // the registration: open while the region lives
};

// Registers the memfd `fd` over an open connection `socket` to sortd's
// --shm_socket: the token and size sortd answers, or its refusal. For
// clients that make their own memfds (and for tests of what sortd refuses).
absl::StatusOr<std::pair<std::string, size_t>> RegisterMemfd(
    int socket, int fd, absl::Duration timeout = absl::Seconds(10));

// Sends the datagram `text` with `fds` attached (SCM_RIGHTS, at most 8)
// over `socket`: a registration's raw message, for clients that speak the
// protocol themselves and for tests of what sortd refuses.
absl::Status SendWithDescriptors(int socket, absl::string_view text,
                                 const std::vector<int>& fds);

// A connection to sortd's --shm_socket (a descriptor the caller closes).
absl::StatusOr<int> ConnectShmSocket(const std::string& socket_path);

}  // namespace sortd

#endif  // SORTD_CLIENT_SHARED_MEMORY_H_
