"""Decoding of CompactKeys (sortd.proto): sorted 32-bit keys as blocks of
128 order values, each block's first value whole and the differences of the
others bit-packed at the block's width, in four interleaved lanes."""
import numpy as np

BLOCK = 128
_LANES = 4
_PER_LANE = BLOCK // _LANES


def order_values(compact):
    """The order values (uint32) of a CompactKeys message, in sorted order."""
    count = int(compact.count)
    blocks = (count + BLOCK - 1) // BLOCK
    widths = np.frombuffer(compact.widths, dtype=np.uint8)
    bases = np.frombuffer(compact.bases, dtype="<u4")
    deltas = np.frombuffer(compact.deltas, dtype="<u4")
    if len(widths) != blocks or len(bases) != blocks:
        raise ValueError(
            f"compact keys: {count} keys need {blocks} blocks, got "
            f"{len(widths)} widths and {len(bases)} bases")
    if np.any(widths > 32):
        raise ValueError("compact keys: a block width above 32")
    starts = np.concatenate(([0], np.cumsum(widths.astype(np.int64) * 4)))
    if starts[-1] != len(deltas):
        raise ValueError(
            f"compact keys: the widths need {starts[-1]} delta words, got "
            f"{len(deltas)}")
    diffs = np.zeros((blocks, BLOCK), dtype=np.uint64)
    for w in np.unique(widths):
        w = int(w)
        if w == 0:
            continue
        rows = np.nonzero(widths == w)[0]
        # words[b, k, lane]: word 4k + lane of block b.
        idx = starts[rows][:, None] + np.arange(4 * w)[None, :]
        words = deltas[idx].astype(np.uint64).reshape(len(rows), w, _LANES)
        # The two words each of a lane's 32 values may span, low first.
        i = np.arange(_PER_LANE)
        bit = i * w
        k = bit // 32
        shift = (bit % 32).astype(np.uint64)
        lo = words[:, k, :]
        hi = words[:, np.minimum(k + 1, w - 1), :]
        hi = np.where((k + 1 < w)[None, :, None], hi, 0).astype(np.uint64)
        both = lo | (hi << np.uint64(32))
        vals = (both >> shift[None, :, None]) & np.uint64((1 << w) - 1)
        # value i of lane l is difference 4i + l.
        diffs[rows] = vals.reshape(len(rows), BLOCK)
    diffs[:, 0] = bases
    values = np.cumsum(diffs, axis=1, dtype=np.uint64) & np.uint64(0xFFFFFFFF)
    return values.astype(np.uint32).reshape(-1)[:count]


def keys_from_order_values(values, dtype, descending):
    """The keys (of `dtype`, a 32-bit key type) whose order values these
    are: the inverse of the mapping CompactKeys describes."""
    v = values.astype(np.uint32)
    if descending:
        v = ~v
    dtype = np.dtype(dtype)
    sign = np.uint32(0x80000000)
    if dtype == np.uint32:
        raw = v
    elif dtype == np.int32:
        raw = v ^ sign
    elif dtype == np.float32:
        raw = np.where(v & sign, v ^ sign, ~v).astype(np.uint32)
    else:
        raise ValueError(f"compact keys are 32-bit; not {dtype}")
    return raw.view(dtype)
