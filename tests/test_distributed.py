"""Multi-rank tuning on real gloo groups (one process per rank on 127.0.0.1)."""

import json
import os

import fork_server
import pytest
import torch
from helpers import run_ranks


@pytest.mark.parametrize("world", [2, 4])
def test_max_over_ranks_picks_the_min_of_the_max(world, tmp_path):
    results = run_ranks("max", world, tmp_path)
    expected = min("abc", key=lambda m: max(
        {0: {"a": 1, "b": 3, "c": 4}, 1: {"a": 5, "b": 2, "c": 1}, 2: {"a": 1, "b": 1, "c": 2},
         3: {"a": 2, "b": 3, "c": 1}}[r][m] for r in range(world)))
    assert {r["result"] for r in results} == {expected}
    assert expected == "b"  # rank 0 alone would pick a, rank 1 alone c


def test_world_is_used_when_no_group_is_given(tmp_path):
    assert {r["result"] for r in run_ranks("world_default", 2, tmp_path)} == {"b"}


def test_divergent_pruning_is_a_clear_error_on_every_rank(tmp_path):
    results = run_ranks("divergent_prune", 2, tmp_path)
    for r in results:
        assert "RankMismatch" in r["error"] and "retained candidates" in r["error"]


def test_candidate_spaces_of_equal_length_but_other_values_are_a_clear_error(tmp_path):
    for r in run_ranks("divergent_space", 2, tmp_path):
        assert "RankMismatch" in r["error"] and "retained candidates" in r["error"]


def test_divergent_keys_are_a_clear_error_on_every_rank(tmp_path):
    for r in run_ranks("divergent_key", 2, tmp_path):
        assert "RankMismatch" in r["error"] and "disagree on the key" in r["error"]


def test_one_rank_cache_hit_is_shared_not_a_hang(tmp_path):
    results = run_ranks("one_rank_hit", 2, tmp_path)
    assert [r["entries_on_disk"] for r in results] == [1, 0]
    assert [r["first"] for r in results] == ["b", "b"]
    assert [r["result"] for r in results] == ["b", "b"]  # rank 0's cached pick, shared with rank 1
    assert [r["tuned_here"] for r in results] == [0, 0]  # nobody re-tuned (it would pick "a" now)


def test_a_rank_that_never_arrives_times_out_instead_of_hanging(tmp_path):
    results = run_ranks("silent_rank", 2, tmp_path, timeout_s="3")
    assert "no agreement across ranks within 3s" in results[0]["error"]


@pytest.mark.parametrize("world", [2, 8])
def test_a_rank_that_exits_is_reported_as_gone_not_as_a_timeout(world, tmp_path):
    results = run_ranks("dead_rank", world, tmp_path, timeout_s="30", wall=240)
    for r in results:
        if r["rank"] == 1:
            continue  # the one that left
        error = r["error"]
        assert "another rank exited, crashed or closed its connection" in error, (r["rank"], error)
        assert "no agreement" not in error and r["seconds"] < 20


@pytest.mark.timeout(660)  # its own wall (600 s) decides, with a clearer message
def test_eight_ranks_of_a_node_take_one_pick_per_kernel_with_max_and_with_the_leader(tmp_path):
    """Eight gloo ranks on one host, each timing real kernels with its own clock."""
    ranks = run_ranks("node", 8, tmp_path, timeout_s="120", wall=600)
    for name in ("add", "scale"):
        for label in ("together", "leader"):
            picks = [r[f"{name}_{label}"] for r in ranks]
            assert len(set(picks)) == 1, (name, label, picks)
        assert all(r[f"{name}_together_timed"] > 0 for r in ranks)  # every rank timed, the MAX decided
        assert ranks[0][f"{name}_leader_timed"] > 0 and all(r[f"{name}_leader_timed"] == 0 for r in ranks[1:])


def test_plain_kernel_tuned_over_a_group_ends_with_one_config(tmp_path):
    results = run_ranks("kernel_group", 2, tmp_path)
    assert [r["alone"] for r in results] == [128, 256]  # alone, each rank picks its own favourite
    assert [r["together"] for r in results] == [512, 512]  # max: 128->8, 256->9, 512->6


def test_a_subclass_tuning_loop_in_a_group_ends_with_one_config(tmp_path):
    results = run_ranks("subclass_group", 2, tmp_path)
    assert [r["alone"] for r in results] == [128, 256]
    assert [r["together"] for r in results] == [512, 512]  # the subclass's own min over the MAX


def test_all2all_example_tunes_on_gloo_and_writes_a_manifest(tmp_path):
    results = run_ranks("all2all", 2, tmp_path, wall=300)
    picks = [[(r["CHUNK"], r["DEPTH"]) for r in res["results"]] for res in results]
    assert picks[0] == picks[1]  # every rank uses the same config per shape
    assert all(r["correct"] for res in results for r in res["results"])
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [(m["rows"], m["CHUNK"], m["DEPTH"]) for m in manifest] == [
        (r["rows"], r["CHUNK"], r["DEPTH"]) for r in results[0]["results"]]


def test_contextual_is_dist_takes_the_max_across_ranks(tmp_path):
    results = run_ranks("contextual", 2, tmp_path)
    assert [r["alone"] for r in results] == [32, 64]  # each rank's own favourite
    assert [r["dist"] for r in results] == [128, 128]  # min over candidates of the max over ranks


def test_contextual_divergence_is_a_clear_error_on_every_rank(tmp_path):
    for r in run_ranks("contextual_diverge", 2, tmp_path):
        assert "RankMismatch" in r["error"] and "key" in r["error"]


def test_a_persisted_kernel_pick_on_one_rank_is_every_ranks_and_nothing_is_timed(tmp_path):
    results = run_ranks("kernel_persist", 2, tmp_path)
    assert [r["stored"] for r in results] == [1, 0]  # one writer: rank 0
    assert results[0]["picks"][0] == results[1]["picks"][0] == results[0]["picks"][1] == results[1]["picks"][1]
    for r in results:
        first, second = r["timed"]
        assert first > 0 and second == 0, r["timed"]  # timed while tuning, not once the entry exists


def test_ranks_sharing_a_compile_cache_split_the_candidates_and_share_failures(tmp_path):
    ranks = run_ranks("compile_split", 2, tmp_path)
    # Candidate i has size 2**i: largest first, round-robin, rank 0 compiles 6, 4, 2, 0 and
    # rank 1 compiles 5, 3, 1; then each loads the other's share, except the candidate that
    # failed there (4), which rank 1 never compiles.
    shares = [{0, 2, 4, 6}, {1, 3, 5}]
    for r, rank in enumerate(ranks):
        calls = rank["shared"]["calls"]
        assert set(calls[: len(shares[r])]) == shares[r], calls
        assert sorted(calls) == sorted(set(range(7)) - ({4} if r == 1 else set())), calls
        assert set(rank["shared"]["failed"]) == {"4"}
    assert "cannot compile" in ranks[0]["shared"]["failed"]["4"]
    assert ranks[1]["shared"]["failed"]["4"] == "failed to compile on rank 0"
    # Ranks with caches of their own compile everything themselves.
    for rank in ranks:
        assert sorted(rank["separate"]["calls"]) == list(range(7))
        assert "cannot compile" in rank["separate"]["failed"]["4"]


def test_leader_strategy_times_on_rank_0_only_and_every_rank_takes_its_pick(tmp_path):
    ranks = run_ranks("leader", 2, tmp_path)
    # Rank 0 alone finds a fastest (10 ms); under MAX the pick would be b (see the max test).
    assert [r["function_pick"] for r in ranks] == ["a", "a"]
    assert ranks[0]["function_timed"] >= 3 and ranks[1]["function_timed"] == 0
    assert ranks[0]["kernel_pick"] == ranks[1]["kernel_pick"]
    assert ranks[0]["kernel_timed"] > 0 and ranks[1]["kernel_timed"] == 0
    assert all(r["correct"] for r in ranks)


def test_interleaved_rounds_on_a_device_stay_in_step_when_a_finalist_fails_on_one_rank(tmp_path):
    results = run_ranks("device_rounds", 2, tmp_path)
    assert all(r["correct"] for r in results)
    # Every rank asked for the same timings in the same order (the failing one too, until it failed).
    asked = [r["asked"] for r in results]
    assert asked[0] == asked[1][: len(asked[0])] or asked[1] == asked[0][: len(asked[1])]
    assert [a[0] for a in asked[0]] == [a[0] for a in asked[1]]
    # The fastest failed on rank 1 in the full measurement's second round: run no more, on any rank.
    full = [a for a in asked[0] if a[2] is not None and a[2] > 25]
    assert sum(a[0] == 4 for a in full) == 2, full
    assert {r["pick"] for r in results} == {1}
    assert "lost the device on rank 1" in results[1]["failed"]["4"]
    assert any("interleaved rounds" in note for note in results[0]["notes"])


def test_the_accuracy_check_under_a_group_screens_the_same_candidates_and_picks_a_right_one(tmp_path):
    results = run_ranks("accuracy", 2, tmp_path)
    assert [r["right"] for r in results] == [True, True]
    assert results[0]["pick"] == results[1]["pick"] in (1, 2)
    assert results[0]["timed"] == results[1]["timed"]


def test_ranks_with_different_checks_refuse_at_once(tmp_path):
    results = run_ranks("checks_differ", 2, tmp_path, timeout_s="60")
    for r in results:
        assert "RankMismatch" in r["error"] and "disagree on the checks" in r["error"], r
        assert "check_accuracy=" in r["error"] and r["seconds"] < 30  # not the 60 s collective timeout


FRONT_ENDS = {"kernel", "subclass", "subclass_alone", "subclass_batch_bench", "function", "contextual"}


@pytest.mark.parametrize("scenario, what, named", [
    ("effort_differs", "checks", ("'effort': 'full'", "'effort': 'quick'")),
    ("frozen_differs", "frozen mode", ("frozen mode 'strict'", "frozen mode None"))])
def test_ranks_with_different_efforts_or_frozen_modes_refuse_at_once_in_every_front_end(scenario, what, named,
                                                                                         tmp_path):
    results = run_ranks(scenario, 2, tmp_path, timeout_s="60")
    for r in results:
        assert set(r["errors"]) == FRONT_ENDS, r
        for front, error in r["errors"].items():
            # Frozen, the contextual tuner runs its function as it is: its miss is then a plain launch's,
            # beside the other rank's contextual job, whose checks differ from it first.
            expected = "checks" if front == "contextual" and scenario == "frozen_differs" else what
            assert error and "RankMismatch" in error and f"disagree on the {expected}" in error, (front, error)
            assert expected == "checks" and scenario == "frozen_differs" or any(t in error for t in named), error
            assert float(error.rsplit("(", 1)[1].rstrip("s)")) < 30, (front, error)  # not the 60 s timeout


def test_frozen_mode_on_one_rank_does_not_matter_where_a_rank_has_the_stored_pick(tmp_path):
    results = run_ranks("frozen_one_rank_with_a_stored_pick", 2, tmp_path, timeout_s="60")
    assert results[0]["fresh"] == results[1]["fresh"] == results[0]["tuned"] == results[1]["tuned"], results


def test_a_subclass_batch_bench_that_returns_other_configs_on_each_rank_still_picks_alike(tmp_path):
    results = run_ranks("own_batch_bench_loses_other_configs", 2, tmp_path, timeout_s="60")
    assert results[0]["pick"] == results[1]["pick"] == 32, results  # the fastest both ranks timed
    assert results[0]["timings"]["64"] == float("inf") and "128" not in results[0]["timings"]  # 64: lost there


def test_every_hook_of_a_tuning_in_a_group_sees_one_request_over_that_group(tmp_path):
    (result,) = run_ranks("one_request", 1, tmp_path)
    assert {"prune", "time"} <= set(result["hooks"]), result
    assert result["requests"] == 1 and result["over_the_group"], result


def test_frozen_nearest_under_a_group_launches_rank_0s_pick_on_every_rank(tmp_path):
    results = run_ranks("frozen_group", 2, tmp_path)
    assert results[0]["pick"] == results[1]["pick"] == 512  # the pick tuned together (rank 0's disk)


def test_a_forked_rank_gets_what_a_fresh_process_would(tmp_path):
    """``fork_server``: each rank its environment, directory, arguments and what was derived from them at
    import, and fresh seeds, as a fresh process would (a hash seed of its own beside its neighbour's)."""
    results = run_ranks("environment", 3, tmp_path, timeout_s="7")
    for r in results:
        home = str(tmp_path / f"home{r['rank']}")
        assert r["home"] == home and r["timeout"] == "7" and r["cwd"] == r["start_dir"] == str(tmp_path), r
        assert r["argv"][:3] == ["environment", str(r["rank"]), "3"], r
        assert r["triton_home"] in (None, home + "/") and r["user_base"] == os.path.join(home, ".local"), r
    assert len({r["random"] for r in results}) == len({r["numpy"] for r in results}) == 3, results
    # torch seeds its generator at random in each process (2.13 does), or with its fixed default.
    seeds = {r["seed"] for r in results}
    assert len(seeds) == len({tuple(r["torch"]) for r in results}) == 3 or seeds == {torch.Generator().initial_seed()}
    assert results[0]["hash"] != results[1]["hash"], results
    if fork_server.USABLE:  # forked: the ranks' parents are the two servers (even ranks, odd ones)
        assert not [s for s in fork_server.plain_starts if s.startswith("environment ")], fork_server.plain_starts
        assert results[0]["parent"] == results[2]["parent"] != results[1]["parent"] != os.getpid(), results
    else:  # started afresh
        assert {r["parent"] for r in results} == {os.getpid()}, results
