"""In-tree PEP 517 backend for the mlprof package.

It compiles the extension with the compiler and flags this Python was built
with (sysconfig) and writes the wheel itself, so `pip install ./python`
needs no network and no setuptools or wheel package, with or without build
isolation."""
import base64
import concurrent.futures
import hashlib
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlprof_build as mb  # noqa: E402

NAME = "mlprof"


def _tags():
    impl = "cp%d%d" % sys.version_info[:2]
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return impl, impl, plat


def _dist_info(version):
    return "%s-%s.dist-info" % (NAME, version)


def _metadata(version):
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
            "Summary: Low-overhead profiler for ML pipelines (C core, "
            "CPython API)\nRequires-Python: >=3.9\n" % (NAME, version))


def _wheel_file(tag):
    return ("Wheel-Version: 1.0\nGenerator: mlprof build_backend\n"
            "Root-Is-Purelib: false\nTag: %s-%s-%s\n" % tag)


def _compile(tmp):
    """Builds _mlprof.so in tmp; returns its path."""
    cv = sysconfig.get_config_var
    cc = shlex.split(os.environ.get("CC") or cv("CC") or "cc")
    cflags = shlex.split(cv("CFLAGS") or "") + shlex.split(cv("CCSHARED") or
                                                             "-fPIC")
    incs = ["-I" + d for d in mb.INCLUDE_DIRS]
    incs += ["-I" + sysconfig.get_paths()["include"]]
    plat_inc = sysconfig.get_paths().get("platinclude")
    if plat_inc:
        incs.append("-I" + plat_inc)
    defs = ["-D%s" % k if v is None else "-D%s=%s" % (k, v)
            for k, v in mb.DEFINES]
    jobs = []
    for i, src in enumerate(mb.c_sources()):
        obj = os.path.join(tmp, "%03d-%s.o" % (i, os.path.basename(src)[:-2]))
        jobs.append((src, obj, cc + cflags + mb.CFLAGS + defs + incs +
                     ["-c", src, "-o", obj]))

    def run(job):
        r = subprocess.run(job[2], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        return job, r

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        for job, r in ex.map(run, jobs):
            out = r.stdout.decode(errors="replace")
            if out:
                sys.stderr.write(out)
            if r.returncode:
                raise SystemExit("mlprof: compiling %s failed:\n%s"
                                 % (job[0], " ".join(job[2])))
    so = os.path.join(tmp, "_mlprof" + (cv("EXT_SUFFIX") or ".so"))
    ld = shlex.split(os.environ.get("LDSHARED") or cv("LDSHARED") or
                     "cc -shared")
    cmd = ld + [o for _, o, _ in jobs] + ["-o", so] + \
        ["-l" + lib for lib in mb.LIBS]
    r = subprocess.run(cmd)
    if r.returncode:
        raise SystemExit("mlprof: linking failed: " + " ".join(cmd))
    return so


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return "%s,sha256=%s,%d" % (arcname, digest.rstrip(b"=").decode(),
                                len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    version = mb.version()
    d = os.path.join(metadata_directory, _dist_info(version))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(_metadata(version))
    with open(os.path.join(d, "WHEEL"), "w") as f:
        f.write(_wheel_file(_tags()))
    return os.path.basename(d)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    mb.check_tree()
    version = mb.version()
    tag = _tags()
    name = "%s-%s-%s-%s-%s.whl" % ((NAME, version) + tag)
    pkg = os.path.join(mb.HERE, "mlprof")
    with tempfile.TemporaryDirectory() as tmp:
        so = _compile(tmp)
        files = []
        # The package's modules, and the start-up module of `mlprof run`.
        for sub in ("", "_startup/"):
            for fn in sorted(os.listdir(os.path.join(pkg, sub))):
                if fn.endswith(".py"):
                    with open(os.path.join(pkg, sub, fn), "rb") as f:
                        files.append(("mlprof/" + sub + fn, f.read()))
        with open(so, "rb") as f:
            files.append(("mlprof/" + os.path.basename(so), f.read()))
        di = _dist_info(version)
        files.append((di + "/METADATA", _metadata(version).encode()))
        files.append((di + "/WHEEL", _wheel_file(tag).encode()))
        files.append((di + "/top_level.txt", b"mlprof\n"))
        record = [_record_line(a, d) for a, d in files]
        record.append(di + "/RECORD,,")
        files.append((di + "/RECORD", ("\n".join(record) + "\n").encode()))
        path = os.path.join(wheel_directory, name)
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for arc, data in files:
                info = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = (0o755 if arc.endswith(".so") else
                                      0o644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, data)
    return name

