"""Builds the frameworm package with its gRPC stubs generated from the
repository's proto/ (so install it from a checkout: pip install ./python)."""
import glob
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "proto")


def generate(out_dir):
    """Writes frameworm/v1/*_pb2.py and *_pb2_grpc.py under out_dir."""
    import grpc_tools
    from grpc_tools import protoc

    protos = sorted(glob.glob(os.path.join(PROTO, "frameworm", "v1", "*.proto")))
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO}: build from a Frameworm checkout")
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = ["protoc", f"-I{PROTO}", f"-I{well_known}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", *protos]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed on " + " ".join(protos))
    with open(os.path.join(out_dir, "frameworm", "v1", "__init__.py"), "w") as f:
        f.write('"""Generated from proto/frameworm/v1 (do not edit)."""\n')


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        generate(self.build_lib)


setup(cmdclass={"build_py": BuildWithStubs})
