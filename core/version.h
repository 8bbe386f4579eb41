// What this build of sortd is: the project version and the source tree's
// git revision, for --version, logs and the sortd_build_info metric.
//
//   std::printf("%s\n", sortd::VersionText("sortd").c_str());
//   // sortd 0.1.0 (git 1a2b3c4d5e6f)
#ifndef SORTD_CORE_VERSION_H_
#define SORTD_CORE_VERSION_H_

#include <string>

namespace sortd {

const char* Version();      // "0.1.0"
const char* GitRevision();  // "1a2b3c4d5e6f", "...+dirty" or "unknown"
// "<program> <version> (git <revision>)"
std::string VersionText(const char* program);

}  // namespace sortd

#endif  // SORTD_CORE_VERSION_H_
