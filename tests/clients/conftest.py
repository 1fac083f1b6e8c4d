"""pytest hooks of the real-client tests; the harness itself is harness.py."""
import os

import pytest

from harness import TROUPE_BIN, TROUPE_MODEL

SKIP_CODE = 77  # SKIP_RETURN_CODE in tests/CMakeLists.txt


def pytest_sessionstart(session):
    # The only reason to skip: without the model there is nothing to serve.
    if not TROUPE_MODEL.is_file():
        pytest.exit(f"SKIPPED: model file {TROUPE_MODEL} is missing (bash scripts/fetch-model.sh fetches it)",
                    returncode=SKIP_CODE)
    if not os.access(TROUPE_BIN, os.X_OK):
        pytest.exit(f"troupe binary {TROUPE_BIN} not found: build it first (bash scripts/build.sh)", returncode=2)
