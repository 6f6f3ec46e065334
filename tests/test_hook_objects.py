"""A ``TuningRequest`` is the question being tuned, fixed once made; what its tuning finds lives in
``request.found``. Plugins written when the findings lived on the request still read them there,
and still assign them there, with a ``DeprecationWarning`` naming the new place."""

import dataclasses
import warnings

import pytest

from triton_dist_plugin import TuningFindings, TuningRequest
from triton_dist_plugin.hook_objects import FINDINGS

QUESTION = ("kernel_name", "key", "device", "nargs", "kwargs", "autotuner", "grid", "group")


def _request() -> TuningRequest:
    return TuningRequest("k", (1,), "cpu", {"n": 4}, {"BLOCK": 2}, autotuner="tuner", grid=(1,), group=None)


def test_the_question_and_the_findings_are_the_fields_we_name():
    """A new field is placed on purpose: in the question (frozen) or in the findings."""
    assert {f.name for f in dataclasses.fields(TuningRequest)} == {*QUESTION, "found"}
    assert set(FINDINGS) == {"notes", "reference", "prior", "prior_key", "prior_unseen", "ranking", "problem",
                             "model"}


@pytest.mark.parametrize("name", [*QUESTION, "found"])
def test_every_field_of_the_question_is_frozen(name):
    request = _request()
    before = getattr(request, name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(request, name, "changed")
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(request, name)
    assert getattr(request, name) is before


@pytest.mark.parametrize("name", FINDINGS)
def test_assigning_a_finding_on_the_request_warns_once_and_lands_in_found(name):
    request, value = _request(), ["a value"]
    with pytest.warns(DeprecationWarning, match=rf"request\.found\.{name}\b") as told:
        setattr(request, name, value)
    assert len([w for w in told if w.category is DeprecationWarning]) == 1
    assert getattr(request.found, name) is value and getattr(request, name) is value


def test_the_warning_names_the_plugins_own_line():
    request = _request()
    with pytest.warns(DeprecationWarning) as told:
        request.reference = "conservative"
    assert told[0].filename == __file__ and request.found.reference == "conservative"


def test_reading_and_appending_through_the_request_do_not_warn():
    request = _request()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        request.notes.append("kept 3 of 4")
        request.found.model = {"kept": 1}
        assert [getattr(request, name) for name in FINDINGS] == [getattr(request.found, n) for n in FINDINGS]
        request.found.prior = ["c"]
    assert request.notes is request.found.notes and request.found.notes == ["kept 3 of 4"]
    assert request.prior == ["c"] and request.model == {"kept": 1}


def test_requests_are_built_with_the_arguments_they_always_took():
    """Positions and keywords as before the findings moved: those given land in ``found``."""
    request = TuningRequest("k", (1,), "cpu", {"n": 4}, {"BLOCK": 2}, "tuner", (2,), ["a note"], "group",
                            prior=["c"], prior_key=(2,), prior_unseen=["d"], ranking=[1.0], problem="p",
                            model={"kept": 1}, reference="c")
    assert (request.kernel_name, request.key, request.device, request.nargs, request.kwargs, request.autotuner,
            request.grid, request.group) == ("k", (1,), "cpu", {"n": 4}, {"BLOCK": 2}, "tuner", (2,), "group")
    assert request.found == TuningFindings(notes=["a note"], reference="c", prior=["c"], prior_key=(2,),
                                           prior_unseen=["d"], ranking=[1.0], problem="p", model={"kept": 1})
    bare = TuningRequest("k", (1,), "cpu")
    assert bare.nargs == {} and bare.kwargs == {} and bare.found == TuningFindings()
    assert TuningRequest("k", (1,), "cpu").found is not bare.found  # never shared between requests


def test_a_copy_for_another_group_shares_the_findings():
    """The engine asks the question over its group through a copy: what it finds reaches the
    caller's request."""
    request = _request()
    over = dataclasses.replace(request, group="ranks")
    over.found.notes.append("screened 2 of 4")
    assert over.group == "ranks" and request.group is None and request.notes == ["screened 2 of 4"]


def test_a_request_built_from_another_has_findings_of_its_own():
    import copy
    import dataclasses

    request = TuningRequest("k", (1,), "cpu")
    request.found.notes.append("mine")
    request.found.ranking = [3.0]
    replaced = dataclasses.replace(request, notes=["fresh"], ranking=None)
    assert request.notes == ["mine"] and request.ranking == [3.0]
    assert replaced.notes == ["fresh"] and replaced.ranking is None
    copied = copy.copy(request)  # shallow, as it always was; but assigning a finding stays the copy's
    copied.found.ranking = [1.0]
    assert request.ranking == [3.0] and copied.found is not request.found


def test_a_dataclass_subclass_of_the_request_is_built_and_then_fixed():
    import dataclasses

    @dataclasses.dataclass
    class Mine(TuningRequest):
        extra: int = 0

    mine = Mine("k", (1,), "cpu", extra=2)
    assert (mine.kernel_name, mine.extra, mine.notes) == ("k", 2, [])
    with pytest.raises(dataclasses.FrozenInstanceError):
        mine.key = (2,)
