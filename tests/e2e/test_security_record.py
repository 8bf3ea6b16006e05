"""The recording library run as root in hostile surroundings: links planted
where its profiles go, a setuid program's unprivileged caller, a program that
takes the profile's descriptor, a disk that fills up (docs/guide.md,
"Running as root")."""
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import BUILD, program, report_json, zone

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: other users, setuid, mount")


@pytest.fixture
def tmpdirs():
    """Makes directories under /tmp (pytest's own are private to root, and
    these must be reachable by another user); removes them afterwards."""
    made = []

    def make(mode):
        d = tempfile.mkdtemp(dir="/tmp", prefix="mlprof-sec-")
        os.chmod(d, mode)
        made.append(d)
        return d
    yield make
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


def root_only_file(make):
    """A root-owned file (0600, in a 0700 directory) and its content."""
    path = os.path.join(make(0o700), "secret")
    with open(path, "w") as f:
        f.write("root's data\n")
    os.chmod(path, 0o600)
    return path


def probe_env(**kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLPROF_")}
    env.update(MLPROF_SAMPLE_MS="0", **kw)
    return env


def test_links_planted_in_a_sticky_directory_are_not_followed(tmpdirs):
    shared = tmpdirs(0o1777)
    secret = root_only_file(tmpdirs)
    with open("/proc/sys/kernel/ns_last_pid") as f:
        last = int(f.read())
    plant = ("import os, sys\n"
             "for pid in range(int(sys.argv[1]) + 1, int(sys.argv[1]) + 2001):\n"
             "    os.symlink(sys.argv[2], f'{sys.argv[3]}/record_probe-{pid}.mlprof')\n")
    subprocess.run(NOBODY + ["/usr/bin/python3", "-c", plant, str(last), secret,
                             shared], check=True, timeout=60)
    proc = subprocess.Popen([program("record_probe"), "zones", "1000"],
                            env=probe_env(MLPROF_OUTPUT=shared + "/"),
                            stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert last < proc.pid <= last + 2000, "the pids moved on too fast"
    with open(secret, "rb") as f:
        assert f.read() == b"root's data\n"
    planted = os.path.join(shared, f"record_probe-{proc.pid}.mlprof")
    assert os.readlink(planted) == secret
    profile = os.path.join(shared, f"record_probe-{proc.pid}.1.mlprof")
    assert f"writing {profile}" in err
    assert not os.path.islink(profile)
    assert zone(report_json(profile), "z")["count"] == 1000


def test_setuid_program_ignores_its_callers_environment(tmpdirs):
    secret = root_only_file(tmpdirs)
    bindir = tmpdirs(0o755)
    setuid = os.path.join(bindir, "record_probe")
    shutil.copy(program("record_probe"), setuid)
    os.chown(setuid, 0, 0)
    os.chmod(setuid, 0o4755)
    out = os.path.join(bindir, "out")
    os.mkdir(out, 0o755)
    marker = os.path.join(tmpdirs(0o1777), "marker")
    env = probe_env(MLPROF_OUTPUT=secret,
                    MLPROF_NVML_LIB=os.path.join(BUILD, "libnvml_marker.so"),
                    MLPROF_TEST_MARKER=marker)
    r = subprocess.run(NOBODY + [setuid, "privileged", out], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with open(secret, "rb") as f:
        assert f.read() == b"root's data\n"
    assert not os.path.exists(marker)
    profile = r.stdout.strip()
    assert os.path.dirname(profile) == out
    rep = report_json(profile)
    assert zone(rep, "tick")["count"] == 200
    nvml = [s for s in rep["resources"]["sources"] if s["name"] == "nvml"]
    assert nvml and "libnvidia-ml.so.1" in nvml[0]["reason"], nvml


def test_daemon_taking_the_profiles_descriptor_keeps_its_file(tmp_path):
    own = tmp_path / "daemon.log"
    path = tmp_path / "daemon.mlprof"
    r = subprocess.run([program("record_probe"), "daemon", str(own), "500"],
                       env=probe_env(MLPROF_OUTPUT=str(path)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert own.read_bytes() == b"daemon line 1\ndaemon line 2\n"
    rep = report_json(path)
    assert zone(rep, "before")["count"] == 500
    assert zone(rep, "after")["count"] == 500
    proc = rep["processes"][0]
    assert proc["clean_end"] is True
    assert proc["read"]["damaged_chunks"] == 0


def test_full_disk_losses_are_counted(tmpdirs):
    small = tmpdirs(0o755)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", small],
                       capture_output=True, text=True)
    if m.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {m.stderr.strip()}")
    try:
        path = os.path.join(small, "full.mlprof")
        zones = 600000  # about 3 MB of spans for 1 MB of room
        r = subprocess.run([program("record_probe"), "zones", str(zones)],
                           env=probe_env(MLPROF_OUTPUT=path),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "No space left on device" in r.stderr
        rep = report_json(path)
        proc = rep["processes"][0]
        # All may be lost: the first write can come after the last zone.
        kept = sum(z["count"] for z in rep["zones"] if z["name"] == "z")
        assert proc["clean_end"] is True
        assert proc["dropped"] > 0
        assert kept + proc["dropped"] == zones, (kept, proc["dropped"])
        assert f"{proc['dropped']} events dropped" in \
            subprocess.run([os.path.join(BUILD, "mlprof"), "report", path],
                           capture_output=True, text=True).stdout
    finally:
        subprocess.run(["umount", small], check=False)
