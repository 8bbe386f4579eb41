"""sortd's Python client for asyncio, on grpc.aio: the methods of
sortd.Client as coroutines, the same requests and results.

    import asyncio, numpy as np, sortd.aio

    async def main():
        async with sortd.aio.Client("localhost:50051") as c:
            r = await c.sort(np.random.rand(1000), return_permutation=True)
            r.keys, r.permutation, r.served_by.path

    asyncio.run(main())

No shared memory (shm_socket): its regions are handed over a blocking Unix
socket; use sortd.Client for that.
"""

import grpc
from grpc import aio

from sortd import _codec
from sortd._codec import Error, ServedBy, SortResult
from sortd.v1 import sortd_pb2

__all__ = ["Client", "Error", "ServedBy", "SortResult"]


class Client(_codec.ClientCore):
    """A pool of grpc.aio channels to one sortd, made in the running event
    loop and used from it. `await close()` when done, or use it with
    `async with`. The options are sortd.Client's (but shm_socket); a
    call's timeout=None takes the client's `timeout`, 0 is an immediate
    deadline."""

    def __init__(self, target, **options):
        super().__init__(aio, target, **options)

    async def close(self):
        for c in self._channels:
            await c.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def _call(self, method, request, nbytes, timeout):
        try:
            return await method(self._stub(nbytes))(
                request, timeout=_codec.deadline(timeout, self.timeout))
        except grpc.RpcError as e:
            raise _codec.rpc_error(e) from None

    async def health(self, service="", timeout=None):
        """True when the server (or `service`) is SERVING; False when it
        cannot be reached."""
        check = self._channels[0].unary_unary(
            _codec.HEALTH_CHECK,
            request_serializer=_codec.HEALTH_SERIALIZE,
            response_deserializer=_codec.HEALTH_DESERIALIZE)
        try:
            r = await check(_codec.health_request(service),
                            timeout=_codec.deadline(timeout, self.timeout))
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                return False
            raise _codec.rpc_error(e) from None
        return _codec.is_serving(r)

    async def sort(self, keys, descending=False, values=None,
                   return_permutation=False, compact=None, timeout=None):
        """sortd.Client.sort, awaited."""
        keys, values = _codec.check_sort_args(keys, values)
        request = _codec.sort_header(
            descending, return_permutation,
            compact if compact is not None else self.compact)
        nbytes = keys.nbytes + (values.nbytes if values is not None else 0)
        if nbytes + 4096 > self.max_unary_bytes:
            return await self._sort_stream(request, keys, values, timeout)
        response = await self._call(
            lambda s: s.Sort, _codec.with_arrays(request, keys, values),
            nbytes, timeout)
        return _codec.sort_result(response, keys.dtype, descending)

    async def _sort_stream(self, first, keys, values, timeout):
        chunk = min(self.stream_chunk_bytes, self.max_unary_bytes // 2)
        descending = first.order == sortd_pb2.ORDER_DESCENDING
        call = self._stub(1 << 62).SortStream(
            _codec.stream_requests(first, keys, values, chunk),
            timeout=_codec.deadline(timeout, self.timeout))
        try:
            parts = [_codec.sort_result(r, keys.dtype, descending)
                     async for r in call]
        except grpc.RpcError as e:
            raise _codec.rpc_error(e) from None
        return _codec.joined(parts)

    async def transpose(self, matrices, timeout=None):
        """sortd.Client.transpose, awaited."""
        request, nbytes = _codec.transpose_request(matrices)
        r = await self._call(lambda s: s.Transpose, request, nbytes, timeout)
        return _codec.transpose_result(r)
