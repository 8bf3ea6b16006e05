"""Point-to-point waiting (src/analyze/dist.c): tests/programs/mpi_p2p.c
under `mlprof run` with each MPI of tests/e2e/mpi_flavours.py, on a ring of 4
ranks (MPICH's: one per core, at most 4). Rank 1 sends 30 ms late in each of
10 steps: its receiver waits about that long a step in MPI_Recv (or in the
MPI_Wait of an MPI_Irecv), the report names rank 1 as the late sender, and
the link's bandwidth is over its transfer, not the waiting."""
import json
import subprocess

import pytest

from conftest import MLPROF
from mpi_flavours import FLAVOURS

STEPS, LATE_MS = 10, 30


@pytest.mark.parametrize("mpi", FLAVOURS)
@pytest.mark.parametrize("recv", ["recv", "irecv"])
def test_late_sender_named(tmp_path, recv, mpi):
    mpi.require("mpi_p2p")
    out = str(tmp_path / "run")
    np = mpi.lockstep_np()
    late, receiver = 1, 2 % np
    mpi.run([MLPROF, "run", "-q", "-o", out, "--", *mpi.mpirun(np),
             mpi.program("mpi_p2p"), str(STEPS), str(LATE_MS), recv])
    r = subprocess.run([MLPROF, "report", "--format", "json", out],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    d = report["distributed"]
    waits = {x["rank"]: x["p2p_wait_ns"] for x in d["ranks"]}
    want = STEPS * LATE_MS * 1e6
    assert abs(waits[receiver] - want) < 0.2 * want, waits
    for rank in range(np):
        if rank != receiver:
            assert waits[rank] < 0.1 * want, waits
    links = {(l["src"], l["dst"]): l for l in d["links"]}
    assert sorted(links) == sorted((r, (r + 1) % np) for r in range(np))
    link = links[(late, receiver)]
    assert (link["count"], link["matched"], link["bytes"]) == \
        (STEPS, STEPS, STEPS * 1000)
    assert link["wait_ns"] == pytest.approx(waits[receiver], rel=0.01)
    # The transfer excludes the waiting: far under the 30 ms a message (a
    # spinning MPICH receiver, taken off its core on a busy machine, may see
    # a message a scheduler time slice late: still far under).
    assert link["time_ns"] < (0.5 if mpi.spins else 0.1) * want, link
    [f] = [f for f in report["findings"] if f["type"] == "late_sender"]
    assert f"rank 1 sends late: rank {receiver} waited" in f["summary"], f
    ev = f["evidence"]
    assert (ev["src_rank"], ev["dst_rank"]) == (late, receiver)
    assert not [f for f in report["findings"] if f["type"] == "slow_link"]
    text = subprocess.run([MLPROF, "report", out], capture_output=True,
                          text=True, timeout=120)
    assert text.returncode == 0 and "receiver waiting" in text.stdout
