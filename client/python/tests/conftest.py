"""The real sortd (SORTD_BINARY) the tests share, on a loopback port with
a shared-memory socket."""
import os
import tempfile

import pytest

from sortd_testing import start_sortd


@pytest.fixture(scope="session")
def server():
    shm = os.path.join(tempfile.mkdtemp(prefix="sortd-py-shm-"), "sortd.sock")
    proc, address = start_sortd("--cpu_threads=2",
                                "--max_request_bytes=1048576",
                                f"--shm_socket={shm}")
    yield address, shm
    proc.terminate()
    assert proc.wait(timeout=60) == 0
