"""The Python client against the real sortd (SORTD_BINARY), every answer
checked against a NumPy reference."""
import importlib
import os
import pathlib
import socket
import subprocess
import time

import grpc
import numpy as np
import pytest

import sortd
from sortd.v1 import sortd_pb2
from sortd_testing import (KEY_TYPES, assert_bits_equal, generate,
                           reference, start_sortd)


def test_version_is_the_repositorys():
    """The installed package carries the repository's VERSION."""
    version_file = pathlib.Path(__file__).resolve().parents[3] / "VERSION"
    assert sortd.__version__ == version_file.read_text().strip()


def test_the_package_is_the_installed_one_with_its_generated_code():
    """Imported from where it was installed (SORTD_INSTALLED_UNDER, the
    venv), not from the source tree, with the stubs the build generated."""
    under = os.environ.get("SORTD_INSTALLED_UNDER")
    if under:
        assert pathlib.Path(sortd.__file__).resolve().is_relative_to(
            pathlib.Path(under).resolve()), sortd.__file__
    for module in ("sortd._version", "sortd._health.health_pb2",
                   "sortd.v1.sortd_pb2_grpc", "sortd.aio"):
        importlib.import_module(module)
    assert "Sort" in sortd_pb2.DESCRIPTOR.services_by_name[
        "SortService"].methods_by_name


@pytest.fixture
def client(server):
    with sortd.Client(server[0], max_unary_bytes=1 << 20) as c:
        yield c


def test_health(client):
    assert client.health()
    assert client.health("sortd.v1.SortService")


@pytest.mark.parametrize("dtype", KEY_TYPES)
@pytest.mark.parametrize("descending", [False, True])
def test_sorts_every_key_type_with_values_and_permutation(client, dtype,
                                                          descending):
    keys = generate(dtype, 5000, 7)
    values = np.arange(len(keys), dtype=np.uint64) * 3
    r = client.sort(keys, descending=descending, values=values,
                    return_permutation=True)
    want = reference(keys, descending)
    np.testing.assert_array_equal(r.permutation, want.astype(np.uint32))
    assert_bits_equal(r.keys, keys[want])
    np.testing.assert_array_equal(r.values, values[want])
    assert r.served_by.batch_requests >= 1


def test_served_by_names_the_path_as_sortctl_does(client):
    r = client.sort(np.array([2, 1], dtype=np.uint32))
    # sortd --device=cpu: the oneTBB path, "cpu" as sortctl prints it.
    assert r.served_by.path == "cpu"
    assert r.served_by.proto.path == sortd_pb2.EXECUTION_PATH_CPU
    assert r.served_by.route and r.served_by.device
    assert r.served_by.batch_requests >= 1


def test_a_timeout_of_0_is_an_immediate_deadline(server):
    keys = np.arange(10, dtype=np.uint32)
    with sortd.Client(server[0], timeout=0) as c:
        for call in (lambda: c.sort(keys), lambda: c.health(),
                     lambda: c.transpose(np.zeros((1, 32), np.uint32)),
                     lambda: c.sort(keys, timeout=0)):
            with pytest.raises(sortd.Error) as e:
                call()
            assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        # A call's own timeout overrides the client's.
        np.testing.assert_array_equal(c.sort(keys, timeout=30).keys, keys)
    with sortd.Client(server[0], timeout=30) as c:
        with pytest.raises(sortd.Error) as e:
            c.sort(keys, timeout=0)
        assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        # None is the client's default (30 s), not 0.
        np.testing.assert_array_equal(c.sort(keys, timeout=None).keys, keys)


def test_keys_only_and_empty(client):
    r = client.sort(np.array([3, 1, 2], dtype=np.int64))
    np.testing.assert_array_equal(r.keys, [1, 2, 3])
    assert r.values is None and r.permutation is None
    empty = client.sort(np.array([], dtype=np.float32))
    assert empty.keys.dtype == np.float32 and len(empty.keys) == 0


@pytest.mark.parametrize("dtype", [np.uint32, np.int32, np.float32])
@pytest.mark.parametrize("descending", [False, True])
def test_compact_keys_decode_to_the_same_answer(client, dtype, descending):
    keys = generate(dtype, 20000, 11)
    r = client.sort(keys, descending=descending, compact=True)
    assert r.served_by.key_bytes_saved > 0
    assert_bits_equal(r.keys, keys[reference(keys, descending)])


def test_arrays_beyond_one_message_go_through_sortstream(client):
    # 1M keys with a permutation: 4 MiB in, 8 MiB back; the server takes
    # 1 MiB a message, gRPC's default receive limit is 4 MiB.
    keys = generate(np.uint32, 1 << 20, 5)
    r = client.sort(keys, return_permutation=True)
    want = reference(keys, False)
    np.testing.assert_array_equal(r.permutation, want.astype(np.uint32))
    np.testing.assert_array_equal(r.keys, keys[want])


def test_transposes_bit_matrices(client):
    rng = np.random.default_rng(3)
    m = rng.integers(0, 2**32, size=(40, 32), dtype=np.uint32)
    bits = np.unpackbits(m.view(np.uint8).reshape(40, 32, 4), axis=2,
                         bitorder="little").reshape(40, 32, 32)
    want = np.packbits(bits.transpose(0, 2, 1), axis=2,
                       bitorder="little").view(np.uint32).reshape(40, 32)
    np.testing.assert_array_equal(client.transpose(m), want)


def test_shared_memory_moves_no_array_through_the_socket(server):
    address, shm = server
    with sortd.Client(address, shm_socket=shm) as c:
        for dtype in (np.float64, np.int32):
            keys = generate(dtype, 30000, 2)
            values = np.arange(len(keys), dtype=np.uint32)
            r = c.sort(keys, values=values, return_permutation=True,
                       descending=True)
            want = reference(keys, True)
            assert_bits_equal(r.keys, keys[want])
            np.testing.assert_array_equal(r.values, values[want])
            np.testing.assert_array_equal(r.permutation,
                                          want.astype(np.uint32))
        tokens = [region[0] for region in c._shm._all]
    assert tokens
    # The client's regions are gone with it: the server forgets them once
    # it sees the connection close.
    with sortd.Client(address) as other:
        request = sortd_pb2.SortRequest(
            u32_keys=b"", shared=sortd_pb2.SharedArrays(
                region=tokens[0], count=1, keys_out_offset=64))
        deadline = time.monotonic() + 10
        while True:
            try:
                other._stubs[0].Sort(request, timeout=10)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    break
            assert time.monotonic() < deadline, "the region outlived its client"


def test_shared_memory_refusals_carry_the_servers_status(server):
    address, shm = server
    with pytest.raises(sortd.Error) as e:
        sortd.Client(address, shm_socket=shm + ".missing")
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert "--shm_socket" in e.value.details


def test_errors_carry_the_status_and_the_servers_message(server):
    with sortd.Client(server[0], max_unary_bytes=1 << 30) as c:
        with pytest.raises(sortd.Error) as e:
            c.sort(np.zeros(1 << 19, dtype=np.uint64))  # 4 MiB > 1 MiB
        assert e.value.code.name == "RESOURCE_EXHAUSTED"
        assert "larger than max" in e.value.details
        with pytest.raises(TypeError):
            c.sort(np.zeros((2, 2), dtype=np.uint32))
        with pytest.raises(TypeError):
            c.sort(np.zeros(3, dtype=np.int16))


def test_an_unreachable_server_is_not_healthy():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with sortd.Client(f"127.0.0.1:{port}", timeout=2) as c:
        assert not c.health()


def test_mutual_tls(tmp_path):
    key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    subprocess.run(
        f"""set -e
        openssl req -x509 {key} -keyout ca.key -out ca.pem -days 1 \
          -subj '/CN=sortd test CA'
        openssl req {key} -keyout server.key -out server.csr -subj '/CN=x'
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1' > san.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key \
          -CAcreateserial -out server.pem -days 1 -extfile san.ext
        openssl req {key} -keyout client.key -out client.csr -subj '/CN=c'
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key \
          -CAcreateserial -out client.pem -days 1""",
        shell=True, cwd=tmp_path, check=True, capture_output=True)
    proc, address = start_sortd(f"--tls_cert={tmp_path / 'server.pem'}",
                                f"--tls_key={tmp_path / 'server.key'}",
                                f"--tls_client_ca={tmp_path / 'ca.pem'}")
    try:
        with sortd.Client(address, root_certificates=tmp_path / "ca.pem",
                          private_key=tmp_path / "client.key",
                          certificate_chain=tmp_path / "client.pem") as c:
            keys = generate(np.float32, 1000, 1)
            assert_bits_equal(c.sort(keys).keys, keys[reference(keys, False)])
        # Without a client certificate the server refuses the call.
        with sortd.Client(address, root_certificates=tmp_path / "ca.pem",
                          timeout=10) as c:
            with pytest.raises(sortd.Error) as e:
                c.sort(keys)
            assert e.value.code.name == "UNAVAILABLE"
    finally:
        proc.terminate()
        proc.wait(timeout=60)
