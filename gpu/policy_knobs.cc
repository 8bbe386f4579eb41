// The policy's knobs by name: every field of EnginePolicy as the key=value
// that ToString() prints and ApplyPolicyOverrides() parses, with the names
// of the enum values (radix.pass, radix.ranking, radix.subgroup_ops).
#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gpu/policy.h"
#include "gpu/policy_internal.h"

namespace sortd::gpu {
namespace {

constexpr std::pair<SubgroupOps, const char*> kSubgroupOpsNames[] = {
    {SubgroupOps::kKhrBallot, "khr-ballot"},
    {SubgroupOps::kKhr, "khr"},
    {SubgroupOps::kIntel, "intel"}};
constexpr std::pair<RadixPass, const char*> kPassNames[] = {
    {RadixPass::kThreeLaunch, "three-launch"},
    {RadixPass::kOneLaunchEarlyCounts, "one-launch-early-counts"}};
constexpr std::pair<TileRanking, const char*> kRankingNames[] = {
    {TileRanking::kWorkItemCounters, "work-item"},
    {TileRanking::kWarpEmulated, "warp-emulated"},
    {TileRanking::kWarpBallots, "warp-ballots"},
    {TileRanking::kSubgroup, "subgroup"}};

template <typename E, size_t N>
const char* NameOf(E value, const std::pair<E, const char*> (&names)[N]) {
  for (const auto& [e, n] : names) {
    if (e == value) return n;
  }
  return "?";
}

template <typename E, size_t N>
bool Parse(absl::string_view text, const std::pair<E, const char*> (&names)[N],
           E* out) {
  for (const auto& [e, n] : names) {
    if (text == n) {
      *out = e;
      return true;
    }
  }
  return false;
}

}  // namespace

namespace policy_internal {

const char* SubgroupOpsName(SubgroupOps ops) {
  for (const auto& [o, n] : kSubgroupOpsNames) {
    if (o == ops) return n;
  }
  return "?";
}

}  // namespace policy_internal

namespace {

// Every knob by its name in ToString() and ApplyPolicyOverrides().
struct Knob {
  const char* name;
  std::function<std::string(const EnginePolicy&)> get;
  // False: `value` is not a value of this knob.
  std::function<bool(absl::string_view value, EnginePolicy&)> set;
};

template <typename Part, typename T>
Knob Number(const char* name, Part EnginePolicy::*part, T Part::*field,
            bool signed_values = false) {
  return {name,
          [=](const EnginePolicy& p) { return absl::StrCat((p.*part).*field); },
          [=](absl::string_view v, EnginePolicy& p) {
            T x{};
            if (!absl::SimpleAtoi(v, &x) || (x < 0 && !signed_values)) {
              return false;
            }
            (p.*part).*field = x;
            return true;
          }};
}

Knob Flag(const char* name, bool RadixSortPolicy::*field) {
  return {name,
          [=](const EnginePolicy& p) {
            return std::string(p.radix.*field ? "1" : "0");
          },
          [=](absl::string_view v, EnginePolicy& p) {
            if (v != "0" && v != "1") return false;
            p.radix.*field = v == "1";
            return true;
          }};
}

// A knob of one of the policy's enums, by `names`.
template <typename E, size_t N>
Knob Enum(const char* name, E RadixSortPolicy::*field,
          const std::pair<E, const char*> (&names)[N]) {
  return {name,
          [=, &names](const EnginePolicy& p) {
            return std::string(NameOf(p.radix.*field, names));
          },
          [=, &names](absl::string_view v, EnginePolicy& p) {
            return Parse(v, names, &(p.radix.*field));
          }};
}

using E = EnginePolicy;
using R = RadixSortPolicy;
using B = BitonicPolicy;

// The radix knobs that shape a tile and its pass, in ToString() order.
std::vector<Knob> RadixTileKnobs() {
  return {
      Number("radix.radix_bits", &E::radix, &R::radix_bits),
      Number("radix.work_group", &E::radix, &R::work_group),
      Number("radix.items_32", &E::radix, &R::items_32),
      Number("radix.items_64", &E::radix, &R::items_64),
      Number("radix.items_32_keys", &E::radix, &R::items_32_keys),
      Number("radix.items_64_keys", &E::radix, &R::items_64_keys),
      Enum("radix.pass", &R::pass, kPassNames),
      Number("radix.lookback", &E::radix, &R::lookback),
  };
}

// The radix knobs of ranking and placing a tile's keys, in ToString() order.
std::vector<Knob> RadixRankingKnobs() {
  return {
      Enum("radix.ranking", &R::ranking, kRankingNames),
      Number("radix.warp_size", &E::radix, &R::warp_size),
      Enum("radix.subgroup_ops", &R::subgroup_ops, kSubgroupOpsNames),
  };
}

// The radix knobs of counting, short arrays, segments, look-back statuses
// and picked digits, in ToString() order.
std::vector<Knob> RadixPassKnobs() {
  return {
      Number("radix.count_unroll", &E::radix, &R::count_unroll),
      Number("radix.small_items", &E::radix, &R::small_items),
      Number("radix.small_max", &E::radix, &R::small_max),
      Number("radix.segment_radix_above", &E::radix, &R::segment_radix_above),
      Number("radix.segment_group_max", &E::radix, &R::segment_group_max),
      Number("radix.marked_status_max", &E::radix, &R::marked_status_max),
      Number("radix.status_count_bits", &E::radix, &R::status_count_bits),
      Flag("radix.status_prefetch", &R::status_prefetch),
      Flag("radix.late_lookback_unordered_32", &R::late_lookback_unordered_32),
      Number("radix.late_lookback_tiles_32", &E::radix,
             &R::late_lookback_tiles_32),
      Number("radix.stream_keys_32_min", &E::radix, &R::stream_keys_32_min),
      Number("radix.skip_check_min", &E::radix, &R::skip_check_min),
      Flag("radix.picked_digits", &R::picked_digits),
      Flag("radix.unordered_first", &R::unordered_first),
      Number("radix.picked_margin_bits_32", &E::radix,
             &R::picked_margin_bits_32, /*signed_values=*/true),
      Number("radix.picked_margin_bits_64", &E::radix,
             &R::picked_margin_bits_64, /*signed_values=*/true),
  };
}

// The bitonic and transpose knobs, in ToString() order.
std::vector<Knob> BitonicAndTransposeKnobs() {
  return {
      Number("bitonic.block_32", &E::bitonic, &B::block_32),
      Number("bitonic.block_64", &E::bitonic, &B::block_64),
      Number("bitonic.work_group", &E::bitonic, &B::work_group),
      Number("bitonic.max_keys", &E::bitonic, &B::max_keys),
      Number("bitonic.max_keys_64", &E::bitonic, &B::max_keys_64),
      Number("bitonic.max_keys_32_keys", &E::bitonic, &B::max_keys_32_keys),
      Number("transpose.matrices_per_group", &E::transpose,
             &TransposePolicy::matrices_per_group),
      Number("transpose.sub_group_size", &E::transpose,
             &TransposePolicy::sub_group_size),
  };
}

// Every knob, in the order ToString() prints them.
const std::vector<Knob>& Knobs() {
  static const std::vector<Knob> knobs = [] {
    std::vector<Knob> all;
    for (std::vector<Knob> part :
         {RadixTileKnobs(), RadixRankingKnobs(), RadixPassKnobs(),
          BitonicAndTransposeKnobs()}) {
      for (Knob& k : part) all.push_back(std::move(k));
    }
    return all;
  }();
  return knobs;
}

}  // namespace

std::string EnginePolicy::ToString() const {
  std::string out = name;
  for (const Knob& k : Knobs()) {
    absl::StrAppend(&out, " ", k.name, "=", k.get(*this));
  }
  return out;
}

absl::Status ApplyPolicyOverrides(absl::string_view spec,
                                  EnginePolicy* policy) {
  EnginePolicy p = *policy;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    item = absl::StripAsciiWhitespace(item);
    const size_t eq = item.find('=');
    const absl::string_view key = item.substr(0, eq);
    const Knob* knob = nullptr;
    for (const Knob& k : Knobs()) {
      if (key == k.name) knob = &k;
    }
    if (knob == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy override '", item, "': no knob named '", key,
          "' (the knobs are those EnginePolicy::ToString prints)"));
    }
    if (eq == absl::string_view::npos || !knob->set(item.substr(eq + 1), p)) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy override '", item, "': not a value of ", key,
                       " (now ", knob->get(p), ")"));
    }
  }
  if (!spec.empty()) p.name = absl::StrCat(policy->name, " + overrides");
  *policy = std::move(p);
  return absl::OkStatus();
}

}  // namespace sortd::gpu
