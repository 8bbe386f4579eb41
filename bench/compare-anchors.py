#!/usr/bin/env python3
"""The reference figures sortd's GPU kernels are compared with.

Runs on any machine with an NVIDIA GPU, CUDA, CuPy and PyTorch:

    python3 bench/compare-anchors.py [--sizes 16,24,26,28] [--types u32,u64]
        [--argsort-types f32,i32] [--cub-kernels] [--json anchors.jsonl]

Every figure is one JSON line on stdout (and appended to --json FILE):

  {"impl": "cub", "op": "sort_keys", "dtype": "u32", "n": 16777216,
   "segments": 1, "ms": 0.43, "ms_min": 0.42, "ms_max": 0.44, "reps": 20,
   "gkeys_per_s": 39.0, "timed": "..."}

"timed" says in words what the CUDA events enclose. Times are the median of
--reps repetitions (after --warmup untimed ones), each between two CUDA
events recorded on the stream the work runs on, the GPU synchronised after
each repetition. Inputs are random and made once per size and type.

Rows (impl / op):
  cub / sort_keys            CUB's radix sort in place: CuPy's ndarray.sort()
                             (Thrust, which hands arithmetic keys to CUB's
                             radix sort). Before each repetition, outside the
                             timed window, the input is copied into the
                             buffer that is sorted. This is the figure to
                             compare with sortd's gpu_sort_benchmark
                             "span_ms": from its first kernel's start to
                             its last one's end, the gaps between launches
                             included, as the events here include CUB's; the
                             keys start in device memory and end sorted
                             there. (Its "ms" is the sum of the kernels'
                             durations, gaps left out: not comparable.)
  cub_with_copy / sort_keys  cupy.sort(a): the same sort on a new copy of the
                             input, so one device copy of the array (and a
                             pooled allocation) is inside the window. Slower
                             than in place by about the copy; do not compare
                             it with an in-place kernel time.
  torch / sort_pairs_argsort torch.sort(x, stable=True): sorted values and
                             the indices (a key-index radix sort), written to
                             new tensors; the input stays as it is.
  torch / argsort            torch.argsort(x, stable=True): indices only.
  torch / segmented_sort     torch.sort(b, dim=1, stable=True) of a ROWSxCOLS
                             matrix: ROWS independent segments of COLS keys.
  cub / kernel               with --cub-kernels: the in-place sort's kernels
                             one by one, from PyTorch's profiler (CUPTI
                             activity records, so no events between them):
                             "kernel" (DeviceRadixSortHistogramKernel,
                             ...OnesweepKernel, Memset...), "calls" a sort,
                             "ms" all its calls in one sort (the mean over
                             --reps sorts), "ms_call_median" the median
                             call (CUB splits a pass over 2^28 keys and
                             more into two launches of unequal size). Where
                             a sort's time goes, kernel by kernel, for
                             sortd's "stages".
  cuda / copy                device-to-device copy of --copy-log2 4-byte
                             words; gbytes_per_s counts read plus write, the
                             memory-bandwidth ceiling of a pass over keys.
  cuda / h2d_pinned,         one transfer between pinned host memory and the
         d2h_pinned          device, same size: the ceiling for staging.

PyTorch has no unsigned 32/64-bit sort; --argsort-types takes f32, f64,
i32, i64. Integer keys are uniform random bits, float keys standard normal
(no NaNs).

CuPy, PyTorch and NumPy are imported only when a measurement starts, so
--help works without them; --no-torch or --no-cupy leaves out the rows that
need one.
"""
import argparse
import ctypes
import json
import re
import statistics
import sys
import time

CUPY_TYPES = {"u32": "uint32", "u64": "uint64", "i32": "int32",
              "i64": "int64", "f32": "float32", "f64": "float64"}
TORCH_TYPES = {"i32": "int32", "i64": "int64", "f32": "float32",
               "f64": "float64"}


class HelpFormatter(argparse.RawDescriptionHelpFormatter,
                    argparse.ArgumentDefaultsHelpFormatter):
    pass


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="compare-anchors.py", description=__doc__,
        formatter_class=HelpFormatter)
    ap.add_argument("--sizes", default="16,20,24,26,28",
                    help="log2 of the key counts, comma-separated")
    ap.add_argument("--types", default="u32,u64",
                    help="key types of the CUB rows: "
                    + ",".join(CUPY_TYPES))
    ap.add_argument("--argsort-types", default="f32,i32",
                    help="key types of the PyTorch rows: "
                    + ",".join(TORCH_TYPES))
    ap.add_argument("--segments", default="65536x256,16384x1024,4096x4096",
                    help="ROWSxCOLS shapes for torch's segmented sort; "
                    "empty for none")
    ap.add_argument("--copy-log2", type=int, default=28,
                    help="log2 of the 4-byte words moved by the copy and "
                    "transfer rows; 0 leaves those rows out")
    ap.add_argument("--reps", type=int, default=0,
                    help="timed repetitions per figure (0: 30 below 2^26 "
                    "keys, 10 from 2^26)")
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed repetitions before the timed ones")
    ap.add_argument("--seed", type=int, default=1, help="random seed")
    ap.add_argument("--no-cupy", action="store_true",
                    help="leave out the CUB rows (no CuPy needed)")
    ap.add_argument("--no-torch", action="store_true",
                    help="leave out the PyTorch rows (no PyTorch needed)")
    ap.add_argument("--cub-kernels", action="store_true",
                    help="also time CUB's in-place sort kernel by kernel "
                    "(needs CuPy and PyTorch)")
    ap.add_argument("--hold-mib", type=int, default=0,
                    help="allocate and fill this many MiB of device memory "
                    "before measuring and hold it to the end: another "
                    "allocation history (rows then carry hold_mib; see "
                    "bench/device-placement.sh)")
    ap.add_argument("--json", metavar="FILE",
                    help="also append every line to FILE")
    a = ap.parse_args(argv)
    try:
        a.sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    except ValueError:
        ap.error("--sizes takes log2 key counts such as 16,24,28")
    if not a.sizes or any(not 0 <= s <= 32 for s in a.sizes):
        ap.error("--sizes takes log2 key counts from 0 to 32, such as "
                 "16,24,28")
    if not 0 <= a.copy_log2 <= 32:
        ap.error("--copy-log2 takes 0 to 32")
    if a.hold_mib < 0:
        ap.error("--hold-mib takes 0 or more MiB")
    a.types = [t for t in a.types.split(",") if t]
    a.argsort_types = [t for t in a.argsort_types.split(",") if t]
    for t in a.types:
        if t not in CUPY_TYPES:
            ap.error("--types: unknown key type %r" % t)
    for t in a.argsort_types:
        if t not in TORCH_TYPES:
            ap.error("--argsort-types: %r is not one PyTorch sorts "
                     "(f32, f64, i32, i64)" % t)
    shapes = []
    for s in a.segments.split(","):
        if not s:
            continue
        try:
            rows, cols = (int(v) for v in s.lower().split("x"))
        except ValueError:
            ap.error("--segments takes ROWSxCOLS shapes such as 4096x4096")
        shapes.append((rows, cols))
    a.segments = shapes
    if a.no_cupy and a.no_torch:
        ap.error("--no-cupy and --no-torch leave nothing to measure")
    if a.cub_kernels and (a.no_cupy or a.no_torch):
        ap.error("--cub-kernels needs both CuPy and PyTorch")
    return a


class Timer:
    """Medians of CUDA-event timings around fn(), prepare() run untimed."""

    def __init__(self, event, synchronize, warmup):
        self.event = event              # () -> an event with timing enabled
        self.synchronize = synchronize  # waits for the whole device
        self.warmup = warmup

    def __call__(self, fn, reps, prepare=None):
        for _ in range(self.warmup):
            if prepare:
                prepare()
            fn()
        self.synchronize()
        times = []
        start, end = self.event(), self.event()
        for _ in range(reps):
            if prepare:
                prepare()
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(self.elapsed(start, end))
            self.synchronize()
        return {"ms": statistics.median(times), "ms_min": min(times),
                "ms_max": max(times), "reps": reps}


class CupyTimer(Timer):
    def __init__(self, cp, warmup):
        super().__init__(lambda: cp.cuda.Event(), cp.cuda.Device().synchronize,
                         warmup)
        self.cp = cp

    def elapsed(self, start, end):
        return self.cp.cuda.get_elapsed_time(start, end)


class TorchTimer(Timer):
    def __init__(self, torch, warmup):
        super().__init__(lambda: torch.cuda.Event(enable_timing=True),
                         torch.cuda.synchronize, warmup)

    def elapsed(self, start, end):
        return start.elapsed_time(end)


class Out:
    def __init__(self, path):
        self.file = open(path, "a") if path else None
        self.extra = {}  # fields every line carries

    def emit(self, **row):
        line = json.dumps({**row, **self.extra})
        print(line, flush=True)
        if self.file:
            self.file.write(line + "\n")
            self.file.flush()


def reps_for(a, log2n):
    if a.reps > 0:
        return a.reps
    return 10 if log2n >= 26 else 30


def cupy_keys(cp, dtype, n, rs):
    """n random keys of CuPy type dtype: uniform bits, or normal floats."""
    if dtype.startswith("f"):
        return rs.standard_normal(size=n, dtype=CUPY_TYPES[dtype])
    words = 2 if dtype.endswith("64") else 1
    bits = rs.randint(0, 2**32, size=n * words, dtype=cp.uint64)
    return bits.astype(cp.uint32).view(CUPY_TYPES[dtype])


def for_each_cub_input(a, cp, measure):
    """Calls measure(log2n, reps, dtype, keys, work) for each size and key
    type: random keys and a buffer of their size to sort them in, both freed
    before the next. Stops at the first nonzero return, and returns it."""
    rs = cp.random.RandomState(a.seed)
    for log2n in a.sizes:
        for dtype in a.types:
            keys = cupy_keys(cp, dtype, 1 << log2n, rs)
            work = cp.empty_like(keys)
            rc = measure(log2n, reps_for(a, log2n), dtype, keys, work)
            del keys, work
            cp.get_default_memory_pool().free_all_blocks()
            if rc:
                return rc
    return 0


def measure_cupy(a, out, cp):
    timer = CupyTimer(cp, a.warmup)

    def measure(log2n, reps, dtype, keys, work):
        n = 1 << log2n
        r = timer(lambda: work.sort(), reps,
                  prepare=lambda: cp.copyto(work, keys))
        out.emit(impl="cub", op="sort_keys", dtype=dtype, n=n, segments=1,
                 gkeys_per_s=n / r["ms"] / 1e6, **r,
                 timed="ndarray.sort() in place; input copied in before "
                 "the window")
        # The sort's answer must be right for the figure to mean
        # anything: check the last repetition's output once.
        ok = bool(cp.all(work[1:] >= work[:-1])) if n > 1 else True
        if not ok:
            print("compare-anchors: CuPy's sort left %s 2^%d unsorted"
                  % (dtype, log2n), file=sys.stderr)
            return 1
        r = timer(lambda: cp.sort(keys), reps)
        out.emit(impl="cub_with_copy", op="sort_keys", dtype=dtype, n=n,
                 segments=1, gkeys_per_s=n / r["ms"] / 1e6, **r,
                 timed="cupy.sort(a): a device copy of the input, then "
                 "the same sort")
        return 0

    return for_each_cub_input(a, cp, measure)


def kernel_name(name):
    """A CUDA kernel's name without its namespaces and template arguments."""
    m = re.search(r"(DeviceRadixSort\w+|DeviceScan\w+|Memcpy \w+|Memset)",
                  name)
    return m.group(1) if m else name[:80]


def measure_cub_kernels(a, out, cp, torch):
    from torch.profiler import profile, ProfilerActivity

    def measure(log2n, reps, dtype, keys, work):
        for _ in range(a.warmup):
            cp.copyto(work, keys)
            work.sort()
        cp.cuda.Device().synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                cp.copyto(work, keys)
                work.sort()
            cp.cuda.Device().synchronize()
        calls = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                calls.setdefault(kernel_name(e.name), []).append(
                    e.time_range.elapsed_us() / 1000)
        for kernel, ms in calls.items():
            if kernel.startswith("Memcpy"):
                continue  # the copy in, outside the sort
            ms.sort()
            out.emit(impl="cub", op="kernel", kernel=kernel, dtype=dtype,
                     n=1 << log2n, segments=1, calls=len(ms) / reps,
                     ms=sum(ms) / reps, ms_call_median=ms[len(ms) // 2],
                     reps=reps,
                     timed="ndarray.sort() in place, each CUDA activity of "
                     "the sort from PyTorch's profiler")
        return 0

    return for_each_cub_input(a, cp, measure)


def measure_copy_cupy(a, out, cp):
    n = 1 << a.copy_log2
    timer = CupyTimer(cp, a.warmup)
    src = cp.zeros(n, dtype=cp.uint32)
    dst = cp.empty_like(src)
    r = timer(lambda: cp.copyto(dst, src), 20)
    out.emit(impl="cuda", op="copy", dtype="u32", n=n, segments=1,
             gbytes_per_s=2 * 4 * n / r["ms"] / 1e6, **r,
             timed="device-to-device copy; bytes read plus written")
    pinned = cp.cuda.alloc_pinned_memory(4 * n)
    host = ctypes.c_void_p(pinned.ptr)
    stream = cp.cuda.get_current_stream()
    r = timer(lambda: dst.data.copy_from_host_async(host, 4 * n, stream), 10)
    out.emit(impl="cuda", op="h2d_pinned", dtype="u32", n=n, segments=1,
             gbytes_per_s=4 * n / r["ms"] / 1e6, **r,
             timed="one host-to-device transfer from pinned memory")
    r = timer(lambda: dst.data.copy_to_host_async(host, 4 * n, stream), 10)
    out.emit(impl="cuda", op="d2h_pinned", dtype="u32", n=n, segments=1,
             gbytes_per_s=4 * n / r["ms"] / 1e6, **r,
             timed="one device-to-host transfer into pinned memory")
    del src, dst, host, pinned
    cp.get_default_memory_pool().free_all_blocks()


def measure_copy_torch(a, out, torch):
    n = 1 << a.copy_log2
    timer = TorchTimer(torch, a.warmup)
    src = torch.zeros(n, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    r = timer(lambda: dst.copy_(src), 20)
    out.emit(impl="cuda", op="copy", dtype="u32", n=n, segments=1,
             gbytes_per_s=2 * 4 * n / r["ms"] / 1e6, **r,
             timed="device-to-device copy; bytes read plus written")
    host = torch.empty(n, dtype=torch.int32).pin_memory()
    r = timer(lambda: dst.copy_(host, non_blocking=True), 10)
    out.emit(impl="cuda", op="h2d_pinned", dtype="u32", n=n, segments=1,
             gbytes_per_s=4 * n / r["ms"] / 1e6, **r,
             timed="one host-to-device transfer from pinned memory")
    r = timer(lambda: host.copy_(dst, non_blocking=True), 10)
    out.emit(impl="cuda", op="d2h_pinned", dtype="u32", n=n, segments=1,
             gbytes_per_s=4 * n / r["ms"] / 1e6, **r,
             timed="one device-to-host transfer into pinned memory")
    del src, dst, host
    torch.cuda.empty_cache()


def torch_keys(torch, dtype, n, gen):
    t = getattr(torch, TORCH_TYPES[dtype])
    if dtype.startswith("f"):
        return torch.randn(n, dtype=t, device="cuda", generator=gen)
    info = torch.iinfo(t)
    return torch.randint(info.min, info.max, (n,), dtype=t, device="cuda",
                         generator=gen)


def measure_torch(a, out, torch):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(a.seed)
    timer = TorchTimer(torch, a.warmup)
    for log2n in a.sizes:
        n = 1 << log2n
        reps = reps_for(a, log2n)
        for dtype in a.argsort_types:
            x = torch_keys(torch, dtype, n, gen)
            r = timer(lambda: torch.sort(x, stable=True), reps)
            out.emit(impl="torch", op="sort_pairs_argsort", dtype=dtype, n=n,
                     segments=1, gkeys_per_s=n / r["ms"] / 1e6, **r,
                     timed="torch.sort(x, stable=True): values and indices "
                     "into new tensors")
            try:
                torch.argsort(x[:2], stable=True)
                argsort = lambda: torch.argsort(x, stable=True)
            except TypeError:  # PyTorch before 2.0: no stable= on argsort
                argsort = lambda: torch.sort(x, stable=True)[1]
            r = timer(argsort, reps)
            out.emit(impl="torch", op="argsort", dtype=dtype, n=n,
                     segments=1, gkeys_per_s=n / r["ms"] / 1e6, **r,
                     timed="torch.argsort(x, stable=True): indices only")
            del x
        torch.cuda.empty_cache()
    for rows, cols in a.segments:
        b = torch_keys(torch, "i32", rows * cols, gen).view(rows, cols)
        r = timer(lambda: torch.sort(b, dim=1, stable=True), 20)
        out.emit(impl="torch", op="segmented_sort", dtype="i32",
                 n=rows * cols, segments=rows,
                 gkeys_per_s=rows * cols / r["ms"] / 1e6, **r,
                 timed="torch.sort(b, dim=1, stable=True) of a %dx%d matrix"
                 % (rows, cols))
        del b
        torch.cuda.empty_cache()


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    out = Out(a.json)
    cp = torch = None
    try:
        if not a.no_cupy:
            import cupy as cp
        if not a.no_torch:
            import torch
    except ImportError as e:
        print("compare-anchors: %s (install it, or pass --no-cupy / "
              "--no-torch)" % e, file=sys.stderr)
        return 2
    hold = None
    if a.hold_mib > 0:
        if cp is not None:
            hold = cp.zeros(a.hold_mib << 20, dtype=cp.uint8)
            cp.cuda.Device().synchronize()
        else:
            hold = torch.zeros(a.hold_mib << 20, dtype=torch.uint8,
                               device="cuda")
            torch.cuda.synchronize()
        out.extra["hold_mib"] = a.hold_mib
    info = {"impl": "device", "op": "info",
            "unix_time": int(time.time()), "argv": sys.argv[1:]}
    if cp is not None:
        dev = cp.cuda.Device()
        info["name"] = cp.cuda.runtime.getDeviceProperties(dev.id)["name"]
        if isinstance(info["name"], bytes):
            info["name"] = info["name"].decode()
        info["cupy"] = cp.__version__
        info["cuda_runtime"] = cp.cuda.runtime.runtimeGetVersion()
    if torch is not None:
        info["name"] = torch.cuda.get_device_name()
        info["torch"] = torch.__version__
    out.emit(**info)
    if a.copy_log2 > 0:
        if cp is not None:
            measure_copy_cupy(a, out, cp)
        else:
            measure_copy_torch(a, out, torch)
    if cp is not None:
        rc = measure_cupy(a, out, cp)
        if rc:
            return rc
    if torch is not None:
        measure_torch(a, out, torch)
    if a.cub_kernels:
        rc = measure_cub_kernels(a, out, cp, torch)
        if rc:
            return rc
    del hold  # held to here
    return 0


if __name__ == "__main__":
    sys.exit(main())
