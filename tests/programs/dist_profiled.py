"""dist_straggler.py under the Python Profiler: a step mark after each step.

    dist_profiled.py OUTPUT_DIR STEPS SLOW DELAY_MS"""
import sys

import dist_straggler
import mlprof

with mlprof.Profiler(output=sys.argv[1] + "/") as prof:
    dist_straggler.main(*map(int, sys.argv[2:5]), on_step=prof.step)
