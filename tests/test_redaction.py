"""URL masking: the one function every message that names a URL goes through."""

from __future__ import annotations

import pytest

from malhar.io.jdbc.config import JdbcConnectionSettings
from malhar.redaction import redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:pw@db:5432/shop", "postgresql://app:***@db:5432/shop"),
        # a password in the query was shown whole (and by a value filter, only from 4
        # characters on)
        ("postgresql://app@db/shop?password=abc", "postgresql://app@db/shop?password=***"),
        (
            "jdbc:postgresql://db/shop?user=app&sslpassword=k&ssl=true",
            "jdbc:postgresql://db/shop?user=app&sslpassword=***&ssl=true",
        ),
        ("see http://h/x?a=1 and ?token=zz;next", "see http://h/x?a=1 and ?token=***;next"),
        ("select * from t where a=1", "select * from t where a=1"),
        # a URL percent-encoded in a query value: its password shows once decoded
        (
            "hdfs://nn:8020/ck?webhdfs=http%3A%2F%2Fu%3Apw%40nn%3A9870",
            "hdfs://nn:***@nn:9870",
        ),
        ("hdfs://nn:8020/ck%20x?user=a", "hdfs://nn:8020/ck%20x?user=a"),
    ],
)
def test_redact_url_masks_user_and_query_passwords(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_referenced_jdbc_url_is_named_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO_DB_URL", "postgresql://app:pw@db:5432/shop?password=pw")
    settings = JdbcConnectionSettings().configure(url="${env:DEMO_DB_URL}")
    assert settings.redacted_url == "postgresql://app:***@db:5432/shop?password=***"


def test_a_reference_in_a_property_that_reads_none_is_refused_when_set() -> None:
    """``${env:...}`` in Kafka's bootstrap_servers was taken as a host name: validate said
    valid and the run failed after 30 s with librdkafka's "Failed to resolve '${env:0'"."""
    from malhar.io.jdbc import JdbcOutputOperator
    from malhar.io.kafka import KafkaOutputOperator
    from malhar.properties import PropertyError

    with pytest.raises(PropertyError, match=r"'\$\{env:BOOT\}' is a reference, which only"):
        KafkaOutputOperator(bootstrap_servers="${env:BOOT}", topic="t")
    assert JdbcOutputOperator("${env:DB_URL}", table="t").url == "${env:DB_URL}"  # read later
