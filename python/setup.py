"""Builds the engram_store extension with the project's CMake.

The module links the static client library (client/, common/, proto/), so
it is built by the CMake of the repository around this directory, not by
setuptools' compiler: `build_ext` runs `cmake --build DIR --target
engram_store` and copies the module into the wheel. DIR is
$ENGRAM_BUILD_DIR if set, else the repository's build/ when it is
configured (make build), else build-python/, configured here with
BUILD_TESTING=OFF for the interpreter running pip.
"""
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("ENGRAM_BUILD_DIR")
        if not build:
            build = os.path.join(ROOT, "build")
            if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
                build = os.path.join(ROOT, "build-python")
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-DBUILD_TESTING=OFF",
                                   f"-DPYTHON_EXECUTABLE={sys.executable}"])
        jobs = str(os.cpu_count() or 2)
        subprocess.check_call(["cmake", "--build", build, "-j", jobs, "--target", "engram_store"])
        name = "engram_store" + sysconfig.get_config_var("EXT_SUFFIX")
        built = os.path.join(build, "python", name)
        if not os.path.exists(built):
            sys.exit(f"setup.py: {built} was not built (is this interpreter the one CMake "
                     f"found? configure {build} with -DPYTHON_EXECUTABLE={sys.executable})")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


setup(ext_modules=[Extension("engram_store", sources=[])], cmdclass={"build_ext": CMakeBuild})
