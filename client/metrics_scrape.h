// Reading a sortd's Prometheus endpoint (its --metrics_listen) from a
// client: one HTTP/1.0 GET, and a sample's value from the text exposition.
// `sortctl bench --server_metrics` reads sortd's CPU seconds this way
// before and after the measured part of a run.
//
//   absl::StatusOr<double> cpu = ScrapeSample("127.0.0.1:9464",
//                                             "process_cpu_seconds_total");
#ifndef SORTD_CLIENT_METRICS_SCRAPE_H_
#define SORTD_CLIENT_METRICS_SCRAPE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sortd::cli {

// The body of GET `path` from `host_port` ("host:port", "[v6]:port"),
// within `timeout`; UNAVAILABLE when it cannot be reached, INTERNAL when
// the answer is not HTTP 200. Bodies over 64 MiB are refused.
absl::StatusOr<std::string> HttpGetBody(
    absl::string_view host_port, absl::string_view path,
    absl::Duration timeout = absl::Seconds(5));

// The value of the sample `name` in a text exposition: the unlabelled
// series, or the sum over its labelled series; NOT_FOUND without any.
absl::StatusOr<double> SampleValue(absl::string_view exposition,
                                   absl::string_view name);

// HttpGetBody(host_port, "/metrics") then SampleValue(name).
absl::StatusOr<double> ScrapeSample(absl::string_view host_port,
                                    absl::string_view name);

}  // namespace sortd::cli

#endif  // SORTD_CLIENT_METRICS_SCRAPE_H_
