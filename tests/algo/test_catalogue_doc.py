"""docs/operators.md is what the generator makes from the registry (CI fails on drift)."""

from __future__ import annotations

from malhar import registry
from malhar.algo import catalogue_doc


def test_the_checked_in_catalogue_is_generated_from_the_code() -> None:
    path = catalogue_doc.default_path()
    assert path.read_text() == catalogue_doc.generate(), (
        "docs/operators.md is out of date: run python -m malhar.algo.catalogue_doc --write"
    )


def test_every_registered_operator_is_documented_with_its_partitioning() -> None:
    text = catalogue_doc.generate()
    for name, entry in registry.available().items():
        if entry.target.startswith("malhar.algo.") and entry.kind != "unifier":
            section = text.split(f"### {name}\n", 1)
            assert len(section) == 2, name
            body = section[1].split("\n### ", 1)[0]
            assert "Partitioning:" in body and "```pycon" in body, name


def test_the_check_command_fails_on_a_stale_file(tmp_path) -> None:
    # main() is what ``python -m malhar.algo.catalogue_doc`` runs (in process: a second
    # interpreter importing every registered pack costs a minute on a loaded machine)
    stale = tmp_path / "operators.md"
    stale.write_text("# old\n")
    argv = ["--check", "--path", str(stale)]
    assert catalogue_doc.main(argv) == 1
    assert catalogue_doc.main(["--write", "--path", str(stale)]) == 0
    assert stale.read_text() == catalogue_doc.generate()
    assert catalogue_doc.main(argv) == 0
