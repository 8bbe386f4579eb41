// A shared-memory region between this process and a sortd on the same host
// (the SharedMemory RPC): arrays written into it are sorted without their
// bytes crossing the socket.
//
// The region is a file that this process creates in the server's --shm_dir
// (in Kubernetes, an emptyDir with medium Memory mounted in both
// containers), maps, and registers over a stream that stays open while the
// region lives; destroying the region closes the stream (the server unmaps
// the file), unmaps it here and removes the file.
//
//   auto region = SharedRegion::Create(*client, "/dev/shm/sortd", 1 << 30);
//   std::memcpy((*region)->data(), keys.data(), n * 4);
//   v1::SortRequest request;
//   request.set_u32_keys("");                  // the type; arrays in region
//   v1::SharedArrays* shared = request.mutable_shared();
//   shared->set_region((*region)->handle());
//   shared->set_count(n);
//   shared->set_keys_out_offset(n * 4);        // sorted keys after the input
//   absl::StatusOr<v1::SortResponse> r = client->Sort(request);
#ifndef SORTD_CLIENT_SHARED_MEMORY_H_
#define SORTD_CLIENT_SHARED_MEMORY_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/client.h"

namespace sortd {

class SharedRegion {
 public:
  // A new file of `bytes` bytes in `dir`, mapped and registered with the
  // server `client` talks to.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(
      Client& client, const std::string& dir, size_t bytes);
  ~SharedRegion();

  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  // For SharedArrays.region.
  const std::string& handle() const { return handle_; }

 private:
  SharedRegion() = default;

  std::string path_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string handle_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SharedMemoryRequest,
                                           v1::SharedMemoryResponse>>
      stream_;
};

}  // namespace sortd

#endif  // SORTD_CLIENT_SHARED_MEMORY_H_
