"""Loads one module of the frameworm package from its file, so that the
unit tests need neither grpc nor the generated messages (the package's
__init__ imports both)."""
import importlib.util
import os


def load(name):
    """frameworm/<name>.py as a module of its own."""
    path = os.path.join(os.path.dirname(__file__), "..", "frameworm", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
