#include "gpu/faults.h"

#include <new>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gpu/cl.h"

namespace sortd::gpu {

namespace {

// Sets the fault `name`=`value` (a number) in `spec`; returns why it
// cannot, or empty.
std::string SetCountedFault(absl::string_view name, absl::string_view value,
                            FaultSpec* spec) {
  long n = 0;
  if (name == "device") {
    if (!absl::SimpleAtoi(value, &n) || n < 0 || n > 1023) {
      return "needs a device index from 0 to 1023";
    }
    spec->device = static_cast<int>(n);
    return "";
  }
  if (!absl::SimpleAtoi(value, &n) || n < 1) return "needs a positive count";
  if (name == "enqueue") {
    spec->enqueue = n;
  } else if (name == "device_lost") {
    spec->device_lost = n;
  } else if (name == "oom") {
    spec->oom = n;
  } else if (name == "host_oom") {
    spec->host_oom = n;
  } else if (name == "build") {
    if (n != 1) return "takes only 1";
    spec->build = true;
  } else {
    return "is not a fault";
  }
  return "";
}

}  // namespace

absl::Status ParseFaultSpec(absl::string_view text, FaultSpec* spec) {
  FaultSpec parsed;
  auto bad = [&](absl::string_view item, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--inject_faults: '", item, "' ", why,
        "; expected a comma-separated list of enqueue=N, sticky, "
        "stage=upload|download|copy|kernel|<stage>, device_lost=N, oom=N, "
        "host_oom=N, build=1, device=N"));
  };
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const absl::string_view name = item.substr(0, eq);
    const absl::string_view value = eq == absl::string_view::npos
                                        ? absl::string_view()
                                        : item.substr(eq + 1);
    if (name == "sticky") {
      if (eq != absl::string_view::npos) return bad(item, "takes no value");
      parsed.sticky = true;
    } else if (eq == absl::string_view::npos || value.empty()) {
      return bad(item, "needs a value");
    } else if (name == "stage") {
      parsed.stage = std::string(value);
    } else if (std::string why = SetCountedFault(name, value, &parsed);
               !why.empty()) {
      return bad(item, why);
    }
  }
  if ((parsed.sticky || !parsed.stage.empty()) && parsed.enqueue == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--inject_faults=", text,
        ": sticky and stage= qualify enqueue=N, which is missing"));
  }
  if (parsed.device >= 0 && !parsed.any()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--inject_faults=", text,
                     ": device= names where faults go; none given"));
  }
  *spec = std::move(parsed);
  return absl::OkStatus();
}

absl::Status FaultInjector::OnEnqueue(absl::string_view what, bool kernel) {
  if (!armed_ || spec_.enqueue == 0) return absl::OkStatus();
  // stage= narrows the count to one kind of enqueue: upload, download,
  // copy, kernel (any launch) or one kernel stage's name.
  if (const std::string& want = spec_.stage; !want.empty()) {
    if (want != what && !(kernel && want == "kernel")) {
      return absl::OkStatus();
    }
  }
  const long n = ++enqueues_;
  if (n == spec_.enqueue || (n > spec_.enqueue && spec_.sticky)) {
    return ClStatus(CL_OUT_OF_RESOURCES,
                    absl::StrCat(what, kernel ? " kernel" : "",
                                 " (injected fault at enqueue ", n, ")"));
  }
  return absl::OkStatus();
}

absl::Status FaultInjector::OnAllocate(absl::string_view what) {
  if (!armed_ || (spec_.oom == 0 && spec_.host_oom == 0)) {
    return absl::OkStatus();
  }
  const long n = ++allocations_;
  if (n == spec_.host_oom) throw std::bad_alloc();
  if (n != spec_.oom) return absl::OkStatus();
  return ClStatus(CL_MEM_OBJECT_ALLOCATION_FAILURE,
                  absl::StrCat("allocating ", what,
                               " (injected: out of device memory at "
                               "allocation ",
                               spec_.oom, ")"));
}

bool FaultInjector::DeviceLostAtFinish() {
  return armed_ && spec_.device_lost > 0 && ++runs_ == spec_.device_lost;
}

}  // namespace sortd::gpu
