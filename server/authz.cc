#include "server/authz.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace sortd {
namespace {

constexpr const char* kGroupNames[] = {"sort", "shared_memory"};
constexpr const char* kGroupMethods[] = {
    "Sort, Transpose, Echo and SortStream",
    "requests that name a shared-memory region"};

std::string_view Strip(std::string_view s) {
  const char* space = " \t\r\f\v";
  const size_t first = s.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

}  // namespace

const char* MethodGroupName(MethodGroup group) {
  return kGroupNames[static_cast<int>(group)];
}

absl::StatusOr<AuthzPolicy> AuthzPolicy::Parse(std::string_view text) {
  AuthzPolicy policy;
  int group = -1;
  bool named = false;
  int line_number = 0;
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = Strip(text.substr(at, end - at));
    at = end + 1;
    ++line_number;
    if (line.empty() || line.front() == '#') continue;
    if (line.front() == '[') {
      if (line.back() != ']') {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line_number,
                         ": a group header is a name in brackets, "
                         "like [sort]"));
      }
      const std::string_view name = Strip(line.substr(1, line.size() - 2));
      group = -1;
      for (int g = 0; g < kGroups; ++g) {
        if (name == kGroupNames[g]) group = g;
      }
      if (group < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", line_number, ": unknown method group '", std::string(name),
            "' (the groups are sort and shared_memory)"));
      }
      named = true;
      continue;
    }
    if (group < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number,
                       ": an identity before any group header ([sort] or "
                       "[shared_memory])"));
    }
    if (line == "*") {
      policy.any_[group] = true;
    } else {
      policy.allowed_[group].emplace(line);
    }
  }
  if (!named) {
    return absl::InvalidArgumentError(
        "the policy names no method group ([sort] or [shared_memory]): it "
        "would deny every call");
  }
  return policy;
}

absl::StatusOr<AuthzPolicy> AuthzPolicy::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--authz_policy=", path, ": cannot read the file"));
  }
  absl::StatusOr<AuthzPolicy> policy = Parse(text.str());
  if (!policy.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--authz_policy=", path, ": ", policy.status().message()));
  }
  return policy;
}

absl::Status AuthzPolicy::Check(MethodGroup group, const Peer& peer) const {
  const int g = static_cast<int>(group);
  if (!peer.authenticated()) {
    return absl::PermissionDeniedError(
        absl::StrCat("method group '", kGroupNames[g], "' (", kGroupMethods[g],
                     ") needs a verified client certificate on this server"));
  }
  if (any_[g]) return absl::OkStatus();
  for (const std::string& id : peer.identities) {
    if (allowed_[g].count(id) > 0) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "this client's certificate is not allowed method group '", kGroupNames[g],
      "' (", kGroupMethods[g], ") on this server"));
}

}  // namespace sortd
