#!/usr/bin/env bash
# Writes MODULE_DIR/vendor (default: this directory) so that the module
# builds offline from the Go sources Debian packages under
# /usr/share/gocode/src (golang-google-grpc-dev, golang-google-protobuf-dev,
# golang-github-golang-protobuf-1-5-dev and their dependencies): each module
# the go.mod requires becomes a symbolic link to Debian's copy of it, or to
# its directory where go.mod replaces it with one (e.g. sortd.io/client/go
# replaced by a checkout of sortd), and vendor/modules.txt lists them with
# the packages the module's code and tests import.
#
# With vendor/modules.txt present, go build, go test and go vet use vendor/
# (-mod=vendor is the default for a module of go 1.14 or later), read no
# go.sum and fetch nothing: GOPROXY=off is fine.
#
# The versions in modules.txt are go.mod's; the sources are whatever
# version Debian packages (for Debian 12: gRPC-Go 1.33.3, protobuf-go
# 1.28.1). A required module Debian does not package is an error.
#   client/go/debian-vendor.sh [MODULE_DIR]
set -euo pipefail
MODULE=$(cd "${1:-$(dirname "$0")}" && pwd)
GOCODE=${GOCODE:-/usr/share/gocode/src}
cd "$MODULE"
[ -f go.mod ] || { echo "$MODULE has no go.mod" >&2; exit 1; }
[ -d "$GOCODE" ] || {
  echo "$GOCODE is missing: install golang-google-grpc-dev" >&2
  exit 1
}

# vendor_py link: makes vendor/ (links, modules.txt without packages).
# vendor_py list PACKAGES: writes modules.txt again with PACKAGES, each under
# the module whose path is its longest prefix, as `go mod vendor` does.
vendor_py() {
  python3 - "$MODULE" "$GOCODE" "$(go mod edit -json)" "$@" <<'EOF'
import json, os, re, shutil, sys

module_dir, gocode, go_mod_json, mode = sys.argv[1:5]
vendor = os.path.join(module_dir, "vendor")
mod = json.loads(go_mod_json)
replaced = {r["Old"]["Path"]: r["New"] for r in mod.get("Replace") or []}

modules = []  # (path, version, replacement directory or "", source)
for r in mod.get("Require") or []:
    new = replaced.get(r["Path"], {})
    if new.get("Version"):
        sys.exit("%s is replaced by a module version, not a directory" % r["Path"])
    replacement = new.get("Path", "")
    source = (os.path.join(module_dir, replacement) if replacement
              else os.path.join(gocode, r["Path"]))
    if not os.path.isdir(source):
        sys.exit("%s is not in %s: install the Debian package that ships it"
                 % (r["Path"], gocode))
    modules.append((r["Path"], r["Version"], replacement, os.path.realpath(source)))

packages = sys.argv[5].split() if mode == "list" else []
def owner(package):
    found = [m[0] for m in modules
             if package == m[0] or package.startswith(m[0] + "/")]
    return max(found, key=len, default=None)

if mode == "link":
    shutil.rmtree(vendor, ignore_errors=True)
    for path, _, _, source in modules:
        os.makedirs(os.path.dirname(os.path.join(vendor, path)), exist_ok=True)
        os.symlink(source, os.path.join(vendor, path))

lines = []
for path, version, replacement, source in modules:
    lines.append("# %s %s%s" % (path, version,
                                 " => " + replacement if replacement else ""))
    go = ""
    if os.path.exists(os.path.join(source, "go.mod")):
        with open(os.path.join(source, "go.mod")) as f:
            found = re.search(r"^go (\S+)", f.read(), re.M)
        go = "; go " + found.group(1) if found else ""
    lines.append("## explicit" + go)
    lines.extend(sorted(p for p in set(packages) if owner(p) == path))
# Directory replacements once more, as go.mod states them: the go command
# checks vendor/ against go.mod's replace directives with these lines.
lines.extend("# %s => %s" % (path, replacement)
             for path, _, replacement, _ in modules if replacement)
with open(os.path.join(vendor, "modules.txt"), "w") as f:
    f.write("".join(line + "\n" for line in lines))
print("%s/vendor: %d modules, %d packages"
      % (module_dir, len(modules), sum(1 for p in set(packages) if owner(p))))
EOF
}

vendor_py link
# Test variants ("p [p.test]") and test mains ("p.test") left out.
packages=$(GOFLAGS=-mod=vendor go list -deps -test \
  -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./... | grep -v -e ' ' -e '\.test$')
vendor_py list "$packages"
