"""The plugin registry: built-ins and third-party packs through the same entry-point groups."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

import malhar
from malhar import registry
from malhar.operator import PassThroughUnifier
from malhar.testing.operators import Collector, ListInput
from tests.fixtures import ACME, BROKEN, PACKS, FakeSite, forget_packs


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSite]:
    fake = FakeSite(tmp_path / "site")
    monkeypatch.syspath_prepend(str(PACKS))
    monkeypatch.syspath_prepend(str(fake.path))
    yield fake
    forget_packs()


def test_builtins_are_registered_through_the_entry_point_group() -> None:
    found = registry.available()
    assert found["ListInput"].obj is ListInput
    assert found["Collector"].obj is Collector
    assert found["PassThroughUnifier"].obj is PassThroughUnifier
    assert (found["ListInput"].kind, found["Collector"].kind) == ("input", "operator")
    assert found["PassThroughUnifier"].kind == "unifier"
    listed = {ep.name: ep.value for ep in metadata.entry_points(group=registry.OPERATORS_GROUP)}
    entry = found["ListInput"]
    assert listed["ListInput"] == entry.target == "malhar.testing.operators:ListInput"
    assert (entry.group, entry.distribution, entry.version) == (
        "malhar.operators",
        "malhar",
        malhar.__version__,
    )
    assert entry.doc.startswith("Emits ``windows[i]``")
    assert entry.outputs == ("output",) and entry.inputs == ()
    assert registry.load("Collector") is Collector


def test_a_third_party_pack_is_listed_and_loadable(site: FakeSite) -> None:
    site.install(ACME)
    found = registry.available()
    doubler = found["Doubler"]
    assert (doubler.kind, doubler.distribution, doubler.version) == (
        "operator",
        "acme-pack",
        "1.2.3",
    )
    assert doubler.pack == "acme-pack 1.2.3"
    assert doubler.doc == "Multiplies every number by ``factor``."
    assert (doubler.inputs, doubler.outputs) == (("input",), ("output",))
    assert found["LineOutput"].kind == "connector"
    assert registry.load("Doubler").__module__ == "acme_pack.ops"
    apps = registry.applications()
    assert apps["acme-doubling"].kind == "application"
    assert apps["AcmeDoubling"].doc == "The same application in Apex's StreamingApplication form."
    kinds = [e.kind for e in registry.entries()]
    assert kinds == sorted(kinds, key=registry.KINDS.index)
    builtin_connectors = {
        "JdbcOutput",
        "JdbcPollInput",
        "KafkaInputOperator",
        "KafkaJsonInputOperator",
        "KafkaOutputOperator",
        "KafkaTextInputOperator",
        "LinesFileInput",
        "CsvFileInput",
        "JsonLinesFileInput",
        "ParquetFileInput",
        "FileOutput",
        "ParquetFileOutput",
        "CsvFileOutput",
        "JsonLinesFileOutput",
        "LinesFileOutput",
    }
    assert {e.name for e in registry.entries(("connector",))} == {"LineOutput", *builtin_connectors}


def test_broken_entry_points_carry_their_error_and_never_break_the_listing(
    site: FakeSite,
) -> None:
    site.install(ACME)
    site.install(BROKEN, name="broken-pack", version="0.0.1")
    found = registry.available()
    assert found["Missing"].error == "ModuleNotFoundError: No module named 'acme_missing'"
    assert found["Explodes"].error == "RuntimeError: acme explodes: the pack is misconfigured"
    assert "is a function, not an Operator subclass" in found["NotAnOperator"].error
    assert found["Doubler"].ok and found["Collector"].ok
    assert registry.applications()["broken-app"].error.startswith("AttributeError")
    assert len([e for e in registry.entries() if not e.ok]) == 4
    with pytest.raises(registry.BrokenEntryError, match="acme explodes") as info:
        registry.load("Explodes")
    assert "broken-pack 0.0.1" in str(info.value)


def test_unknown_names_suggest_close_matches() -> None:
    with pytest.raises(registry.UnknownNameError) as info:
        registry.load("Colector")
    assert info.value.suggestions[0] == "Collector"
    assert "did you mean 'Collector'" in str(info.value)
    with pytest.raises(registry.UnknownNameError) as info:
        registry.load("listinput")
    assert info.value.suggestions[0] == "ListInput"  # LinesFileInput is close too
    with pytest.raises(registry.UnknownNameError) as info:
        registry.load("Zebra")
    assert info.value.suggestions == []
    assert "malhar list" in str(info.value)


def test_a_registered_class_can_be_named_by_its_class_name() -> None:
    # `malhar info JdbcPollInputOperator` failed: it is registered as JdbcPollInput
    from malhar.io.jdbc import JdbcOutputOperator, JdbcPollInputOperator

    assert registry.load("JdbcPollInputOperator") is JdbcPollInputOperator
    assert registry.load("JdbcOutputOperator") is JdbcOutputOperator
    assert registry.load("JdbcPollInput") is JdbcPollInputOperator


def test_the_same_name_from_two_packs_is_an_error_naming_both(site: FakeSite) -> None:
    site.install({"malhar.operators": {"Collector": "acme_pack.ops:Doubler"}}, name="clash-pack")
    entry = registry.available()["Collector"]
    assert "registered twice" in entry.error
    assert "malhar.testing.operators:Collector" in entry.error
    assert "acme_pack.ops:Doubler (from clash-pack 1.2.3)" in entry.error
    with pytest.raises(registry.BrokenEntryError, match="module:Class"):
        registry.load("Collector")
    assert registry.load("malhar.testing.operators:Collector") is Collector


def test_classes_can_be_named_by_module_path(site: FakeSite) -> None:
    assert registry.load("acme_pack.ops:Doubler").__name__ == "Doubler"
    with pytest.raises(registry.RegistryError, match="not an Operator class"):
        registry.load("malhar.dag:DAG")
    with pytest.raises(registry.RegistryError, match="did you mean 'Doubler'"):
        registry.load("acme_pack.ops:Dubler")
    with pytest.raises(registry.RegistryError, match="cannot import 'acme_nowhere'"):
        registry.load("acme_nowhere:Thing")


def test_describe_class_lists_ports_properties_and_arguments(site: FakeSite) -> None:
    described = registry.describe_class(registry.load("acme_pack.io:LineOutput"))
    assert described["class"] == "acme_pack.io:LineOutput"
    assert [(p["name"], p["direction"], p["optional"]) for p in described["ports"]] == [
        ("input", "input", False)
    ]
    props = {p["name"]: p for p in described["properties"]}
    assert props["path"]["constraints"] == ["required"]
    assert props["path"]["doc"] == "the file to write"
    assert props["password"]["constraints"] == ["pattern '[a-z]{8,}'"]
    assert registry.describe_class(ListInput)["args"] == ["windows"]
    assert registry.describe_class(Collector)["args"] == []


def test_a_bare_class_name_in_an_application_file_is_looked_up_in_malhar_and_malhar_algo() -> None:
    """``validate`` prints ``codec FieldCodec('click_id')``: the same name in a JSON
    application's STREAM_CODEC said "unknown class"."""
    from malhar.algo import FieldCodec
    from malhar.app.config import construct

    codec = construct({"class": "FieldCodec", "args": ["click_id"]})
    assert isinstance(codec, FieldCodec) and repr(codec) == "FieldCodec('click_id')"
    assert repr(construct({"class": "KeyCodec", "args": ["id"]})) == "KeyCodec('id',)"
    with pytest.raises(ValueError, match=r"unknown class 'FieldCodc'.*did you mean 'FieldCodec'"):
        construct({"class": "FieldCodc"})
