"""Known shares for the dashboard's stack views (tests/python/test_html_stacks.py,
tests/browser/test_stacks_view.py): per step, 20%, 30% and 50% of the
spinning in twenty(), thirty() and fifty(), the first two in zone "small",
the last in zone "big"; a thread that sleeps all along (wall time, no CPU).

usage: stack_shares.py PROFILE [STEPS] [HZ]"""
import sys
import threading
import time

import mlprof


def spin(t):
    end = time.perf_counter() + t
    while time.perf_counter() < end:
        pass


def twenty():
    spin(0.02)


def thirty():
    spin(0.03)


def fifty():
    spin(0.05)


def sleeper(prof, stop):
    prof.thread_name("sleeper")
    while not stop.is_set():
        time.sleep(0.1)


def main():
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    hz = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    prof = mlprof.Profiler(sys.argv[1], stacks=hz).start()
    stop = threading.Event()
    t = threading.Thread(target=sleeper, args=(prof, stop), name="sleeper")
    t.start()
    for _ in range(steps):
        prof.step()
        with prof.zone("small"):
            twenty()
            thirty()
        with prof.zone("big"):
            fifty()
    stop.set()
    t.join()
    prof.stop()
    mlprof._mlprof.shutdown()


if __name__ == "__main__":
    main()
