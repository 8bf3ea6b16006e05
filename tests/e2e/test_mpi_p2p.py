"""Point-to-point waiting (src/analyze/dist.c): tests/programs/mpi_p2p.c
under `mlprof run` with each MPI of tests/e2e/mpi_flavours.py, on a ring of 4
ranks (MPICH's: one per core, at most 4). Rank 1 sends 30 ms late in each of
10 steps: its receiver waits about that long a step in MPI_Recv (or in the
MPI_Wait of an MPI_Irecv), the report names rank 1 as the late sender, and
the link's bandwidth is over its transfer, not the waiting.

Under load the ranks are woken late and take turns in their MPI calls (an
oversubscribed Open MPI yields the CPU while it waits), so each rank's
waiting is checked against the spans the ranks recorded, not against the
30 ms the sender slept."""
import json
import subprocess

import pytest

from conftest import MLPROF
from mpi_flavours import FLAVOURS
from test_mpi import job_trace, ranks

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
    want = recorded_waits(out, mpi, d, recv)
    for rank in range(np):
        assert abs(waits[rank] - want[rank]) < 1000 * STEPS, (waits, want)
    # Rank 1 sent 30 ms late each step: its receiver waited most of the
    # time (a loaded machine may have delayed the others too).
    assert want[receiver] == max(want.values()) > 0.5 * STEPS * LATE_MS * 1e6
    links = {(l["src"], l["dst"]): l for l in d["links"]}
    assert sorted(links) == sorted((r, (r + 1) % np) for r in range(np))
    link = links[(late, receiver)]
    assert (link["count"], link["matched"], link["bytes"]) == \
        (STEPS, STEPS, STEPS * 1000)
    want = STEPS * LATE_MS * 1e6
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


def recorded_waits(out, mpi, d, recv):
    """{rank: ns} each rank waited for its sender, from the spans in the
    job's trace on the clocks the report states (the trace aligns each rank
    by the offset it measured at MPI_Init, which the report narrows): each
    step, from the start of the call it blocked in (MPI_Recv, or MPI_Wait
    for an MPI_Irecv) to its sender's MPI_Send, within that call."""
    np = len(d["ranks"])
    init = {r: int(meta["dist.clock.init"].split()[0])
            for r, (_, _, meta) in ranks(out, mpi, np, "mpi_p2p").items()}
    shift = {x["rank"]: (x["offset_ns"] - init[x["rank"]]) / 1000
             for x in d["ranks"]}
    events, rank_of = job_trace(out)
    spans = {(r, n): [] for r in range(np) for n in ("MPI_Send", "blocked")}
    blocked = "MPI_Recv" if recv == "recv" else "MPI_Wait"
    for e in events:
        if (e["ph"] == "X" and e["pid"] in rank_of and e["tid"] < 2**31
                and e["name"] in ("MPI_Send", blocked)):
            r = rank_of[e["pid"]]
            b = e["ts"] + shift[r]
            key = (r, "MPI_Send" if e["name"] == "MPI_Send" else "blocked")
            spans[key].append((b, b + e["dur"]))
    waits = {}
    for r in range(np):
        sends = sorted(spans[((r + np - 1) % np, "MPI_Send")])
        waits[r] = sum(min(max(0, s - b), e - b) for (s, _), (b, e) in
                       zip(sends, sorted(spans[(r, "blocked")]))) * 1000
    return waits
