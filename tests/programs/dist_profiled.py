"""A training program of tests/programs (dist_straggler.py by default,
dist_fsdp2.py) under the Python Profiler: a step mark after each step.

    dist_profiled.py OUTPUT_DIR STEPS SLOW DELAY_MS [MODULE]"""
import importlib
import sys

import mlprof

program = importlib.import_module(sys.argv[5] if len(sys.argv) > 5
                                  else "dist_straggler")
with mlprof.Profiler(output=sys.argv[1] + "/") as prof:
    program.main(*map(int, sys.argv[2:5]), on_step=prof.step)
