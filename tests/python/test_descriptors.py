"""The Python package loads libmlprof itself (no preloading, nothing of the C
library interposed): the program still sees only its own descriptors, and
one that closes them all keeps every byte of its files (docs/guide.md,
"Descriptors")."""
import subprocess
import sys
import textwrap

from conftest import child_env

SCRIPT = textwrap.dedent("""
    import os, sys, time, mlprof
    def mine():
        out = []
        for fd in range(os.sysconf("SC_OPEN_MAX")):
            try:
                os.fstat(fd)
                out.append(fd)
            except OSError:
                pass
        return out
    before = mine()
    p = mlprof.Profiler(output=sys.argv[1], sample_interval=0.001,
                        flush_ms=1)
    p.start()
    assert mine() == before, (mine(), before)
    data = bytes(range(256)) * 256
    for r in range(20):
        with p.zone("round"):
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            fd = os.open(sys.argv[2], os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            for i in range(0, len(data), 1024):
                os.write(fd, data[i:i + 1024])
                time.sleep(0.0001)
            os.lseek(fd, 0, os.SEEK_SET)
            back = os.read(fd, len(data) + 1)
            assert back == data, (r, len(back))
            assert mine() == [0, 1, 2, fd], (r, mine())
            os.close(fd)
    p.stop()
    print("ok", [z["count"] for z in p.summary()["zones"]
                 if z["name"] == "round"])
""")


def test_package_keeps_its_descriptors_out_of_the_programs_way(tmp_path):
    script = tmp_path / "fds.py"
    script.write_text(SCRIPT)
    r = subprocess.run([sys.executable, script, tmp_path / "p.mlprof",
                        tmp_path / "mine"], capture_output=True, text=True,
                       env=child_env(), timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == "ok [20]\n", r.stdout
