// Test support: a gRPC ByteBuffer's bytes as one string.
#ifndef SORTD_TESTS_BYTE_BUFFER_H_
#define SORTD_TESTS_BYTE_BUFFER_H_

#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"

namespace sortd::testing {

inline std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

}  // namespace sortd::testing

#endif  // SORTD_TESTS_BYTE_BUFFER_H_
