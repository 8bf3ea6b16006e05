"""Point-to-point waiting (src/analyze/dist.c): Open MPI, 4 ranks of
tests/programs/mpi_p2p.c under `mlprof run`. Rank 1 sends 30 ms late in each
of 10 steps: rank 2, its receiver, waits about that long a step in MPI_Recv
(or in the MPI_Wait of an MPI_Irecv), the report names rank 1 as the late
sender, and the link's bandwidth is over its transfer, not the waiting."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import MLPROF, program

MPI_P2P = program("mpi_p2p")
pytestmark = pytest.mark.skipif(
    not shutil.which("mpirun") or not os.path.exists(MPI_P2P),
    reason="no Open MPI (scripts/install-deps.sh installs it)")

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader,tcp")
STEPS, LATE_MS = 10, 30


@pytest.mark.parametrize("recv", ["recv", "irecv"])
def test_late_sender_named(tmp_path, recv):
    out = str(tmp_path / "run")
    r = subprocess.run([MLPROF, "run", "-q", "-o", out, "--", "mpirun", "-np",
                        "4", "--oversubscribe", MPI_P2P, str(STEPS),
                        str(LATE_MS), recv],
                       env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([MLPROF, "report", "--format", "json", out],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    d = report["distributed"]
    waits = {x["rank"]: x["p2p_wait_ns"] for x in d["ranks"]}
    want = STEPS * LATE_MS * 1e6
    assert abs(waits[2] - want) < 0.2 * want, waits
    for rank in (0, 1, 3):
        assert waits[rank] < 0.1 * want, waits
    links = {(l["src"], l["dst"]): l for l in d["links"]}
    assert sorted(links) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    late = links[(1, 2)]
    assert (late["count"], late["matched"], late["bytes"]) == \
        (STEPS, STEPS, STEPS * 1000)
    assert late["wait_ns"] == pytest.approx(waits[2], rel=0.01)
    # The transfer excludes the waiting: far under the 30 ms a message.
    assert late["time_ns"] < 0.1 * want, late
    [f] = [f for f in report["findings"] if f["type"] == "late_sender"]
    assert "rank 1 sends late: rank 2 waited" in f["summary"], f
    ev = f["evidence"]
    assert (ev["src_rank"], ev["dst_rank"]) == (1, 2)
    assert not [f for f in report["findings"] if f["type"] == "slow_link"]
    text = subprocess.run([MLPROF, "report", out], capture_output=True,
                          text=True, timeout=120)
    assert text.returncode == 0 and "receiver waiting" in text.stdout
