"""Builds the `mlprof` package with setuptools; the metadata is in
pyproject.toml. Offline: pip install --no-build-isolation ./python

build_ext compiles every C file once and links three programs from the
objects: the extension, the recording library (mlprof/_lib/libmlprof.so,
which the extension records through and `mlprof run` preloads) and the
command (mlprof/_bin/mlprof, run by the `mlprof` console script)."""
import concurrent.futures
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlprof_build as mb  # noqa: E402


class BuildMlprof(build_ext):
    def build_extension(self, ext):
        mb.check_tree()
        http_cflags, http_libs = mb.http_flags()
        zstd_cflags, zstd_libs = mb.zstd_flags()
        unwind_cflags, unwind_libs = mb.unwind_flags()
        recording = mb.layers(["record", "sample"])
        # Only in the recording library, not in the command.
        preload = mb.sources("preload")
        lower = mb.layers(["format", "base"])
        core = mb.layers(["export", "analyze", "model"])
        # The packaged command has mlprof serve: the build requires
        # libmicrohttpd (http_flags says so when it is missing).
        cli = mb.sources("cli") + mb.sources("serve")
        # mlprof export's Parquet writer, with libzstd: the command only.
        cli += mb.sources("parquet")
        cc = self.compiler
        generated = os.path.join(self.build_temp, "generated")
        mb.generate_assets(generated)

        def compile_one(src, autostart=False):
            # libmlprof's recording layer starts a session by itself
            # (MLPROF_OUTPUT); the command's, compiled apart, does not.
            macros = mb.DEFINES + [("MLPROF_WITH_SERVE", None)]
            if autostart:
                macros = macros + [("MLPROF_AUTOSTART", None)]
            return cc.compile([src], output_dir=os.path.join(
                                  self.build_temp, "lib" if autostart else ""),
                              macros=macros,
                              include_dirs=mb.INCLUDE_DIRS + [generated],
                              extra_postargs=mb.CFLAGS + http_cflags +
                              zstd_cflags + unwind_cflags)[0]

        every = mb.ext_sources() + recording + cli
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as ex:
            obj = dict(zip(every, ex.map(compile_one, every)))
            lib = list(ex.map(lambda s: compile_one(s, True),
                              recording + preload))
        out = os.path.dirname(self.get_ext_fullpath(ext.name))
        cc.link_shared_object([obj[s] for s in mb.ext_sources()],
                              self.get_ext_fullpath(ext.name),
                              libraries=mb.LIBS)
        soname = "libmlprof.so." + mb.version().split(".")[0]
        cc.link_shared_object(lib + [obj[s] for s in lower], "libmlprof.so",
                              output_dir=os.path.join(out, "_lib"),
                              libraries=mb.LIBS,
                              extra_postargs=["-Wl,-soname," + soname] +
                              unwind_libs)
        cc.link_executable([obj[s] for s in cli + core + recording + lower],
                           "mlprof", output_dir=os.path.join(out, "_bin"),
                           libraries=mb.LIBS,
                           extra_postargs=http_libs + zstd_libs +
                           unwind_libs)


setup(
    version=mb.version(),
    # The sources named here are the own ones; build_extension adds the rest.
    ext_modules=[Extension("mlprof._mlprof", sources=mb.EXT_OWN)],
    cmdclass={"build_ext": BuildMlprof},
)
