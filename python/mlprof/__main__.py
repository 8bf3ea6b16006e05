"""python -m mlprof run [OPTIONS] script.py ARGS...

The same as `mlprof run [OPTIONS] -- python script.py ARGS...` with this
Python: every process of the script writes a profile, and the report is
printed at the end. Also `python -m mlprof run -m module ARGS...`. Other
subcommands (report, trace) are handed to the `mlprof` command as they are.
The `mlprof` command is looked up in $MLPROF_CLI, next to the source tree the
package was built from (build/mlprof), then on PATH."""
import os
import shutil
import sys

from . import _mlprof

USAGE = """usage: python -m mlprof run [mlprof run options] script.py [ARGS...]
       python -m mlprof run [mlprof run options] -m module [ARGS...]
       python -m mlprof report|trace ...   (as the mlprof command)

Runs the script under `mlprof run` with this Python ({python}).
mlprof run options: -o DIR, --flush-ms N, --memory-mb N, -q, --no-torch,
--layers (see mlprof run --help).
"""

# Options of `mlprof run` that take a value.
VALUE_OPTS = {"-o", "--output", "--flush-ms", "--memory-mb",
              "--sample-ms", "--sample-interval"}


def find_cli():
    """Path of the mlprof command, or None."""
    env = os.environ.get("MLPROF_CLI")
    if env:
        return env if os.access(env, os.X_OK) else None
    root = _mlprof.SOURCE_ROOT
    if root:
        for b in ("build", "build-release"):
            p = os.path.join(root, b, "mlprof")
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    return shutil.which("mlprof")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE.format(python=sys.executable))
        return 0 if argv else 2
    cli = find_cli()
    if cli is None:
        sys.stderr.write(
            "python -m mlprof: the `mlprof` command was not found: build it "
            "(make, in the mlprof source tree), put it on PATH, or set "
            "MLPROF_CLI to its path\n")
        return 127
    cmd, rest = argv[0], argv[1:]
    if cmd != "run":
        os.execv(cli, [cli, cmd] + rest)
    opts = []
    i = 0
    while i < len(rest):
        a = rest[i]
        if a == "--":
            i += 1
            break
        if a in VALUE_OPTS and i + 1 < len(rest):
            opts += [a, rest[i + 1]]
            i += 2
            continue
        if a.startswith("-") and a != "-m" and a != "-c":
            opts.append(a)
            i += 1
            continue
        break
    target = rest[i:]
    if not target:
        sys.stderr.write("python -m mlprof run: no script given\n" +
                         USAGE.format(python=sys.executable))
        return 2
    if target[0] not in ("-m", "-c") and not os.path.exists(target[0]):
        sys.stderr.write("python -m mlprof run: %s: no such file\n"
                         % target[0])
        return 2
    env = dict(os.environ)
    # The child Python must find this package as this one does, and load
    # this package's start-up module (mlprof/_startup/sitecustomize.py).
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["MLPROF_PY_STARTUP"] = os.path.join(here, "mlprof", "_startup")
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"]
                                if env.get("PYTHONPATH") else "")
    os.execve(cli, [cli, "run"] + opts + ["--", sys.executable] + target, env)


if __name__ == "__main__":
    sys.exit(main())
