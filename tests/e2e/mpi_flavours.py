"""The MPIs the MPI tests run under, one per ABI mlprof knows
(src/intercept/mpi.c): Open MPI, and MPICH for the MPICH ABI. Each has its
own launcher, called by its Debian name so that which MPI is the default
`mpirun` does not matter, its build of the test programs (CMakeLists.txt:
mpi_ops with Open MPI, mpi_ops_mpich with MPICH) and the variable in which
its launcher gives each rank its rank."""
import os
import shutil
import subprocess

import pytest

from conftest import program


class Flavour:
    def __init__(self, name, launcher, flags, suffix, env, rank_var, spins):
        self.name, self.launcher, self.flags = name, launcher, flags
        self.suffix, self.rank_var, self.spins = suffix, rank_var, spins
        self.env = dict(os.environ, **env)

    def program(self, base):
        """The path of test program `base` built with this MPI."""
        return program(base + self.suffix)

    def mpirun(self, np=4):
        return [self.launcher, "-np", str(np), *self.flags]

    def lockstep_np(self):
        """How many ranks (at most 4) leave a barrier together. A waiting
        MPICH rank spins (an oversubscribed Open MPI one yields): with more
        ranks than cores they leave it a scheduler time slice apart."""
        n = min(4, os.cpu_count() or 1) if self.spins else 4
        if n < 2:
            pytest.skip("one core: MPICH's ranks would take turns")
        return n

    def run(self, cmd):
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True,
                           timeout=300)
        # MPICH's launcher reports a rank's death on stdout.
        assert r.returncode == 0, (r.returncode, r.stdout[-3000:],
                                   r.stderr[-3000:])

    def require(self, *programs):
        """Fails the test when this MPI or one of its programs is absent:
        make check installs both MPIs and builds the programs for each, so
        an absence is a broken set-up, never a reason to skip."""
        if not shutil.which(self.launcher):
            pytest.fail(f"no {self.launcher} "
                        "(scripts/install-deps.sh check installs it)")
        for p in programs:
            if not os.path.exists(self.program(p)):
                pytest.fail(f"{self.program(p)} not built (was the build "
                            "configured before MPI was installed? make "
                            "configures again when Debian's packages change)")


OPEN_MPI = Flavour("openmpi", "mpirun.openmpi", ["--oversubscribe"], "",
                   {"OMPI_ALLOW_RUN_AS_ROOT": "1",
                    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                    "OMPI_MCA_btl": "self,vader,tcp"},
                   "OMPI_COMM_WORLD_RANK", spins=False)
MPICH = Flavour("mpich", "mpirun.mpich", [], "_mpich", {}, "PMI_RANK",
                spins=True)
FLAVOURS = [pytest.param(f, id=f.name) for f in (OPEN_MPI, MPICH)]
