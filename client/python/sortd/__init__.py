"""sortd: the Python client of the sortd GPU sorting service.

    import numpy as np, sortd
    with sortd.Client("localhost:50051") as c:
        print(c.sort(np.random.rand(1000)).keys[:5])
"""
from sortd.client import Client, Error, SortResult

__all__ = ["Client", "Error", "SortResult"]
__version__ = "0.1.0"
