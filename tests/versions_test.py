#!/usr/bin/env python3
"""The release number is written once, in VERSION; this checks everything
that names it. CMake (project(), the package config, sortd --version) and
the Python package read the file; the deployment's image tags and the
CHANGELOG cannot, so they are compared with it here.

    versions_test.py --repo DIR --sortd PATH
"""
import argparse
import pathlib
import re
import subprocess
import sys


def check(repo, sortd):
    errors = []
    version = (repo / "VERSION").read_text().strip()
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        errors.append(f"VERSION holds {version!r}, not MAJOR.MINOR.PATCH")

    out = subprocess.run([sortd, "--version"], capture_output=True,
                         text=True, check=False)
    said = (out.stdout + out.stderr).split()
    if len(said) < 2 or said[1] != version:
        errors.append(f"sortd --version says {out.stdout.strip()!r}, "
                      f"not {version}")

    for path in ("deploy/k8s/base/kustomization.yaml",
                 "deploy/k8s/overlays/prod/kustomization.yaml"):
        tags = re.findall(r"^\s*newTag:\s*\"?([^\"\s]+)\"?\s*$",
                          (repo / path).read_text(), re.M)
        if tags != [version]:
            errors.append(f"{path}: image tags {tags}, expected [{version}]")
    tags = re.findall(r"^\s*newTag:\s*\"?([^\"\s]+)\"?\s*$",
                      (repo / "deploy/k8s/overlays/nvidia/kustomization.yaml")
                      .read_text(), re.M)
    if tags != [version + "-nvidia"]:
        errors.append(f"deploy/k8s/overlays/nvidia/kustomization.yaml: image "
                      f"tags {tags}, expected [{version}-nvidia]")
    images = re.findall(r"^\s*image:\s*sortd:(\S+)\s*$",
                        (repo / "deploy/compose.yaml").read_text(), re.M)
    if images != [version]:
        errors.append(f"deploy/compose.yaml: sortd image tags {images}, "
                      f"expected [{version}]")

    pyproject = (repo / "client/python/pyproject.toml").read_text()
    if re.search(r"^version\s*=", pyproject, re.M):
        errors.append("client/python/pyproject.toml writes a version: it "
                      "is read from VERSION (dynamic)")

    headings = re.findall(r"^## (\S+)", (repo / "CHANGELOG.md").read_text(),
                          re.M)
    if version not in headings:
        errors.append(f"CHANGELOG.md has no '## {version}' section")
    elif headings[0] != "Unreleased" and headings[0] != version:
        errors.append(f"CHANGELOG.md's newest section is {headings[0]}, "
                      f"not Unreleased or {version}")
    return errors


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True, type=pathlib.Path)
    parser.add_argument("--sortd", required=True)
    args = parser.parse_args()
    errors = check(args.repo, args.sortd)
    for e in errors:
        print("versions:", e, file=sys.stderr)
    if not errors:
        print("versions: every place names",
              (args.repo / "VERSION").read_text().strip())
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
