"""Fixtures shared by the esper_agent tests (imported by name: a conftest.py here would shadow the
``from conftest import ...`` that other test folders use).

The agent's tensors are tiny, so torch's intra-op threads buy nothing in these tests, and on the shared 2-core
CI machine they spin against other processes: measured, this folder took 7 minutes with 2 threads under load
and about one minute with 1. A module that imports :func:`one_torch_thread` runs each test with one thread and
restores the previous setting afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
