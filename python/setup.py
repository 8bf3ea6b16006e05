"""setuptools build of the `mlprof` package (python setup.py build_ext).

pip uses the in-tree backend named in pyproject.toml instead, which needs
neither network, setuptools nor wheel:

    pip install ./python                          # works offline
    pip install --no-build-isolation ./python
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlprof_build as mb  # noqa: E402
from setuptools import Extension, setup  # noqa: E402

mb.check_tree()
ext = Extension(
    "mlprof._mlprof",
    sources=[os.path.relpath(s, mb.HERE) if s.startswith(mb.HERE) else s
             for s in mb.c_sources()],
    include_dirs=mb.INCLUDE_DIRS,
    define_macros=mb.DEFINES,
    extra_compile_args=mb.CFLAGS,
    libraries=mb.LIBS,
)

setup(
    name="mlprof",
    version=mb.version(),
    description="Low-overhead profiler for ML pipelines (C core, CPython API)",
    packages=["mlprof"],
    package_data={"mlprof": ["_startup/sitecustomize.py"]},
    ext_modules=[ext],
    python_requires=">=3.9",
    zip_safe=False,
)
