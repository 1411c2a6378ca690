"""librdkafka's log lines through malhar's logger: transient retries are not warnings."""

from __future__ import annotations

import logging
from typing import Any

from malhar.io.kafka.config import CLIENT_LOG


def test_a_coordinator_still_loading_is_logged_at_debug_not_warning(caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger=CLIENT_LOG.name):
        CLIENT_LOG.warning("GETPID [rdkafka#producer-1] Coordinator load in progress: retrying")
        CLIENT_LOG.warning("FAIL [rdkafka#producer-1] 127.0.0.1:1: Connect failed")
    assert [r.getMessage() for r in caplog.records] == [
        "FAIL [rdkafka#producer-1] 127.0.0.1:1: Connect failed"
    ]
    with caplog.at_level(logging.DEBUG, logger=CLIENT_LOG.name):
        CLIENT_LOG.warning("GETPID Coordinator load in progress: retrying")
    assert caplog.records[-1].levelname == "DEBUG"
