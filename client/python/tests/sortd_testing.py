"""What the sync and asyncio tests share: the real sortd started on a
free port, NumPy references of its answers."""
import os
import re
import subprocess

import numpy as np

KEY_TYPES = [np.uint32, np.int32, np.float32, np.uint64, np.int64,
             np.float64]


def order_bits(keys, descending):
    """Unsigned bits that ascend in the server's order (IEEE-754
    totalOrder for floats)."""
    k = np.asarray(keys)
    u = k.view(np.uint32 if k.itemsize == 4 else np.uint64)
    sign = u.dtype.type(1) << u.dtype.type(8 * k.itemsize - 1)
    if k.dtype.kind == "f":
        bits = np.where(u & sign, ~u, u | sign)
    elif k.dtype.kind == "i":
        bits = u ^ sign
    else:
        bits = u.copy()
    return ~bits if descending else bits


def reference(keys, descending):
    return np.argsort(order_bits(keys, descending), kind="stable")


def generate(dtype, n, seed):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        k = rng.standard_normal(n).astype(dtype) * 1000
        special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0],
                           dtype=dtype)
        k[: min(n, 6)] = special[: min(n, 6)]
    else:
        info = np.iinfo(dtype)
        # Few distinct values, so that stability shows.
        k = rng.integers(info.min, info.max, size=64, dtype=dtype,
                         endpoint=True)[rng.integers(0, 64, size=n)]
    return k


def assert_bits_equal(a, b):
    assert a.dtype == b.dtype
    assert a.tobytes() == b.tobytes()


def start_sortd(*args):
    """The real sortd on a free loopback port: (process, address)."""
    proc = subprocess.Popen(
        [os.environ["SORTD_BINARY"], "--device=cpu", "--listen=127.0.0.1:0",
         "--metrics_listen=", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        m = re.search(r"serving on (\S+)", line)
        if m:
            return proc, m.group(1)
    raise AssertionError(f"sortd did not start (exit {proc.wait()})")
