"""An allocation-heavy Python workload for bench_memory.py: 100000
short-lived buffers of 520 bytes to 3.5 KB (above pymalloc's 512-byte
limit, so each is a malloc and a free), buffers of every size from 600
bytes to 256 KiB, lists and dicts that grow (realloc), strings joined,
JSON encoded and decoded. Imports nothing of mlprof.

usage: python bench/alloc_heavy.py ROUNDS
Prints on its last line `cpu_ns N`: the process CPU time of the ROUNDS
rounds after one of warm-up (all threads: a profiler's count)."""
import json
import sys
import time


def one_round():
    keep = []
    n = 0
    for i in range(100000):  # a malloc and a free each
        n += len(bytes(520 + i % 3000))
    for i in range(4000):
        b = bytearray(600 + (i * 7919) % (256 << 10))
        if i % 8 == 0:
            keep.append(b)
    d = {}
    for i in range(20000):
        d["key%d" % i] = [i] * (i % 50)
    s = "".join("line %d of the report\n" % i for i in range(20000))
    doc = json.loads(json.dumps({"rows": [{"i": i, "name": "x" * (i % 300)}
                                          for i in range(5000)]}))
    return n + len(keep) + len(d) + len(s) + len(doc["rows"])


def main():
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.exit("usage: python alloc_heavy.py ROUNDS")
    one_round()
    t0 = time.process_time_ns()
    for _ in range(int(sys.argv[1])):
        one_round()
    print("cpu_ns %d" % (time.process_time_ns() - t0))


if __name__ == "__main__":
    main()
