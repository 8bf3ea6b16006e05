"""python -m mlprof run [OPTIONS] script.py ARGS...

The same as `mlprof run [OPTIONS] -- python script.py ARGS...` with this
Python: every process of the script writes a profile, and the report is
printed at the end. Also `python -m mlprof run -m module ARGS...`. Other
subcommands (report, trace, html, ...) are handed to the `mlprof` command as
they are. The command is the one installed in this package
(mlprof/_bin/mlprof), or $MLPROF_CLI. `command` is the `mlprof` console
script: the packaged command itself."""
import os
import sys

USAGE = """usage: python -m mlprof run [mlprof run options] script.py [ARGS...]
       python -m mlprof run [mlprof run options] -m module [ARGS...]
       python -m mlprof report|trace|... (as the mlprof command)
       python -m mlprof memory-snapshot FILE (a CUDA memory snapshot)

Runs the script under `mlprof run` with this Python ({python}).
mlprof run options: -o DIR, --flush-ms N, --memory-mb N, -q, --no-torch,
--layers (see mlprof run --help).
Python options: --calls (every Python call a zone), --lines MODULE:FUNCTION
(that function's line timings; repeatable; MODULE may be the script's name).
"""

# Options of `mlprof run` that take a value.
VALUE_OPTS = {"-o", "--output", "--flush-ms", "--memory-mb",
              "--sample-ms", "--sample-interval"}

PACKAGE = os.path.dirname(os.path.abspath(__file__))


def find_cli():
    """Path of the mlprof command: $MLPROF_CLI, else the packaged one."""
    return os.environ.get("MLPROF_CLI") or \
        os.path.join(PACKAGE, "_bin", "mlprof")


def _exec(argv, env=None):
    """Runs the mlprof command in place of this process; returns 127 with a
    message when it cannot be run."""
    cli = find_cli()
    try:
        os.execve(cli, [cli] + argv, os.environ if env is None else env)
    except OSError as e:
        sys.stderr.write("mlprof: cannot run the mlprof command %s: %s "
                         "(reinstall the package, or set MLPROF_CLI)\n"
                         % (cli, e.strerror))
        return 127


def command():
    """The `mlprof` console script."""
    if sys.argv[1:2] == ["memory-snapshot"]:
        return _memory_snapshot(sys.argv[2:])
    return _exec(sys.argv[1:])


def _memory_snapshot(argv):
    """mlprof memory-snapshot: read here, in Python (mlprof.cuda_memory),
    since the snapshot is a pickle."""
    from .cuda_memory import main as snapshot_main
    return snapshot_main(argv)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE.format(python=sys.executable))
        return 0 if argv else 2
    if argv[0] == "_traced":
        return run_traced(argv[1:])
    cmd, rest = argv[0], argv[1:]
    if cmd == "memory-snapshot":
        return _memory_snapshot(rest)
    if cmd != "run":
        return _exec(argv)
    opts = []
    env = dict(os.environ)
    i = 0
    while i < len(rest):
        a = rest[i]
        if a == "--":
            i += 1
            break
        if a == "--calls":
            env["MLPROF_CALLS"] = "1"
            i += 1
            continue
        if a == "--lines" and i + 1 < len(rest):
            env["MLPROF_LINES"] = ",".join(
                filter(None, [env.get("MLPROF_LINES"), rest[i + 1]]))
            i += 2
            continue
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
    if env.get("MLPROF_CALLS") or env.get("MLPROF_LINES"):
        target = ["-m", "mlprof", "_traced"] + target
    # The child Python must find this package as this one does, and load
    # this package's start-up module (mlprof/_startup/sitecustomize.py).
    here = os.path.dirname(PACKAGE)
    env["MLPROF_PY_STARTUP"] = os.path.join(PACKAGE, "_startup")
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"]
                                if env.get("PYTHONPATH") else "")
    return _exec(["run"] + opts + ["--", sys.executable] + target, env)


def run_traced(argv):
    """python -m mlprof _traced script.py ARGS | -m module ARGS: runs the
    program as the main module with the tracers MLPROF_CALLS and
    MLPROF_LINES ask for (mlprof._start_from_env) running."""
    import pkgutil  # noqa: F401  runpy's run_path imports it (and typing):
    import runpy    # imported here, they are not traced as the program's
    import mlprof
    if not argv or (argv[0] in ("-m", "-c") and len(argv) < 2):
        sys.stderr.write("python -m mlprof _traced: no program given\n")
        return 2
    if argv[0] == "-m":
        main_name = argv[1].rpartition(".")[2]
    else:
        main_name = os.path.splitext(os.path.basename(argv[0]))[0]
    # MODULE:FUNCTION naming the program itself means its __main__.
    os.environ["MLPROF_LINES"] = ",".join(mlprof._main_names(
        os.environ.get("MLPROF_LINES", "").split(","), main_name))
    mlprof._start_from_env()
    if argv[0] == "-m":
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c"] + argv[2:]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
