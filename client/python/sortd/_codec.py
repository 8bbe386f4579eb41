"""What the sync and the asyncio clients share: the channel options, the
requests they build from NumPy arrays and the results they decode from the
answers. Nothing here makes a call."""
import itertools
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

# ExecutionPath as sortctl names it (client/sortctl_lib.cc, PathText).
PATH_NAMES = {
    sortd_pb2.EXECUTION_PATH_CPU: "cpu",
    sortd_pb2.EXECUTION_PATH_GPU: "gpu",
    sortd_pb2.EXECUTION_PATH_OPENCL_CPU: "opencl-cpu",
}

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
HEALTH_SERIALIZE = health_pb2.HealthCheckRequest.SerializeToString
HEALTH_DESERIALIZE = health_pb2.HealthCheckResponse.FromString


class Error(Exception):
    """A call that failed: `code` is the grpc.StatusCode, `details` the
    server's message (which says what was wrong and what to do)."""

    def __init__(self, code, details):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


@dataclass(frozen=True)
class ServedBy:
    """What served a call (sortd.proto's ServedBy), the path by the name
    sortctl prints: "cpu", "gpu", "opencl-cpu" ("unknown" for a value this
    client does not know). `proto` is the message as it came."""
    path: str
    device: str
    route: str
    queue_wait_ns: int
    compute_ns: int
    batch_requests: int
    device_runs: int
    key_bytes_saved: int
    proto: sortd_pb2.ServedBy

    @classmethod
    def from_proto(cls, m):
        return cls(path=PATH_NAMES.get(m.path, "unknown"), device=m.device,
                   route=m.route, queue_wait_ns=m.queue_wait_ns,
                   compute_ns=m.compute_ns, batch_requests=m.batch_requests,
                   device_runs=m.device_runs,
                   key_bytes_saved=m.key_bytes_saved, proto=m)


@dataclass
class SortResult:
    keys: np.ndarray
    values: Optional[np.ndarray]
    permutation: Optional[np.ndarray]
    served_by: ServedBy


def deadline(timeout, default):
    """The call's timeout in seconds: None is the client's default. 0 (or
    less) is a deadline already passed: DEADLINE_EXCEEDED here, before any
    call, since gRPC may still complete a fast call whose deadline it was
    given as passed."""
    t = default if timeout is None else timeout
    if t is not None and t <= 0:
        raise Error(grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"a timeout of {t} s: the deadline passed before the "
                    "call was made")
    return t


def rpc_error(e):
    return Error(e.code(), e.details())


def channel_options(server_name, load_balancing, keepalive_seconds):
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
    return options


def credentials(tls, root_certificates, private_key, certificate_chain):
    """TLS channel credentials, or None for a plaintext channel."""
    if not (tls or root_certificates or certificate_chain):
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read(root_certificates),
        private_key=_read(private_key),
        certificate_chain=_read(certificate_chain))


def pick(count, nbytes, small_call_bytes, turn):
    """The connection a call of `nbytes` takes: the first carries small
    calls only, so that none waits behind a large array's frames."""
    if nbytes < small_call_bytes or count == 1:
        return 0
    if not small_call_bytes:
        return next(turn) % count
    return 1 + next(turn) % (count - 1)


class ClientCore:
    """What sortd.Client and sortd.aio.Client share: their settings, and
    their channels made by `channels` (grpc, or grpc.aio), one stub each.
    The options are sortd.Client's."""

    def __init__(self, channels, target, *, connections=5, timeout=300.0,
                 small_call_bytes=256 << 10, max_unary_bytes=256 << 20,
                 stream_chunk_bytes=2 << 20, compact=False, tls=False,
                 root_certificates=None, private_key=None,
                 certificate_chain=None, server_name=None,
                 load_balancing=None, keepalive_seconds=30.0):
        self.timeout = timeout
        self.small_call_bytes = small_call_bytes
        self.max_unary_bytes = max_unary_bytes
        self.stream_chunk_bytes = max(8, stream_chunk_bytes)
        self.compact = compact
        options = channel_options(server_name, load_balancing,
                                  keepalive_seconds)
        creds = credentials(tls, root_certificates, private_key,
                            certificate_chain)
        if creds is not None:
            make = lambda: channels.secure_channel(target, creds, options)
        else:
            make = lambda: channels.insecure_channel(target, options)
        self._channels = [make() for _ in range(max(1, connections))]
        self._stubs = [sortd_pb2_grpc.SortServiceStub(c)
                       for c in self._channels]
        self._turn = itertools.count()

    def _stub(self, nbytes):
        return self._stubs[pick(len(self._stubs), nbytes,
                                self.small_call_bytes, self._turn)]


def health_request(service):
    return health_pb2.HealthCheckRequest(service=service)


def is_serving(response):
    return response.status == health_pb2.HealthCheckResponse.SERVING


def le_bytes(a):
    return np.ascontiguousarray(a, dtype=_LE[a.dtype]).tobytes()


def le_dtype(dtype):
    """`dtype` little-endian, as the wire carries it."""
    return _LE[np.dtype(dtype)]


def array(data, dtype):
    return np.frombuffer(data, dtype=le_dtype(dtype)).astype(
        dtype, copy=False)


def check_sort_args(keys, values):
    """(keys, values) as arrays; TypeError for what the server cannot
    sort."""
    keys = np.asarray(keys)
    if keys.ndim != 1 or keys.dtype not in KEY_FIELDS:
        raise TypeError("keys: a 1-D array of uint32, int32, float32, "
                        f"uint64, int64 or float64, not {keys.dtype} "
                        f"with {keys.ndim} dimensions")
    if values is not None:
        values = np.asarray(values)
        if values.dtype not in VALUE_FIELDS or values.shape != keys.shape:
            raise TypeError("values: uint32 or uint64, one per key")
    return keys, values


def sort_header(descending, return_permutation, compact_keys):
    """A SortRequest with the options and no arrays."""
    request = sortd_pb2.SortRequest(
        order=sortd_pb2.ORDER_DESCENDING if descending
        else sortd_pb2.ORDER_ASCENDING,
        return_permutation=return_permutation)
    if compact_keys:
        request.response_key_coding = sortd_pb2.KEY_CODING_COMPACT
    return request


def with_arrays(request, keys, values):
    setattr(request, KEY_FIELDS[keys.dtype], le_bytes(keys))
    if values is not None:
        setattr(request, VALUE_FIELDS[values.dtype], le_bytes(values))
    return request


def stream_requests(first, keys, values, chunk_bytes):
    """SortStream's messages: `first`'s options, then the arrays in chunks
    of at most `chunk_bytes`."""
    per_key = keys.itemsize + (values.itemsize if values is not None else 0)
    step = max(1, chunk_bytes // per_key)
    for at in range(0, max(len(keys), 1), step):
        m = sortd_pb2.SortRequest()
        if at == 0:
            m.CopyFrom(first)
        yield with_arrays(m, keys[at:at + step],
                          values[at:at + step] if values is not None
                          else None)


def sort_result(r, dtype, descending):
    """A SortResponse decoded (compact keys too) into a SortResult."""
    field = r.WhichOneof("keys")
    if field in _COMPACT_FIELDS:
        c = getattr(r, field)
        keys = compact.keys_from_order_values(
            compact.order_values(c), _COMPACT_FIELDS[field], c.descending)
    elif field is None:
        keys = np.empty(0, dtype=dtype)
    else:
        keys = array(getattr(r, field), _DTYPE_OF_FIELD[field])
    vfield = r.WhichOneof("values")
    values = array(getattr(r, vfield), _DTYPE_OF_FIELD[vfield]) \
        if vfield else None
    perm = array(r.permutation, np.uint32) if r.permutation else None
    return SortResult(keys, values, perm, ServedBy.from_proto(r.served_by))


def joined(parts):
    """SortStream's answers, one SortResult."""
    if not parts:
        raise Error(grpc.StatusCode.DATA_LOSS, "the stream sent no answer")
    cat = lambda xs: np.concatenate(xs) if xs[0] is not None else None
    return SortResult(
        keys=np.concatenate([p.keys for p in parts]),
        values=cat([p.values for p in parts]),
        permutation=cat([p.permutation for p in parts]),
        served_by=parts[-1].served_by)


def transpose_request(matrices):
    m = np.asarray(matrices, dtype=np.uint32).reshape(-1, 32)
    return sortd_pb2.TransposeRequest(matrices=le_bytes(m)), m.nbytes


def transpose_result(r):
    return array(r.matrices, np.uint32).reshape(-1, 32)


def _read(path_or_bytes):
    if path_or_bytes is None or isinstance(path_or_bytes, bytes):
        return path_or_bytes
    with open(path_or_bytes, "rb") as f:
        return f.read()
