"""Builds the sortd package with its gRPC stubs generated from ../../proto.

The stubs are made at build time from the repository's proto files (never
kept in the tree), with grpc_tools (Debian: python3-grpc-tools). The
version is the repository's VERSION file, also written into the package as
sortd/_version.py.
"""
import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTO = HERE.parent.parent / "proto"
VERSION = (HERE.parent.parent / "VERSION").read_text().strip()


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


setup(version=VERSION, cmdclass={"build_py": BuildWithStubs})
