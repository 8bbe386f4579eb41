// The parts of sortctl that are worth testing on their own: reading and
// writing numbers as text, generating inputs, and checking an answer against
// a local reference (std::stable_sort in IEEE-754 total order).
//
//   auto keys = ParseKeys(KeyType::kF32, text);       // packed bytes
//   absl::Status ok = VerifySort(request, response);  // keys, values,
//                                                     // permutation, stability
#ifndef SORTD_CLIENT_SORTCTL_LIB_H_
#define SORTD_CLIENT_SORTCTL_LIB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/keys.h"
#include "sortd/v1/sortd.pb.h"

namespace sortd::cli {

std::optional<KeyType> ParseKeyTypeName(std::string_view name);
std::optional<ValueType> ParseValueTypeName(std::string_view name);

// Whitespace-separated numbers in `text`, packed little-endian. Integers
// may be decimal or 0x-prefixed hex; floats accept nan, inf and exponents.
absl::StatusOr<std::string> ParseKeys(KeyType type, std::string_view text);
absl::StatusOr<std::string> ParseWords(std::string_view text);  // uint32

// `count` pseudo-random keys from `seed`: integers over their whole range
// with runs of duplicates; floats mostly finite, with some NaN, +-inf, +-0.
std::string RandomKeys(KeyType type, size_t count, uint64_t seed);
std::string RandomValues(ValueType type, size_t count, uint64_t seed);
std::string RandomWords(size_t count, uint64_t seed);

// Sets the request's key field of `type` to the packed `bytes`.
void SetKeys(KeyType type, std::string bytes, v1::SortRequest* request);

// The request's key field and its type (the request must have keys).
KeyType KeysOf(const v1::SortRequest& request, const std::string** bytes);
const std::string& KeysOf(const v1::SortResponse& response);
// Element `i` of a packed array of `type`, as text.
std::string FormatKey(KeyType type, const std::string& bytes, size_t i);

// Checks a Sort answer against the reference stable sort: same keys bit for
// bit, values moved with their keys, the exact stable permutation. The
// message of a failure names the first position that differs.
absl::Status VerifySort(const v1::SortRequest& request,
                        const v1::SortResponse& response);
// Checks a Transpose answer bit by bit.
absl::Status VerifyTranspose(const std::string& in, const std::string& out);

// How sortctl names an execution path: "cpu", "gpu", "opencl-cpu" (the
// OpenCL CPU device, e.g. PoCL); "unknown" for any other value.
const char* PathText(v1::ExecutionPath path);

// JSON string literal for `s` (quotes included).
std::string JsonString(std::string_view s);

// The GLIBC_TUNABLES value (given `current`, null when unset) that puts
// glibc's malloc on transparent huge pages (glibc.malloc.hugetlb=1, glibc
// 2.35 and later): a fresh process's first large calls then fault their
// buffers in 2 MiB pages rather than 4 KiB ones
// (docs/decisions/031-client-malloc-huge-pages.md). nullopt where
// `current` names that tunable already: the caller's setting stands.
std::optional<std::string> TunablesWithHugePages(const char* current);

}  // namespace sortd::cli

#endif  // SORTD_CLIENT_SORTCTL_LIB_H_
