"""Suite-wide fixtures.

Logging: code under test (the CLI's main(), connection tests) may point structlog at a stream that pytest closes
when the test ends (its captured stderr, a StringIO).  Resetting after every test keeps a later test's log calls
from writing to a closed file.
"""

import pytest

from kjbod.server.logging import reset_logging


@pytest.fixture(autouse=True)
def _reset_logging_after_test():
    yield
    reset_logging()
