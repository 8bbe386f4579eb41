#!/usr/bin/env bash
# Checks sortd's locking with clang's thread-safety analysis: every product
# source in server/, cpu/, gpu/, client/ and core/ that can break a locking
# rule (see below) is compiled (syntax only) with -Wthread-safety
# -Werror=thread-safety, so that a member marked ABSL_GUARDED_BY(mu_)
# touched without mu_ held, or a *Locked helper called without its lock,
# fails (headers with the sources that include them). The include paths and
# defines are each file's own, from the build's compile_commands.json (the
# generated proto headers are in the build's gen/, so the build must have
# run first). It also fails on a
# bare std::mutex or std::condition_variable there, which the analysis
# would not see: core/mutex.h has the annotated ones; nor a oneTBB loop or
# arena called other than through core/parallel.h.
#
#   scripts/thread-safety.sh [BUILD_DIR [SOURCE...]]
#
# BUILD_DIR defaults to build; SOURCE (e.g. server/scheduler.cc) checks
# those sources alone.
#
# Exit status: 0 clean, 1 a warning, 77 no clang++ (the ctest's skip code).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$repo/build}" && pwd)"
clang="${CLANGXX:-$(command -v clang++ || true)}"
if [[ -z "$clang" ]]; then
  echo "thread-safety: SKIPPED, no clang++ (scripts/install-deps.sh installs it)"
  exit 77
fi
db="$build/compile_commands.json"
if [[ ! -f "$db" ]]; then
  echo "thread-safety: no $db (configure with CMAKE_EXPORT_COMPILE_COMMANDS)" >&2
  exit 2
fi

# One line per product source: the file, then its -I/-isystem/-D/-std flags
# (only those: the rest are gcc's code-generation options).
jobs="$(mktemp)"
trap 'rm -f "$jobs"' EXIT
python3 - "$db" "$repo" "${@:2}" >"$jobs" <<'PY'
import json, os, re, shlex, sys
db, repo, only = sys.argv[1], sys.argv[2], set(sys.argv[3:])
seen = {}
for entry in json.load(open(db)):
    path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    rel = os.path.relpath(path, repo)
    if rel.split(os.sep)[0] not in ("server", "cpu", "gpu", "client", "core"):
        continue
    if only and rel not in only:
        continue
    args = entry.get("arguments") or shlex.split(entry["command"])
    keep, i = [], 1
    while i < len(args):
        a = args[i]
        if a in ("-I", "-isystem", "-D"):
            keep += [a, args[i + 1]]
            i += 1
        elif a.startswith(("-I", "-D", "-std=", "-isystem")):
            keep.append(a)
        i += 1
    seen.setdefault(path, keep)

# Only sources that include core/mutex.h (through the repository's own
# headers) have annotations to check, and of those only the ones that
# lock, declare what a lock guards, or call a *Locked helper, themselves
# or in their own header or a header-only class they include: a function
# that requires a lock is private or named *Locked, so no other source can
# misuse it. (68 sources become about 30, which halves the check.)
closure = {}
def includes_mutex(path):
    if path not in closure:
        closure[path] = False
        for line in open(path, errors="replace"):
            if not line.startswith('#include "'):
                continue
            inc = os.path.join(repo, line.split('"')[1])
            if inc.endswith("core/mutex.h") or (
                    os.path.isfile(inc) and includes_mutex(inc)):
                closure[path] = True
                break
    return closure[path]
locking = re.compile(r"Mutex|CondVar|GUARDED|REQUIRES|EXCLUDES|LOCKS_|Locked\(")
def locks(path):
    return os.path.isfile(path) and bool(
        locking.search(open(path, errors="replace").read()))
def header_only(path):
    return path.endswith(".h") and not os.path.isfile(path[:-2] + ".cc")
def checked(path):
    if locks(path) or locks(os.path.splitext(path)[0] + ".h"):
        return True
    for line in open(path, errors="replace"):
        if line.startswith('#include "'):
            inc = os.path.join(repo, line.split('"')[1])
            if header_only(inc) and locks(inc):
                return True
    return False
for path in sorted(seen):
    if includes_mutex(path) and (only or checked(path)):
        print(shlex.join([path] + seen[path]))
PY

count="$(wc -l <"$jobs")"
if [[ "$count" -eq 0 ]]; then
  echo "thread-safety: no product sources in $db" >&2
  exit 2
fi
start="$(date +%s)"
status=0
# forbid PATTERN HOME USE: product code matching PATTERN (grep -E) outside
# the header HOME fails the check, saying to use USE.
forbid() {
  local found
  if found="$(cd "$repo" && grep -rnE "$1" server cpu gpu client core \
    --include='*.h' --include='*.cc' | grep -v "^$2:")"; then
    echo "thread-safety: use $3 ($2):"
    echo "$found"
    status=1
  fi
}
# A bare std::mutex or std::condition_variable would escape the analysis:
# the product's locks are sortd::Mutex and sortd::CondVar.
forbid 'std::(mutex|condition_variable|lock_guard|unique_lock|scoped_lock)\b' \
  core/mutex.h "sortd::Mutex/MutexLock/CondVar"
# oneTBB's loops and arenas hand work to threads that ThreadSanitizer
# cannot see: the product goes through core/parallel.h, which says so.
forbid 'tbb::parallel_(for|invoke|reduce)\b|\.execute\(' \
  core/parallel.h "parallel::For/ForRange/Execute"
# Each line: the source, then its flags; a failing compile fails xargs.
xargs -P "$(nproc)" -L 1 "$clang" -fsyntax-only -Wthread-safety \
  -Werror=thread-safety -Wno-unknown-warning-option <"$jobs" || status=1
echo "thread-safety: $count sources, $(($(date +%s) - start)) s," \
  "$([[ $status -eq 0 ]] && echo clean || echo FAILED)"
exit "$status"
