#!/usr/bin/env python3
"""The PCIe anchor for shared-memory sorts: pinned host-to-device,
device-to-host and duplex (both at once, on two streams) copy bandwidth of
every GPU alone, then of every GPU at once. Needs CuPy. One JSON line per
figure, medians over --reps copies of --mib MiB."""
import argparse
import json
import statistics
import threading

import cupy as cp


class Gpu:
    def __init__(self, index, nbytes):
        self.index = index
        self.nbytes = nbytes
        with cp.cuda.Device(index):
            self.dev_up = cp.cuda.alloc(nbytes)
            self.dev_down = cp.cuda.alloc(nbytes)
            self.up_stream = cp.cuda.Stream(non_blocking=True)
            self.down_stream = cp.cuda.Stream(non_blocking=True)
        self.host_up = cp.cuda.alloc_pinned_memory(nbytes)
        self.host_down = cp.cuda.alloc_pinned_memory(nbytes)

    def copy(self, up, down):
        """Seconds for one upload and/or one download, started together."""
        with cp.cuda.Device(self.index):
            start = cp.cuda.Event()
            ends = []
            start.record(self.up_stream)
            self.down_stream.wait_event(start)
            if up:
                self.dev_up.copy_from_host_async(
                    self.host_up.ptr, self.nbytes, self.up_stream)
                ends.append(cp.cuda.Event())
                ends[-1].record(self.up_stream)
            if down:
                self.dev_down.copy_to_host_async(
                    self.host_down.ptr, self.nbytes, self.down_stream)
                ends.append(cp.cuda.Event())
                ends[-1].record(self.down_stream)
            for e in ends:
                e.synchronize()
            return max(cp.cuda.get_elapsed_time(start, e) for e in ends) / 1e3


def measure(gpu, up, down, reps):
    gpu.copy(up, down)  # warm
    secs = statistics.median(gpu.copy(up, down) for _ in range(reps))
    moved = gpu.nbytes * (int(up) + int(down))
    return moved / secs


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    nbytes = args.mib << 20
    gpus = [Gpu(i, nbytes) for i in range(cp.cuda.runtime.getDeviceCount())]
    for g in gpus:
        row = {"gpu": g.index, "alone": True, "mib": args.mib}
        row["h2d_bytes_per_s"] = measure(g, True, False, args.reps)
        row["d2h_bytes_per_s"] = measure(g, False, True, args.reps)
        row["duplex_bytes_per_s"] = measure(g, True, True, args.reps)
        print(json.dumps(row), flush=True)
    if len(gpus) > 1:
        # Every GPU at once: uploads only, downloads only, then both ways.
        row = {g.index: {"gpu": g.index, "alone": False, "mib": args.mib}
               for g in gpus}
        for name, up, down in (("h2d", True, False), ("d2h", False, True),
                               ("duplex", True, True)):
            def run(g, name=name, up=up, down=down):
                row[g.index][name + "_bytes_per_s"] = measure(
                    g, up, down, args.reps)

            threads = [threading.Thread(target=run, args=(g,)) for g in gpus]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        for g in gpus:
            print(json.dumps(row[g.index]), flush=True)


if __name__ == "__main__":
    main()
