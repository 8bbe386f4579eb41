#include "core/version.h"

#include "sortd_revision.h"

namespace sortd {

const char* Version() { return SORTD_VERSION; }
const char* GitRevision() { return SORTD_GIT_REVISION; }

std::string VersionText(const char* program) {
  return std::string(program) + " " + Version() + " (git " + GitRevision() +
         ")";
}

}  // namespace sortd
