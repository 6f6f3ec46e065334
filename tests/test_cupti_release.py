"""With ``TRITON_DIST_AUTOTUNE_CUPTI_TEARDOWN=1``, once a whole tuning is over, CUPTI is finalized
where the plugin's profiler sessions left it subscribed (``kernel_time.release``, from ``job.run``):
kineto keeps CUPTI's callbacks on every later launch of the process unless ``TEARDOWN_CUPTI=1`` is
set as a session stops. The next session of the plugin's starts with the switch on, so that kineto
initialises CUPTI again the way it supports beside CUDA graphs.

No GPU (and so no CUPTI) is here: ``torch.profiler.profile`` is stood in for by a session that
records what ``TEARDOWN_CUPTI`` said as it stopped, ``torch.version.cuda`` names a CUDA release, and
``torch.cuda.synchronize`` (the runtime call in whose callback kineto finishes the teardown) is
counted; each test says which. The tunings are real ones of every front end, through the interpreter.
"""

import os

import pytest
import torch
from test_front_ends import FRONT_ENDS

from triton_dist_plugin import kernel_time


class Sessions:
    """Stands in for ``torch.profiler.profile`` (no CUPTI here): each session's ``TEARDOWN_CUPTI``
    as it stopped, and the synchronisations that followed."""

    def __init__(self, monkeypatch, cuda="12.8", fail=False, on=True):
        self.starts: list = []
        self.stops: list = []
        self.syncs = 0
        self.fail = fail
        sessions = self

        class Profile:
            def __init__(self, activities=None):
                pass

            def start(self):
                sessions.starts.append(os.environ.get(kernel_time.TEARDOWN_ENV))
                if sessions.fail:
                    raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

            def stop(self):
                sessions.stops.append(os.environ.get(kernel_time.TEARDOWN_ENV))

        monkeypatch.setattr("torch.profiler.profile", Profile)
        monkeypatch.setattr(torch.version, "cuda", cuda)
        monkeypatch.setattr(torch.cuda, "synchronize", self.sync)
        monkeypatch.setattr(kernel_time, "profiler_busy", lambda: False)
        monkeypatch.delenv(kernel_time.TEARDOWN_ENV, raising=False)
        monkeypatch.setattr(kernel_time, "_finalized", False)
        if on:
            monkeypatch.setenv(kernel_time.RELEASE_ENV, "1")
        else:
            monkeypatch.delenv(kernel_time.RELEASE_ENV, raising=False)

    def sync(self, device=None):
        self.syncs += 1


def _left_subscribed(monkeypatch):
    """As a tuning's sessions leave it (``_cuda_session`` sets this as it starts one)."""
    monkeypatch.setattr(kernel_time, "_subscribed", True)


def test_release_tears_cupti_down_once_and_puts_the_switch_back(monkeypatch):
    sessions = Sessions(monkeypatch)
    _left_subscribed(monkeypatch)
    kernel_time.release()
    assert sessions.stops == ["1"] and sessions.syncs == 1
    assert kernel_time.TEARDOWN_ENV not in os.environ
    kernel_time.release()  # nothing left subscribed since: nothing to do
    assert sessions.stops == ["1"]


def test_off_by_default(monkeypatch):
    sessions = Sessions(monkeypatch, on=False)
    _left_subscribed(monkeypatch)
    kernel_time.release()
    assert sessions.stops == [] and sessions.starts == []


def test_the_next_session_after_a_teardown_starts_with_the_switch_on_and_only_that_one(monkeypatch):
    sessions = Sessions(monkeypatch)
    with kernel_time._cuda_session():  # before any teardown: the switch stays off
        pass
    kernel_time.release()
    for _ in range(2):
        with kernel_time._cuda_session():
            pass
    # the first session, the teardown's own, the one after it (lazy re-init), the next one
    assert sessions.starts == [None, "1", "1", None]
    assert sessions.stops == [None, "1", None, None]
    assert kernel_time.TEARDOWN_ENV not in os.environ


def test_release_does_nothing_where_no_session_of_ours_ran(monkeypatch):
    sessions = Sessions(monkeypatch)
    monkeypatch.setattr(kernel_time, "_subscribed", False)
    kernel_time.release()
    assert sessions.stops == [] and sessions.syncs == 0


@pytest.mark.parametrize("value", ["0", "1", ""])
def test_a_switch_the_user_or_torch_set_is_theirs(monkeypatch, value):
    """Torch sets ``TEARDOWN_CUPTI=0`` where CUDA graphs would not survive a re-initialisation; a
    user's "1" has kineto tear down at every stop already."""
    sessions = Sessions(monkeypatch)
    monkeypatch.setenv(kernel_time.TEARDOWN_ENV, value)
    _left_subscribed(monkeypatch)
    kernel_time.release()
    assert sessions.stops == [] and os.environ[kernel_time.TEARDOWN_ENV] == value


@pytest.mark.parametrize("cuda", ["12.4", "11.8", None, "weird"])
def test_no_teardown_on_a_cuda_whose_graphs_do_not_survive_it(monkeypatch, cuda):
    sessions = Sessions(monkeypatch, cuda=cuda)
    _left_subscribed(monkeypatch)
    kernel_time.release()
    assert sessions.stops == []


@pytest.mark.parametrize("cuda", ["12.6", "12.10", "13.0"])
def test_teardown_on_cuda_12_6_and_later(monkeypatch, cuda):
    sessions = Sessions(monkeypatch, cuda=cuda)
    _left_subscribed(monkeypatch)
    kernel_time.release()
    assert sessions.stops == ["1"]


def test_no_teardown_inside_a_session_of_the_users(monkeypatch):
    sessions = Sessions(monkeypatch)
    monkeypatch.setattr(kernel_time, "profiler_busy", lambda: True)
    _left_subscribed(monkeypatch)
    kernel_time.release()
    assert sessions.stops == []


def test_a_teardown_that_fails_is_never_the_tunings_failure(monkeypatch):
    sessions = Sessions(monkeypatch, fail=True)
    _left_subscribed(monkeypatch)
    kernel_time.release()  # does not raise
    assert sessions.starts == ["1"] and kernel_time.TEARDOWN_ENV not in os.environ
    assert not kernel_time._subscribed and not kernel_time._finalized


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the contextual tuner's logs go to ./.autotune_logs


@pytest.mark.parametrize("front", FRONT_ENDS)
def test_every_front_ends_whole_tuning_releases_cupti_once_it_is_over(front, recorder, monkeypatch, in_tmp):
    """A loop that times each candidate alone (one job each) does not tear down between them: the
    next candidate's session would initialise CUPTI again."""
    sessions = Sessions(monkeypatch)
    released = []
    real = kernel_time.release
    monkeypatch.setattr(kernel_time, "release", lambda: released.append(kernel_time._subscribed) or real())
    _left_subscribed(monkeypatch)
    got, want = FRONT_ENDS[front](monkeypatch)
    torch.testing.assert_close(got, want)
    assert recorder.timed or any(r.method != "none" for r in recorder.records)  # tuned, not answered otherwise
    if front == "subclass_alone":
        assert released == [] and sessions.stops == [] and kernel_time._subscribed
    else:
        assert released and released[0] is True and sessions.stops == ["1"] and not kernel_time._subscribed
    assert kernel_time.TEARDOWN_ENV not in os.environ
