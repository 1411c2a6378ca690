"""The JDBC output's settings: one Property declaration per setting, shared by the operator
(its properties), the Spark sink (its string options) and the store; secrets masked."""

from __future__ import annotations

import pytest

from malhar.io.base.output import WindowKey
from malhar.io.jdbc import (
    JdbcConfigError,
    JdbcOutputOperator,
    JdbcSettings,
    JdbcSinkSettings,
    JdbcStore,
)
from malhar.properties import properties_of

URL = "postgresql+psycopg2://app:S3cret-pw@db:5432/shop"


def test_the_operator_properties_are_the_settings() -> None:
    assert properties_of(JdbcOutputOperator) == properties_of(JdbcSettings)
    sink_only = set(properties_of(JdbcSinkSettings)) - set(properties_of(JdbcSettings))
    assert sink_only == {"name", "operator", "verify_reruns"}
    op = JdbcOutputOperator(URL, table="words", mode="merge_add", key_columns="word", batch_size=50)
    settings = op.settings()
    assert type(settings) is JdbcSettings
    assert (settings.table, settings.keys, settings.batch_size) == ("words", ("word",), 50)
    assert settings.lock_timeout == 30 and settings.statement_timeout == 300
    with pytest.raises(ValueError, match=r"no property 'batchsize'; did you mean 'batch_size'"):
        JdbcOutputOperator(URL, table="words", batchsize=5)


def test_spark_options_are_parsed_from_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALHAR_TEST_PG_PASSWORD", "S3cret-pw")
    s = (
        JdbcSinkSettings()
        .from_options(
            {
                "url": "postgresql+psycopg2://app@db:5432/shop",
                "password": "${env:MALHAR_TEST_PG_PASSWORD}",  # the sink refuses a literal one
                "name": "q",
                "Table": "words",
                "mode": "upsert",
                "key_columns": "a, b",
                "batch_size": "500",
                "lock_timeout": "2.5",
                "skip_older_windows": "true",
                "verify_reruns": "false",
                "checkpointlocation": "/ck",  # Spark's own
            }
        )
        .check()
    )
    assert (s.keys, s.batch_size, s.lock_timeout, s.skip_older_windows) == (
        ("a", "b"),
        500,
        2.5,
        True,
    )
    assert s.verify_reruns is False
    with pytest.raises(JdbcConfigError, match="cannot read 'many' as int"):
        JdbcSinkSettings().from_options({"url": URL, "batch_size": "many"})


def test_checks_across_settings_and_secrets() -> None:
    bad = JdbcSettings().configure(url=URL, mode="merge_add", batch_size=1)
    with pytest.raises(JdbcConfigError) as err:
        bad.check()
    assert "either table (with mode) or statement is required" in str(err.value)
    assert "mode 'merge_add' needs key_columns" in str(err.value)
    with pytest.raises(JdbcConfigError, match="invalid JdbcSettings settings"):
        JdbcStore(bad, WindowKey("a", "b", 0))

    s = JdbcSettings().configure(url=URL, table="t", password="An0ther-secret")
    shown = repr(s) + repr(JdbcOutputOperator(URL, table="t", password="An0ther-secret"))
    assert "S3cret-pw" not in shown and "An0ther-secret" not in shown
    assert "app:***@db" in shown and "password=***" in shown
    assert s.redacted_url == "postgresql+psycopg2://app:***@db:5432/shop"


def test_a_libpq_url_uses_psycopg2() -> None:
    s = JdbcSettings().configure(url="postgres://app:pw@db/shop", table="t")
    assert s.sqlalchemy_url().drivername == "postgresql+psycopg2"
    s = JdbcSettings().configure(url="postgresql://app@db/shop", table="t", password="pw")
    url = s.sqlalchemy_url()
    assert (url.drivername, url.password) == ("postgresql+psycopg2", "pw")


@pytest.mark.parametrize(
    "password", ["pa/ss", "pa#ss", "pa?ss", "[pa]ss", "p@ss:w/rd"], ids=lambda p: repr(p)
)
def test_passwords_with_url_characters_never_shown(password: str) -> None:
    # SQLAlchemy takes these characters into a password unencoded; urlsplit does not
    url = f"postgresql://app:{password}@127.0.0.1:1/shop"
    s = JdbcSettings().configure(url=url, table="t")
    if "@" not in password:  # one with "@" must be %-encoded to connect (but is masked too)
        assert s.sqlalchemy_url().password == password
    shown = [s.redacted_url, repr(s), s.target, repr(JdbcOutputOperator(url, table="t"))]
    assert all(password not in text for text in shown), shown
    assert s.redacted_url == "postgresql://app:***@127.0.0.1:1/shop"


def test_a_url_missing_its_colon_is_masked_in_errors() -> None:
    s = JdbcSettings().configure(url="postgresql//app:S3CRET-typo@db/shop", table="t")
    with pytest.raises(JdbcConfigError) as err:
        s.check()
    assert "S3CRET-typo" not in str(err.value) + repr(s)
