"""The one build step pyproject.toml cannot declare: the wheel gets a copy of the data the library
reads (``layerlab.paths.PACKAGE_DATA``: data/specs and data/corpus/enterprise_v2) as the package
folder ``layerlab/_data``. The repository keeps its single copy in ``data/``; an editable install
reads that one (``layerlab/paths.py``), so nothing is copied for it."""

import importlib.util
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _paths():  # layerlab/paths.py on its own: the package's dependencies need not be installed
    spec = importlib.util.spec_from_file_location("_layerlab_paths", HERE / "layerlab" / "paths.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return
        paths = _paths()
        target = Path(self.build_lib) / "layerlab" / paths.PACKAGE_DATA_DIR
        shutil.rmtree(target, ignore_errors=True)
        for rel in paths.PACKAGE_DATA:
            shutil.copytree(HERE / "data" / rel, target / rel)


setup(cmdclass={"build_py": BuildPyWithData})
