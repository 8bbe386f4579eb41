// libFuzzer target: sequences of array parts (SortRequest.part) as clients,
// careless or hostile, send them to the server's PartAssembler
// (server/parts.h): parts of several clients (scopes) and group names, short
// names, any index and count, contradicting terms and sizes, refusals and
// failures of every waiting part in between. Checked: every part ends
// exactly once (handed back whole, refused, or failed through its call);
// a group handed back whole holds indices 0 to count-1 once each, all of
// one client and one name and agreeing terms; the bytes of waiting parts
// never pass their bound. Any crash, sanitizer report or broken rule is a
// finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/parts.h"

namespace {

constexpr size_t kMaxWaitingBytes = 1 << 20;

void Finding(const char* what) {
  std::fprintf(stderr, "fuzz_parts: %s\n", what);
  std::abort();
}

// Where a part came from and how it ended.
struct Sent {
  int scope = 0, name = 0;
  uint32_t index = 0, count = 0;
  int ends = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* kScopes[] = {"ipv4:10.0.0.1", "x509:client a",
                                  "ipv4:10.0.0.2"};
  static const std::string kNames[] = {std::string(16, 'a'),
                                       std::string(40, 'b'),
                                       std::string(64, 'c'), "short"};
  std::vector<std::shared_ptr<Sent>> sent;
  {
    sortd::PartAssembler parts({.timeout = absl::Hours(1),
                                .max_waiting_bytes = kMaxWaitingBytes,
                                .on_change = [](size_t, size_t bytes) {
                                  if (bytes > kMaxWaitingBytes)
                                    Finding("waiting bytes past the bound");
                                }});
    for (size_t at = 0; at + 5 <= size; at += 5) {
      const uint8_t* op = data + at;
      const int scope = op[0] % 3, name = (op[0] >> 2) % 4;
      sortd::v1::Part spec;
      spec.set_group(kNames[name]);
      spec.set_index(op[1] % 8);
      spec.set_count(op[2] % 9);
      if ((op[0] >> 4) == 15) {
        if (parts
                .Refuse(kScopes[scope], spec,
                        absl::InvalidArgumentError("did not validate"))
                .ok()) {
          Finding("a refusal came back OK");
        }
        continue;
      }
      if ((op[0] >> 4) == 14) {
        parts.FailAll(absl::UnavailableError("all"));
        continue;
      }
      auto record = std::make_shared<Sent>();
      record->scope = scope;
      record->name = name;
      record->index = spec.index();
      record->count = spec.count();
      sent.push_back(record);
      sortd::PartAssembler::Part part;
      part.index = spec.index();
      part.terms.key_type =
          op[3] & 1 ? sortd::KeyType::kU64 : sortd::KeyType::kU32;
      part.bytes = size_t{op[4]} << 13;  // up to 2 MiB
      part.call = record;
      part.fail = [record](const absl::Status& s) {
        if (s.ok()) Finding("a part failed with OK");
        ++record->ends;
      };
      absl::StatusOr<std::vector<sortd::PartAssembler::Part>> whole =
          parts.Add(kScopes[scope], spec, std::move(part));
      if (!whole.ok()) {
        ++record->ends;
        continue;
      }
      if (whole->empty()) continue;
      // Handed back whole: indices 0..count-1 of one group, agreeing.
      const auto* first = static_cast<const Sent*>(whole->front().call.get());
      if (whole->size() != first->count) Finding("a group of the wrong size");
      for (size_t i = 0; i < whole->size(); ++i) {
        const auto* p = static_cast<Sent*>((*whole)[i].call.get());
        if ((*whole)[i].index != i || p->index != i) {
          Finding("a group out of order or with a gap");
        }
        if (p->scope != first->scope || p->name != first->name) {
          Finding("a group joined across clients or names");
        }
        if (!((*whole)[i].terms == whole->front().terms)) {
          Finding("a group whose terms disagree");
        }
        ++static_cast<Sent*>((*whole)[i].call.get())->ends;
      }
    }
  }  // the assembler fails what still waits
  for (const auto& s : sent) {
    if (s->ends != 1) Finding("a part ended other than exactly once");
  }
  return 0;
}
