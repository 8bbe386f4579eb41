"""sortd.aio.Client against the real sortd (SORTD_BINARY), each coroutine
driven with asyncio.run and checked against a NumPy reference."""
import asyncio
import socket

import grpc
import numpy as np
import pytest

import sortd
import sortd.aio
from sortd.v1 import sortd_pb2
from sortd_testing import KEY_TYPES, assert_bits_equal, generate, reference


def run(server, body, **options):
    """body(client) with a sortd.aio.Client to `server`, in a fresh loop."""
    options.setdefault("max_unary_bytes", 1 << 20)

    async def main():
        async with sortd.aio.Client(server[0], **options) as c:
            return await body(c)
    return asyncio.run(main())


def test_health(server):
    async def body(c):
        return await c.health(), await c.health("sortd.v1.SortService")
    assert run(server, body) == (True, True)


@pytest.mark.parametrize("dtype", KEY_TYPES)
def test_sorts_with_values_and_permutation(server, dtype):
    keys = generate(dtype, 5000, 7)
    values = np.arange(len(keys), dtype=np.uint32)

    async def body(c):
        return await c.sort(keys, descending=True, values=values,
                            return_permutation=True)
    r = run(server, body)
    want = reference(keys, True)
    np.testing.assert_array_equal(r.permutation, want.astype(np.uint32))
    assert_bits_equal(r.keys, keys[want])
    np.testing.assert_array_equal(r.values, values[want])
    assert r.served_by.path == "cpu"
    assert r.served_by.proto.path == sortd_pb2.EXECUTION_PATH_CPU


def test_concurrent_calls_compact_keys_and_sortstream(server):
    small = [generate(np.float32, 3000, s) for s in range(8)]
    # 4 MiB in, 8 MiB back: beyond the server's 1 MiB a message.
    large = generate(np.uint32, 1 << 20, 5)

    async def body(c):
        return await asyncio.gather(
            c.sort(large, return_permutation=True),
            *(c.sort(k, compact=True) for k in small))
    big, *results = run(server, body)
    want = reference(large, False)
    np.testing.assert_array_equal(big.permutation, want.astype(np.uint32))
    np.testing.assert_array_equal(big.keys, large[want])
    for k, r in zip(small, results):
        assert_bits_equal(r.keys, k[reference(k, False)])
        assert r.served_by.key_bytes_saved > 0


def test_transposes_bit_matrices(server):
    m = np.random.default_rng(3).integers(0, 2**32, size=(40, 32),
                                          dtype=np.uint32)
    bits = np.unpackbits(m.view(np.uint8).reshape(40, 32, 4), axis=2,
                         bitorder="little").reshape(40, 32, 32)
    want = np.packbits(bits.transpose(0, 2, 1), axis=2,
                       bitorder="little").view(np.uint32).reshape(40, 32)

    async def body(c):
        return await c.transpose(m)
    np.testing.assert_array_equal(run(server, body), want)


def test_errors_and_a_timeout_of_0(server):
    keys = np.arange(10, dtype=np.uint32)

    async def body(c):
        codes = []
        for call in (lambda: c.sort(np.zeros(1 << 19, dtype=np.uint64),
                                    timeout=30),
                     lambda: c.sort(keys), lambda: c.health(),
                     lambda: c.transpose(np.zeros((1, 32), np.uint32))):
            with pytest.raises(sortd.Error) as e:
                await call()
            codes.append(e.value.code)
        with pytest.raises(TypeError):
            await c.sort(np.zeros(3, dtype=np.int16))
        return codes, (await c.sort(keys, timeout=30)).keys
    codes, keys_back = run(server, body, timeout=0,
                           max_unary_bytes=1 << 30)
    assert codes == [grpc.StatusCode.RESOURCE_EXHAUSTED] + \
        [grpc.StatusCode.DEADLINE_EXCEEDED] * 3
    np.testing.assert_array_equal(keys_back, keys)


def test_an_unreachable_server_is_not_healthy():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def body(c):
        return await c.health()
    assert run((f"127.0.0.1:{port}",), body, timeout=2) is False
