"""sortd's Python client: NumPy arrays in, sorted NumPy arrays out.

    import numpy as np, sortd
    with sortd.Client("localhost:50051") as c:
        r = c.sort(np.array([3, 1, 2], dtype=np.float32),
                   values=np.arange(3, dtype=np.uint32),
                   return_permutation=True)
        r.keys, r.values, r.permutation, r.served_by.path
"""
import itertools
import os
import threading
from dataclasses import dataclass
from typing import Optional

import grpc
import numpy as np

from sortd import compact
from sortd._health import health_pb2
from sortd.v1 import sortd_pb2, sortd_pb2_grpc

# Key dtypes and the SortRequest field that carries each.
KEY_FIELDS = {
    np.dtype(np.uint32): "u32_keys",
    np.dtype(np.int32): "i32_keys",
    np.dtype(np.float32): "f32_keys",
    np.dtype(np.uint64): "u64_keys",
    np.dtype(np.int64): "i64_keys",
    np.dtype(np.float64): "f64_keys",
}
VALUE_FIELDS = {
    np.dtype(np.uint32): "u32_values",
    np.dtype(np.uint64): "u64_values",
}
_DTYPE_OF_FIELD = {f: d for d, f in KEY_FIELDS.items()}
_DTYPE_OF_FIELD.update({f: d for d, f in VALUE_FIELDS.items()})
_COMPACT_FIELDS = {"compact_u32_keys": np.dtype(np.uint32),
                   "compact_i32_keys": np.dtype(np.int32),
                   "compact_f32_keys": np.dtype(np.float32)}
_LE = {d: d.newbyteorder("<") for d in _DTYPE_OF_FIELD.values()}


class Error(Exception):
    """A call that failed: `code` is the grpc.StatusCode, `details` the
    server's message (which says what was wrong and what to do)."""

    def __init__(self, code, details):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


@dataclass
class SortResult:
    keys: np.ndarray
    values: Optional[np.ndarray]
    permutation: Optional[np.ndarray]
    served_by: sortd_pb2.ServedBy


def _le_bytes(a):
    return np.ascontiguousarray(a, dtype=_LE[a.dtype]).tobytes()


def _array(data, dtype):
    return np.frombuffer(data, dtype=_LE[np.dtype(dtype)]).astype(
        dtype, copy=False)


class Client:
    """A pool of connections to one sortd (or, with `load_balancing`, to the
    replicas a DNS name resolves to). Thread-safe; close() when done, or use
    it as a context manager.

    connections: TCP connections; calls smaller than `small_call_bytes` go
      on the first, and only they do; larger ones take the others in turn
      (one HTTP/2 connection does not carry what the host can).
    timeout: seconds each call may take (its gRPC deadline).
    max_unary_bytes: requests larger than this go through SortStream in
      chunks of `stream_chunk_bytes`; set it to the server's
      --max_request_bytes.
    compact: ask for sorted 32-bit keys in compact form (about a third of
      the bytes back for evenly spread keys; the result is the same).
    shm_socket: the server's --shm_socket, on the server's host: the
      arrays go through shared memory (sealed memfds this client registers
      over that Unix socket), none through the gRPC socket.
    tls / root_certificates / private_key / certificate_chain /
      server_name: TLS, with a client certificate for mutual TLS.
    """

    def __init__(self, target, *, connections=5, timeout=300.0,
                 small_call_bytes=256 << 10, max_unary_bytes=256 << 20,
                 stream_chunk_bytes=2 << 20, compact=False, shm_socket=None,
                 tls=False, root_certificates=None, private_key=None,
                 certificate_chain=None, server_name=None,
                 load_balancing=None, keepalive_seconds=30.0):
        self.timeout = timeout
        self.small_call_bytes = small_call_bytes
        self.max_unary_bytes = max_unary_bytes
        self.stream_chunk_bytes = max(8, stream_chunk_bytes)
        self.compact = compact
        options = [
            # Answers can be twice a request (a permutation adds 4 bytes a
            # key); gRPC's 4 MiB default would refuse a 1M-key sort.
            ("grpc.max_receive_message_length", -1),
            ("grpc.max_send_message_length", -1),
            ("grpc.keepalive_time_ms", int(keepalive_seconds * 1000)),
            ("grpc.keepalive_permit_without_calls", 0),
            # A connection of its own per channel, not one shared by all.
            ("grpc.use_local_subchannel_pool", 1),
            # load_balancing (default round_robin) over the target's
            # addresses; calls refused while the server is unreachable or
            # draining (UNAVAILABLE) or overloaded (RESOURCE_EXHAUSTED) are
            # tried again with back-off, or after the server's pushback.
            ("grpc.enable_retries", 1),
            ("grpc.service_config",
             '{"loadBalancingConfig": [{"%s": {}}],'
             % (load_balancing or "round_robin") +
             ' "methodConfig": [{"name": [{"service": "sortd.v1.SortService"},'
             ' {"service": "grpc.health.v1.Health"}], "retryPolicy": {'
             '"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "2s",'
             ' "backoffMultiplier": 2, "retryableStatusCodes":'
             ' ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}'),
        ]
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        if tls or root_certificates or certificate_chain:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read(root_certificates),
                private_key=_read(private_key),
                certificate_chain=_read(certificate_chain))
            make = lambda: grpc.secure_channel(target, creds, options)
        else:
            make = lambda: grpc.insecure_channel(target, options)
        self._channels = [make() for _ in range(max(1, connections))]
        self._stubs = [sortd_pb2_grpc.SortServiceStub(c)
                       for c in self._channels]
        self._turn = itertools.count()
        self._shm = (_SharedMemory(self, shm_socket) if shm_socket
                     else None)

    def close(self):
        if self._shm is not None:
            self._shm.close()
        for c in self._channels:
            c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _stub(self, nbytes):
        # The first connection carries small calls only: none waits
        # behind a large array's frames on its connection.
        if nbytes < self.small_call_bytes or len(self._stubs) == 1:
            return self._stubs[0]
        if not self.small_call_bytes:
            return self._stubs[next(self._turn) % len(self._stubs)]
        return self._stubs[1 + next(self._turn) % (len(self._stubs) - 1)]

    def _call(self, method, request, nbytes, timeout):
        try:
            return method(self._stub(nbytes))(
                request, timeout=timeout or self.timeout)
        except grpc.RpcError as e:
            raise Error(e.code(), e.details()) from None

    def health(self, service="", timeout=None):
        """True when the server (or `service`) is SERVING."""
        check = self._channels[0].unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString)
        try:
            r = check(health_pb2.HealthCheckRequest(service=service),
                      timeout=timeout or self.timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                return False
            raise Error(e.code(), e.details()) from None
        return r.status == health_pb2.HealthCheckResponse.SERVING

    def sort(self, keys, descending=False, values=None,
             return_permutation=False, compact=None, timeout=None):
        """Sorts `keys` (a 1-D array of uint32, int32, float32, uint64,
        int64 or float64) stably; `values` (uint32 or uint64, one per key)
        move with their keys; the permutation is the argsort. Floats are
        ordered by IEEE-754 totalOrder (-NaN first, +NaN last) and come back
        bit for bit."""
        keys = np.asarray(keys)
        if keys.ndim != 1 or keys.dtype not in KEY_FIELDS:
            raise TypeError("keys: a 1-D array of uint32, int32, float32, "
                            f"uint64, int64 or float64, not {keys.dtype} "
                            f"with {keys.ndim} dimensions")
        if values is not None:
            values = np.asarray(values)
            if values.dtype not in VALUE_FIELDS or values.shape != keys.shape:
                raise TypeError("values: uint32 or uint64, one per key")
        if self._shm is not None:
            return self._shm.sort(keys, descending, values,
                                  return_permutation, timeout)
        request = sortd_pb2.SortRequest(
            order=sortd_pb2.ORDER_DESCENDING if descending
            else sortd_pb2.ORDER_ASCENDING,
            return_permutation=return_permutation)
        if compact if compact is not None else self.compact:
            request.response_key_coding = sortd_pb2.KEY_CODING_COMPACT
        nbytes = keys.nbytes + (values.nbytes if values is not None else 0)
        if nbytes + 4096 > self.max_unary_bytes:
            return self._sort_stream(request, keys, values, timeout)
        setattr(request, KEY_FIELDS[keys.dtype], _le_bytes(keys))
        if values is not None:
            setattr(request, VALUE_FIELDS[values.dtype], _le_bytes(values))
        response = self._call(lambda s: s.Sort, request, nbytes, timeout)
        return _result(response, keys.dtype, descending)

    def _sort_stream(self, first, keys, values, timeout):
        per_key = keys.itemsize + (values.itemsize if values is not None
                                   else 0)
        # Each message must stay under the server's request limit.
        chunk = min(self.stream_chunk_bytes, self.max_unary_bytes // 2)
        step = max(1, chunk // per_key)

        def chunks():
            for at in range(0, max(len(keys), 1), step):
                m = sortd_pb2.SortRequest()
                if at == 0:
                    m.CopyFrom(first)
                setattr(m, KEY_FIELDS[keys.dtype],
                        _le_bytes(keys[at:at + step]))
                if values is not None:
                    setattr(m, VALUE_FIELDS[values.dtype],
                            _le_bytes(values[at:at + step]))
                yield m

        parts = []
        try:
            for r in self._stub(1 << 62).SortStream(
                    chunks(), timeout=timeout or self.timeout):
                parts.append(_result(r, keys.dtype,
                                     first.order == sortd_pb2.ORDER_DESCENDING))
        except grpc.RpcError as e:
            raise Error(e.code(), e.details()) from None
        if not parts:
            raise Error(grpc.StatusCode.DATA_LOSS, "the stream sent no answer")
        cat = lambda xs: np.concatenate(xs) if xs[0] is not None else None
        return SortResult(
            keys=np.concatenate([p.keys for p in parts]),
            values=cat([p.values for p in parts]),
            permutation=cat([p.permutation for p in parts]),
            served_by=parts[-1].served_by)

    def transpose(self, matrices, timeout=None):
        """Transposes 32x32 bit matrices: `matrices` is uint32 of shape
        (n, 32) (or n * 32 words), bit j of row i of each becoming bit i of
        row j. Returns uint32 of shape (n, 32)."""
        m = np.asarray(matrices, dtype=np.uint32).reshape(-1, 32)
        request = sortd_pb2.TransposeRequest(matrices=_le_bytes(m))
        r = self._call(lambda s: s.Transpose, request, m.nbytes, timeout)
        return _array(r.matrices, np.uint32).reshape(-1, 32)


def _read(path_or_bytes):
    if path_or_bytes is None or isinstance(path_or_bytes, bytes):
        return path_or_bytes
    with open(path_or_bytes, "rb") as f:
        return f.read()


def _result(r, dtype, descending):
    field = r.WhichOneof("keys")
    if field in _COMPACT_FIELDS:
        c = getattr(r, field)
        keys = compact.keys_from_order_values(
            compact.order_values(c), _COMPACT_FIELDS[field], c.descending)
    elif field is None:
        keys = np.empty(0, dtype=dtype)
    else:
        keys = _array(getattr(r, field), _DTYPE_OF_FIELD[field])
    vfield = r.WhichOneof("values")
    values = _array(getattr(r, vfield), _DTYPE_OF_FIELD[vfield]) \
        if vfield else None
    perm = _array(r.permutation, np.uint32) if r.permutation else None
    return SortResult(keys, values, perm, r.served_by)


class _SharedMemory:
    """Regions registered with a sortd on this host: each a memfd this
    client makes, allocates, seals (it can neither shrink nor grow) and
    maps, handed to the server over its --shm_socket, a Unix socket. The
    one connection stays open while the client lives; the server unmaps
    its regions when it closes. One call at a time uses a region; regions
    grow to the largest call."""

    def __init__(self, client, socket_path):
        import socket  # pylint: disable=import-outside-toplevel

        self._client = client
        self._lock = threading.Lock()
        self._free = []
        self._all = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._sock.settimeout(30.0)
            self._sock.connect(socket_path)
        except OSError as e:
            self._sock.close()
            raise Error(grpc.StatusCode.UNAVAILABLE,
                        f"cannot connect to sortd's shared-memory socket "
                        f"{socket_path}: {e} (is sortd running with "
                        f"--shm_socket={socket_path}?)") from None

    def _register(self, nbytes):
        import fcntl  # pylint: disable=import-outside-toplevel
        import mmap  # pylint: disable=import-outside-toplevel
        import socket  # pylint: disable=import-outside-toplevel

        fd = os.memfd_create("sortd-region",
                             os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            # Every page allocated now, then sealed, so that neither side
            # can lose a page the other maps.
            os.ftruncate(fd, nbytes)
            os.posix_fallocate(fd, 0, nbytes)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                        | fcntl.F_SEAL_SEAL)
            mem = mmap.mmap(fd, nbytes)
            socket.send_fds(self._sock, [b"REGISTER 1\n"], [fd])
            answer = self._sock.recv(1024).decode(errors="replace")
        finally:
            os.close(fd)
        words = answer.rstrip("\n").split(" ", 2)
        if len(words) == 3 and words[0] == "OK":
            region = (words[1], mem, int(words[2]), nbytes)
            self._all.append(region)
            return region
        mem.close()
        if len(words) == 3 and words[0] == "ERROR" and words[1].isdigit():
            code = next((c for c in grpc.StatusCode
                         if c.value[0] == int(words[1])),
                        grpc.StatusCode.UNKNOWN)
            raise Error(code, f"sortd refused the region: {words[2]}")
        raise Error(grpc.StatusCode.UNAVAILABLE,
                    f"sortd's shared-memory socket answered {answer!r}")

    def _take(self, nbytes):
        with self._lock:
            for i, r in enumerate(self._free):
                if r[3] >= nbytes:
                    return self._free.pop(i)
            return self._register(max(nbytes, 1 << 20))

    def sort(self, keys, descending, values, return_permutation, timeout):
        n = len(keys)
        layout, at = {}, 0
        for name, size in (("keys", keys.nbytes), ("keys_out", keys.nbytes),
                           ("values", values.nbytes if values is not None
                            else 0),
                           ("values_out", values.nbytes if values is not None
                            else 0),
                           ("permutation", 4 * n if return_permutation
                            else 0)):
            layout[name] = at
            at += (size + 63) // 64 * 64
        region = self._take(at)
        handle, mem, _, _ = region
        try:
            view = np.frombuffer(mem, dtype=np.uint8)
            view[layout["keys"]:layout["keys"] + keys.nbytes] = \
                np.frombuffer(_le_bytes(keys), np.uint8)
            if values is not None:
                view[layout["values"]:layout["values"] + values.nbytes] = \
                    np.frombuffer(_le_bytes(values), np.uint8)
            request = sortd_pb2.SortRequest(
                order=sortd_pb2.ORDER_DESCENDING if descending
                else sortd_pb2.ORDER_ASCENDING,
                return_permutation=return_permutation,
                shared=sortd_pb2.SharedArrays(
                    region=handle, count=n,
                    keys_offset=layout["keys"],
                    values_offset=layout["values"],
                    keys_out_offset=layout["keys_out"],
                    values_out_offset=layout["values_out"],
                    permutation_offset=layout["permutation"]))
            setattr(request, KEY_FIELDS[keys.dtype], b"")
            if values is not None:
                setattr(request, VALUE_FIELDS[values.dtype], b"")
            r = self._client._call(lambda s: s.Sort, request, 0, timeout)

            def out(name, dtype, count):
                o = layout[name]
                return np.frombuffer(
                    mem, dtype=_LE[np.dtype(dtype)], count=count,
                    offset=o).astype(dtype, copy=True)

            result = SortResult(
                keys=out("keys_out", keys.dtype, n),
                values=out("values_out", values.dtype, n)
                if values is not None else None,
                permutation=out("permutation", np.uint32, n)
                if return_permutation else None,
                served_by=r.served_by)
            del view
        finally:
            with self._lock:
                self._free.append(region)
        return result

    def close(self):
        self._sock.close()  # the server unregisters every region
        for _, mem, _, _ in self._all:
            try:
                mem.close()
            except BufferError:
                pass
