#!/usr/bin/env python3
"""Writes the committed seed corpus of the fuzz targets (tests/fuzz/corpus).
Requests are encoded by hand in protobuf's wire format, so this needs no
protobuf module:  python3 tests/fuzz/make_seeds.py"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field_bytes(number, data):
    return varint(number << 3 | 2) + varint(len(data)) + data


def field_varint(number, v):
    return varint(number << 3) + varint(v)


def pack(fmt, values):
    return b"".join(struct.pack("<" + fmt, v) for v in values)


nan = float("nan")
inf = float("inf")
requests = {
    "u32": field_bytes(1, pack("I", [3, 1, 2, 2, 0xFFFFFFFF, 0])),
    "i32_desc_perm": field_bytes(2, pack("i", [-5, 7, -5, 0, 2**31 - 1]))
    + field_varint(7, 1) + field_varint(10, 1),
    "f32_special_u64_values": field_bytes(3, pack("f", [nan, -0.0, 0.0, inf, -inf, 1.5]))
    + field_bytes(9, pack("Q", range(6))) + field_varint(10, 1),
    "u64_u32_values": field_bytes(4, pack("Q", [2**64 - 1, 0, 5, 5]))
    + field_bytes(8, pack("I", [9, 8, 7, 6])),
    "i64": field_bytes(5, pack("q", [-(2**63), 2**63 - 1, 0, -1])),
    "f64_desc": field_bytes(6, pack("d", [nan, -nan, 1e300, -1e-300, 0.0]))
    + field_varint(7, 1),
    "empty_f64": field_bytes(6, b""),
    "partial_key": field_bytes(1, b"\x01\x02\x03\x04\x05"),
    "values_mismatch": field_bytes(1, pack("I", [1, 2, 3]))
    + field_bytes(8, pack("I", [1])),
    "bad_order": field_bytes(1, pack("I", [1, 2])) + field_varint(7, 5),
    "one_matrix": field_bytes(1, pack("I", [(1 << i) | 1 for i in range(32)])),
    "no_keys": field_varint(10, 1),
    "compact_f32_desc": field_bytes(3, pack("f", [nan, -0.0, 0.0, inf, -inf, 1.5] * 30))
    + field_varint(7, 1) + field_varint(12, 1),
    "compact_u32_values": field_bytes(1, pack("I", range(300, 0, -1)))
    + field_bytes(8, pack("I", range(300))) + field_varint(12, 1),
}
for name, data in requests.items():
    with open(os.path.join(HERE, "corpus", "request", name), "wb") as f:
        f.write(data)

# sort_diff: [key type, flags, length index, run size] then key bytes.
diffs = {
    "u32_asc": bytes([0, 0, 10, 7]) + pack("I", [5, 3, 9, 3, 1]),
    "i32_desc_perm_u32": bytes([1, 1 | 2 | 8, 12, 50]) + pack("i", [-1, 4, -1, 0]),
    "f32_nan_u64": bytes([2, 4, 15, 3]) + pack("f", [nan, -0.0, 0.0, inf, -inf, 1.0]),
    "u64_equal": bytes([3, 0, 20, 100]) + b"\x07" * 8,
    "i64_desc": bytes([4, 1, 22, 199]) + pack("q", [-(2**63), 2**63 - 1, 7]),
    "f64_runs": bytes([5, 8, 18, 13]) + pack("d", [nan, 1.0, 1.0, -inf, 0.0, -0.0]),
}
for name, data in diffs.items():
    with open(os.path.join(HERE, "corpus", "sort_diff", name), "wb") as f:
        f.write(data)

# shm_register: [flags: descriptor count in bits 0-1, newline 4, the rest
# of the input as the message 8], then per descriptor [kind: 0 memfd,
# 1 pipe, 2 file, 3 read-only memfd; size/16 u16; allocated/16 u16; seals:
# shrink 1, grow 2, seal 4, write 8, future write 16], then the message.
def descriptor(kind, size, allocated, seals):
    return bytes([kind]) + struct.pack("<HH", size, allocated) + bytes([seals])


registrations = {
    "valid": bytes([1 | 4]) + descriptor(0, 256, 256, 7),
    "unsealed": bytes([1 | 4]) + descriptor(0, 256, 256, 0),
    "sparse": bytes([1 | 4]) + descriptor(0, 4096, 16, 7),
    "two": bytes([2 | 4]) + descriptor(0, 256, 256, 7) * 2,
    "pipe": bytes([1, 0]) + descriptor(1, 0, 0, 0),
    "file": bytes([1, 0]) + descriptor(2, 256, 256, 0),
    "readonly": bytes([1 | 4]) + descriptor(3, 256, 256, 7),
    "text": bytes([1 | 8]) + descriptor(0, 256, 256, 7) + b"OPEN /etc/passwd",
    "writeseal": bytes([1 | 4]) + descriptor(0, 256, 256, 15),
}
os.makedirs(os.path.join(HERE, "corpus", "shm_register"), exist_ok=True)
for name, data in registrations.items():
    with open(os.path.join(HERE, "corpus", "shm_register", name), "wb") as f:
        f.write(data)

# parts: 5 bytes an operation: [scope (bits 0-1), name (2-3: 3 is too
# short), 14 fails every waiting part / 15 refuses (bits 4-7); index;
# count; key type (bit 0); bytes / 8 KiB].
def part(scope, name, index, count, u64=0, kib8=1):
    return bytes([scope | name << 2, index, count, u64, kib8])


part_seqs = {
    "whole": part(0, 0, 1, 2) + part(0, 0, 0, 2),
    "two_clients": part(0, 1, 0, 2) + part(1, 1, 1, 2) + part(0, 1, 1, 2),
    "repeat": part(0, 0, 0, 3) + part(0, 0, 0, 3),
    "terms": part(2, 2, 0, 2) + part(2, 2, 1, 2, u64=1),
    "short_name": part(0, 3, 0, 2),
    "big": part(0, 0, 0, 4, kib8=200) + part(0, 1, 0, 4, kib8=200),
    "refuse": part(1, 0, 0, 2) + bytes([15 << 4 | 1, 1, 2, 0, 0]),
    "fail_all": part(1, 0, 0, 2) + bytes([14 << 4, 0, 0, 0, 0]) + part(1, 0, 1, 2),
}
os.makedirs(os.path.join(HERE, "corpus", "parts"), exist_ok=True)
for name, data in part_seqs.items():
    with open(os.path.join(HERE, "corpus", "parts", name), "wb") as f:
        f.write(data)
# stream: [config: budget 1-4 MiB (bits 0-1), --max_stream_bytes of 16 KiB
# (bit 2), answer chunk 2^(10 + bits 3-7 % 12)] [another call's charge in
# 32 KiB (bits 0-5), one call may hold half the budget (bit 7)], then
# messages. A message:
# [op: kind (bits 0-2: 0 raw bytes, 1-4 a SortRequest, 5 with a byte
# flipped, 6 cut short, 7 with a field added), another key type than the
# stream's (bit 3), key type (bits 4-7 % 6)]; raw: [length u16] bytes;
# else [terms: value type (% 3), descending (4), permutation (8), compact
# keys (16)] [count u16] up to 64 bytes of keys and of values, then the
# mutation's bytes; after each message [slices - 1: 3 hands it over as
# contiguous bytes].
def message(op, terms, keys, values=b"", n=None, mutation=b"", slices=0):
    ks, vs = [4, 4, 4, 8, 8, 8][(op >> 4) % 6], [0, 4, 8][terms % 3]
    n = len(keys) // ks if n is None else n
    # The target takes up to 64 bytes of each array, then makes up the rest.
    keys = (keys + bytes(64))[:min(n * ks, 64)]
    values = (values + bytes(64))[:min(n * vs, 64)]
    return (bytes([op, terms]) + struct.pack("<H", n) + keys + values
            + mutation + bytes([slices]))


def raw(data, slices=0):
    return bytes([0]) + struct.pack("<H", len(data)) + data + bytes([slices])


U32, F64, U64 = 0x00, 0x50, 0x30
streams = {
    "u32_three": bytes([0, 0]) + message(1 | U32, 0, pack("I", [5, 1, 4, 1]))
    + message(2 | U32, 0, pack("I", [9, 2, 6]), slices=1)
    + message(3 | U32, 0, b"", slices=2),
    "f64_u64_values_desc_perm": bytes([1, 0])
    + message(1 | F64, 2 | 4 | 8, pack("d", [nan, -0.0, 1.5, -inf]),
              pack("Q", [1, 2, 3, 4]), slices=3)
    + message(4 | F64, 2, pack("d", [0.0, inf]), pack("Q", [5, 6]), slices=1),
    "compact_i32": bytes([2, 0])
    + message(1 | 0x10, 1 | 16, pack("i", range(-16, 16)), pack("I", range(32)))
    + message(2 | 0x10, 1, pack("i", range(16)), pack("I", range(16))),
    "other_fields": bytes([0, 0]) + message(1 | U32, 0, pack("I", [1, 2]))
    + message(1 | 8 | U64, 0, pack("Q", [1, 2])) + message(1, 0, b""),
    "raw": bytes([0, 0]) + raw(field_bytes(1, pack("I", [3, 2, 1])))
    + raw(b"\x0a\xff\xff\xff\xff\x0f" + b"x" * 8, slices=2),
    "shared": bytes([0, 0]) + message(1 | U32, 0, pack("I", [1]))
    + message(7 | U32, 0, pack("I", [2]), mutation=bytes([0])),
    "part": bytes([0, 0]) + message(7 | U32, 0, pack("I", [3]), mutation=bytes([1])),
    "broken": bytes([3, 0]) + message(1 | U32, 0, pack("I", [7, 7]))
    + message(5 | U32, 0, pack("I", [1, 2]), mutation=bytes([2, 0, 0x40]))
    + message(6 | U32, 0, pack("I", [1, 2]), mutation=bytes([5, 0])),
    "max_stream_bytes": bytes([4, 0x80])
    + b"".join(message(1 | U64, 2, b"", n=500, slices=i % 3) for i in range(6)),
    "budget": bytes([0, 0])
    + b"".join(message(1 | U64, 2 | 8, b"", n=2047) for _ in range(12)),
    "neighbour": bytes([1, 40])
    + b"".join(message(1 | U64, 2 | 8, b"", n=2047) for _ in range(12)),
}
os.makedirs(os.path.join(HERE, "corpus", "stream"), exist_ok=True)
for name, data in streams.items():
    with open(os.path.join(HERE, "corpus", "stream", name), "wb") as f:
        f.write(data)

print("wrote", len(requests), "request seeds,", len(diffs), "sort_diff seeds,",
      len(registrations), "shm_register seeds,", len(part_seqs),
      "parts seeds and", len(streams), "stream seeds")
