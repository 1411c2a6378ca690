"""The one "did you mean" of every unknown-name error."""

from malhar.suggest import close_matches, did_you_mean


def test_a_distant_name_is_not_suggested_beside_a_close_one():
    names = ["ListInput", "Distinct", "LineInput", "ListOutput"]
    assert close_matches("ListInpt", names) == ["ListInput"]


def test_a_name_that_differs_in_case_comes_first():
    assert close_matches("listinput", ["ListInputs", "ListInput"]) == ["ListInput", "ListInputs"]


def test_near_misses_are_all_offered_closest_first():
    assert close_matches("partitons", ["parts", "PARTITIONS", "partition"]) == [
        "PARTITIONS",
        "partition",
    ]


def test_nothing_close_says_nothing():
    assert close_matches("xyz", ["color", "count"]) == []
    assert did_you_mean("xyz", ["color"]) == ""
    assert did_you_mean("colr", ["color", "count"]) == "; did you mean 'color'?"
