#include "server/parts.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/keys.h"

namespace sortd {
namespace {

void FailParts(std::vector<PartAssembler::Part>& parts,
               const absl::Status& status) {
  for (PartAssembler::Part& p : parts) p.fail(status);
}

}  // namespace

PartAssembler::PartAssembler(const Options& options)
    : options_(options), reaper_([this] { Expire(); }) {}

PartAssembler::~PartAssembler() {
  FailAll(absl::UnavailableError(
      "sortd is shutting down: the array's other parts will not come"));
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  changed_.NotifyAll();
  reaper_.join();
}

size_t PartAssembler::waiting_groups() const {
  MutexLock lock(&mu_);
  return groups_.size();
}

void PartAssembler::ChangedLocked() {
  if (options_.on_change) options_.on_change(waiting_parts_, waiting_bytes_);
}

std::vector<PartAssembler::Part> PartAssembler::Drop(const Key& key) {
  std::vector<Part> parts;
  auto it = groups_.find(key);
  if (it == groups_.end()) return parts;
  parts = std::move(it->second.parts);
  waiting_bytes_ -= it->second.bytes;
  waiting_parts_ -= it->second.waiting;
  groups_.erase(it);
  ChangedLocked();
  return parts;
}

namespace {

bool NamesAGroup(const v1::Part& spec) {
  return spec.group().size() >= PartAssembler::kMinGroupBytes &&
         spec.group().size() <= PartAssembler::kMaxGroupBytes;
}

}  // namespace

namespace {

// Whether `spec`'s count and index place a part in an array (its group's
// name is checked apart: a part that names no group fails no group).
absl::Status CheckPlace(const v1::Part& spec) {
  if (spec.count() == 0 || spec.count() > PartAssembler::kMaxParts) {
    return absl::InvalidArgumentError(
        absl::StrCat("part.count is ", spec.count(), "; an array has 1 to ",
                     PartAssembler::kMaxParts, " parts"));
  }
  if (spec.index() >= spec.count()) {
    return absl::InvalidArgumentError(
        absl::StrCat("part.index is ", spec.index(), " of part.count ",
                     spec.count(), " parts (0 to ", spec.count() - 1, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PartAssembler::MismatchLocked(const Group& g, const v1::Part& spec,
                                           const Part& part) const {
  const Terms& first = g.parts.empty() ? part.terms : g.parts[0].terms;
  const bool repeated =
      std::any_of(g.parts.begin(), g.parts.end(),
                  [&](const Part& p) { return p.index == part.index; });
  if (spec.count() != g.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("part.count is ", spec.count(),
                     " where the array's first part said ", g.count));
  }
  if (repeated) {
    return absl::InvalidArgumentError(
        absl::StrCat("part ", part.index, " of the array came twice"));
  }
  if (!(part.terms == first)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "part ", part.index,
        " differs from the array's other parts in its key or value "
        "field, order, return_permutation or response_key_coding"));
  }
  if (g.parts.size() + 1 < g.count &&
      waiting_bytes_ + part.bytes > options_.max_waiting_bytes) {
    // (The last part of a group does not wait: it is not counted.)
    return absl::ResourceExhaustedError(absl::StrCat(
        "parts of arrays waiting for their other parts hold ", waiting_bytes_,
        " bytes of messages; this one's ", part.bytes,
        " would pass the bound of ", options_.max_waiting_bytes,
        " (--max_stream_bytes); retry"));
  }
  return absl::OkStatus();
}

void PartAssembler::WaitLocked(Group& g, Part part) {
  const size_t bytes = part.bytes;
  g.parts.push_back(std::move(part));
  g.bytes += bytes;
  ++g.waiting;
  waiting_bytes_ += bytes;
  ++waiting_parts_;
  ChangedLocked();
}

absl::StatusOr<std::vector<PartAssembler::Part>> PartAssembler::Add(
    const std::string& scope, const v1::Part& spec, Part part) {
  if (!NamesAGroup(spec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "part.group holds ", spec.group().size(),
        " bytes; name the array with ", kMinGroupBytes, " to ", kMaxGroupBytes,
        " random bytes (128 bits at least: the name is what keeps other "
        "clients out of the array)"));
  }
  if (absl::Status place = CheckPlace(spec); !place.ok()) {
    return Refuse(scope, spec, place);
  }
  part.index = spec.index();
  const Key key(scope, spec.group());

  std::vector<Part> failed, whole;
  absl::Status refused;
  {
    MutexLock lock(&mu_);
    if (!closed_.ok()) return closed_;
    auto [it, fresh] = groups_.try_emplace(key);
    Group& g = it->second;
    if (fresh) {
      g.count = spec.count();
      g.expires = absl::Now() + options_.timeout;
      changed_.NotifyAll();
    }
    refused = MismatchLocked(g, spec, part);
    if (!refused.ok()) {
      failed = Drop(key);
    } else if (g.parts.size() + 1 == g.count) {
      g.parts.push_back(std::move(part));
      whole = Drop(key);
    } else {
      WaitLocked(g, std::move(part));
    }
  }
  if (!refused.ok()) {
    FailParts(failed, absl::Status(refused.code(),
                                   absl::StrCat("another part of the array "
                                                "was refused: ",
                                                refused.message())));
    return refused;
  }
  std::sort(whole.begin(), whole.end(),
            [](const Part& a, const Part& b) { return a.index < b.index; });
  return whole;
}

absl::Status PartAssembler::Refuse(const std::string& scope,
                                   const v1::Part& spec,
                                   const absl::Status& refused) {
  if (!NamesAGroup(spec)) return refused;  // names no group
  std::vector<Part> failed;
  {
    MutexLock lock(&mu_);
    failed = Drop(Key(scope, spec.group()));
  }
  FailParts(failed, absl::Status(refused.code(),
                                 absl::StrCat("another part of the array "
                                              "was refused: ",
                                              refused.message())));
  return refused;
}

void PartAssembler::FailAll(const absl::Status& status) {
  std::vector<Part> failed;
  {
    MutexLock lock(&mu_);
    for (auto& [name, g] : groups_) {
      for (Part& p : g.parts) failed.push_back(std::move(p));
    }
    groups_.clear();
    waiting_bytes_ = 0;
    waiting_parts_ = 0;
    ChangedLocked();
  }
  FailParts(failed, status);
}

void PartAssembler::Close(const absl::Status& status) {
  {
    MutexLock lock(&mu_);
    closed_ = status;
  }
  FailAll(status);
}

void PartAssembler::Expire() {
  mu_.Lock();
  while (!stopping_) {
    absl::Time next = absl::InfiniteFuture();
    const absl::Time now = absl::Now();
    std::vector<std::pair<std::vector<Part>, std::string>> expired;
    for (auto it = groups_.begin(); it != groups_.end();) {
      if (it->second.expires > now) {
        next = std::min(next, it->second.expires);
        ++it;
        continue;
      }
      std::vector<uint32_t> arrived;
      for (const Part& p : it->second.parts) arrived.push_back(p.index);
      std::sort(arrived.begin(), arrived.end());
      const std::string what =
          absl::StrCat("part(s) ", absl::StrJoin(arrived, ", "), " of ",
                       it->second.count, " came; the others did not within ",
                       absl::FormatDuration(options_.timeout),
                       " of the first (--part_timeout)");
      waiting_bytes_ -= it->second.bytes;
      waiting_parts_ -= it->second.waiting;
      expired.emplace_back(std::move(it->second.parts), what);
      it = groups_.erase(it);
    }
    if (!expired.empty()) {
      ChangedLocked();
      mu_.Unlock();
      for (auto& [parts, what] : expired) {
        FailParts(parts, absl::DeadlineExceededError(what));
      }
      mu_.Lock();
      continue;
    }
    if (next == absl::InfiniteFuture()) {
      changed_.Wait(&mu_);
    } else {
      changed_.WaitUntil(&mu_, absl::ToChronoTime(next));
    }
  }
  mu_.Unlock();
}

}  // namespace sortd
