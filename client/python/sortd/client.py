"""sortd's Python client: NumPy arrays in, sorted NumPy arrays out.

    import numpy as np, sortd
    with sortd.Client("localhost:50051") as c:
        r = c.sort(np.array([3, 1, 2], dtype=np.float32),
                   values=np.arange(3, dtype=np.uint32),
                   return_permutation=True)
        r.keys, r.values, r.permutation, r.served_by.path

sortd.aio.Client is the same client for asyncio.
"""
import os
import threading

import grpc
import numpy as np

from sortd import _codec
from sortd._codec import Error, ServedBy, SortResult
from sortd.v1 import sortd_pb2


class Client(_codec.ClientCore):
    """A pool of connections to one sortd (or, with `load_balancing`, to the
    replicas a DNS name resolves to). Thread-safe; close() when done, or use
    it as a context manager.

    connections: TCP connections; calls smaller than `small_call_bytes` go
      on the first, and only they do; larger ones take the others in turn
      (one HTTP/2 connection does not carry what the host can).
    timeout: seconds each call may take (its gRPC deadline) unless the call
      gives its own; None: no deadline. A call's timeout=None takes this
      one; 0 is an immediate deadline (DEADLINE_EXCEEDED).
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

    def __init__(self, target, *, shm_socket=None, **options):
        super().__init__(grpc, target, **options)
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

    def _call(self, method, request, nbytes, timeout):
        try:
            return method(self._stub(nbytes))(
                request, timeout=_codec.deadline(timeout, self.timeout))
        except grpc.RpcError as e:
            raise _codec.rpc_error(e) from None

    def health(self, service="", timeout=None):
        """True when the server (or `service`) is SERVING; False when it
        cannot be reached."""
        check = self._channels[0].unary_unary(
            _codec.HEALTH_CHECK,
            request_serializer=_codec.HEALTH_SERIALIZE,
            response_deserializer=_codec.HEALTH_DESERIALIZE)
        try:
            r = check(_codec.health_request(service),
                      timeout=_codec.deadline(timeout, self.timeout))
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                return False
            raise _codec.rpc_error(e) from None
        return _codec.is_serving(r)

    def sort(self, keys, descending=False, values=None,
             return_permutation=False, compact=None, timeout=None):
        """Sorts `keys` (a 1-D array of uint32, int32, float32, uint64,
        int64 or float64) stably; `values` (uint32 or uint64, one per key)
        move with their keys; the permutation is the argsort. Floats are
        ordered by IEEE-754 totalOrder (-NaN first, +NaN last) and come back
        bit for bit."""
        keys, values = _codec.check_sort_args(keys, values)
        if self._shm is not None:
            return self._shm.sort(keys, descending, values,
                                  return_permutation, timeout)
        request = _codec.sort_header(
            descending, return_permutation,
            compact if compact is not None else self.compact)
        nbytes = keys.nbytes + (values.nbytes if values is not None else 0)
        if nbytes + 4096 > self.max_unary_bytes:
            return self._sort_stream(request, keys, values, timeout)
        response = self._call(lambda s: s.Sort,
                              _codec.with_arrays(request, keys, values),
                              nbytes, timeout)
        return _codec.sort_result(response, keys.dtype, descending)

    def _sort_stream(self, first, keys, values, timeout):
        # Each message must stay under the server's request limit.
        chunk = min(self.stream_chunk_bytes, self.max_unary_bytes // 2)
        descending = first.order == sortd_pb2.ORDER_DESCENDING
        try:
            parts = [_codec.sort_result(r, keys.dtype, descending)
                     for r in self._stub(1 << 62).SortStream(
                         _codec.stream_requests(first, keys, values, chunk),
                         timeout=_codec.deadline(timeout, self.timeout))]
        except grpc.RpcError as e:
            raise _codec.rpc_error(e) from None
        return _codec.joined(parts)

    def transpose(self, matrices, timeout=None):
        """Transposes 32x32 bit matrices: `matrices` is uint32 of shape
        (n, 32) (or n * 32 words), bit j of row i of each becoming bit i of
        row j. Returns uint32 of shape (n, 32)."""
        request, nbytes = _codec.transpose_request(matrices)
        r = self._call(lambda s: s.Transpose, request, nbytes, timeout)
        return _codec.transpose_result(r)


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
                np.frombuffer(_codec.le_bytes(keys), np.uint8)
            if values is not None:
                view[layout["values"]:layout["values"] + values.nbytes] = \
                    np.frombuffer(_codec.le_bytes(values), np.uint8)
            request = _codec.sort_header(descending, return_permutation,
                                         False)
            request.shared.CopyFrom(sortd_pb2.SharedArrays(
                region=handle, count=n,
                keys_offset=layout["keys"],
                values_offset=layout["values"],
                keys_out_offset=layout["keys_out"],
                values_out_offset=layout["values_out"],
                permutation_offset=layout["permutation"]))
            setattr(request, _codec.KEY_FIELDS[keys.dtype], b"")
            if values is not None:
                setattr(request, _codec.VALUE_FIELDS[values.dtype], b"")
            r = self._client._call(lambda s: s.Sort, request, 0, timeout)

            def out(name, dtype, count):
                o = layout[name]
                return np.frombuffer(
                    mem, dtype=_codec.le_dtype(dtype), count=count,
                    offset=o).astype(dtype, copy=True)

            result = SortResult(
                keys=out("keys_out", keys.dtype, n),
                values=out("values_out", values.dtype, n)
                if values is not None else None,
                permutation=out("permutation", np.uint32, n)
                if return_permutation else None,
                served_by=ServedBy.from_proto(r.served_by))
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
