"""Builds the sortd package with its gRPC stubs generated from sortd.proto.

The stubs are made at build time from the proto files (never kept in the
tree), with grpc_tools (Debian: python3-grpc-tools). The version is the
repository's VERSION file, also written into the package as
sortd/_version.py.

The proto files and VERSION are read from beside this file where they are
(a source distribution: its sdist command copies them in, so that it builds
without the repository), else from the repository (../../proto,
../../VERSION).
"""
import pathlib
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE if (HERE / "VERSION").exists() else HERE.parent.parent
PROTO = ROOT / "proto"
VERSION = (ROOT / "VERSION").read_text().strip()
PROTO_FILES = ["sortd/v1/sortd.proto", "grpc/health/v1/health.proto"]


def _protoc(args):
    from grpc_tools import protoc  # pylint: disable=import-outside-toplevel

    if protoc.main(["protoc"] + args) != 0:
        raise RuntimeError("protoc failed: " + " ".join(args))


class BuildWithStubs(build_py):
    """build_py, then sortd/v1/sortd_pb2{,_grpc}.py and the health messages."""

    def run(self):
        super().run()
        if not (PROTO / "sortd" / "v1" / "sortd.proto").exists():
            raise RuntimeError(f"sortd.proto not found under {PROTO}")
        out = pathlib.Path(self.build_lib)
        _protoc([f"-I{PROTO}", f"--python_out={out}",
                 f"--grpc_python_out={out}", "sortd/v1/sortd.proto"])
        (out / "sortd" / "v1" / "__init__.py").touch()
        # grpc.health.v1's messages only (the call goes through a generic
        # stub), inside this package so as not to shadow grpcio's `grpc`.
        health = out / "sortd" / "_health"
        health.mkdir(parents=True, exist_ok=True)
        _protoc([f"-I{PROTO / 'grpc' / 'health' / 'v1'}",
                 f"--python_out={health}", "health.proto"])
        (health / "__init__.py").touch()
        (out / "sortd" / "_version.py").write_text(
            f'"""The package version (the repository\'s VERSION)."""\n'
            f"__version__ = {VERSION!r}\n")


class SdistWithProtos(sdist):
    """sdist, with VERSION and the proto files inside, so that it builds
    without the repository."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        base = pathlib.Path(base_dir)
        shutil.copyfile(ROOT / "VERSION", base / "VERSION")
        for name in PROTO_FILES:
            (base / "proto" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(PROTO / name, base / "proto" / name)


setup(version=VERSION,
      cmdclass={"build_py": BuildWithStubs, "sdist": SdistWithProtos})
