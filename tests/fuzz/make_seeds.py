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
    "pipe": bytes([1]) + descriptor(1, 0, 0, 0),
    "file": bytes([1]) + descriptor(2, 256, 256, 0),
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
print("wrote", len(requests), "request seeds,", len(diffs), "sort_diff seeds,",
      len(registrations), "shm_register seeds and", len(part_seqs), "parts seeds")
