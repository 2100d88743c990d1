from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.report.browser import launch


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """One browser for the session: starting Chromium is the slow part."""
    with launch() as ctx:
        yield ctx
