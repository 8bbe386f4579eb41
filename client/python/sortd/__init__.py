"""sortd: the Python client of the sortd GPU sorting service.

    import numpy as np, sortd
    with sortd.Client("localhost:50051") as c:
        print(c.sort(np.random.rand(1000)).keys[:5])

sortd.aio.Client is the same client for asyncio (its methods coroutines).
"""
from sortd._codec import Error, ServedBy, SortResult
from sortd.client import Client

__all__ = ["Client", "Error", "ServedBy", "SortResult"]
try:
    from sortd._version import __version__  # written by the package build
except ImportError:  # the source tree, not built
    __version__ = "unknown"
