"""The targets run's verdicts (benchmarks/targets.py): each target judged against the
fastest form of its peer in the same run, a floor shown beside the peers and never
judged instead of them. Pure logic: the judges read batch.py's JSON, made up here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import targets  # found through the path above


def _median(cpu_s_per_gib: float, wall_s: float = 1.0) -> dict[str, float]:
    return {
        "cpu_s_per_gib": cpu_s_per_gib,
        "cpu_ms_per_object": cpu_s_per_gib,
        "wall_s": wall_s,
        "bad_files": 0.0,
        "server_cpu_ms_per_object": 500.0,
    }


def _large(**cpu: float) -> dict[str, Any]:
    medians = {name.replace("_", "-").replace("-at-", "@"): _median(v) for name, v in cpu.items()}
    return {"median": medians, "config": {"objects": 1}}


def test_a_floor_above_s5cmd_does_not_meet_the_s5cmd_bound() -> None:
    # asyncdl 1.29x s5cmd, the floor itself 1.43x: judged against s5cmd alone.
    document = _large(
        asyncdl_get_first=0.862,
        asyncdl_get_first_at_uvloop=0.862,
        s5cmd=0.668,
        crt=0.700,
        parallel_ranges_pwrite=0.953,
        parallel_ranges_pwrite_at_uvloop=0.953,
        plain_get=0.9,
        plain_get_at_uvloop=0.9,
    )
    rows = targets.judge_large(document, "L")
    assert all("FLOOR" not in row.verdict for row in rows)
    against_s5cmd = [r for r in rows if "CPU per byte against s5cmd" in r.what]
    assert [r.verdict for r in against_s5cmd] == ["NOT MET", "NOT MET"]
    against_crt = [r for r in rows if "CPU per byte against the CRT" in r.what]
    assert [r.verdict for r in against_crt] == ["NOT MET", "NOT MET"]
    # The floor and one stream are shown beside the peers, with no verdict of their own.
    beside = [r for r in rows if "floor" in r.what or "stream" in r.what]
    assert len(beside) == 4
    assert {r.verdict for r in beside} == {"SHOWN"}


def test_a_target_is_judged_against_the_fastest_form_of_its_peer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    medians = {"obstore": _median(0.5), "obstore-plain": _median(0.4), "mine": _median(0.35)}
    monkeypatch.setitem(targets.PEER_FORMS, "obstore", ("obstore", "obstore-plain"))
    document = {"median": medians, "config": {"objects": 1}}
    row = targets.batch_ratio(
        document,
        target="1",
        what="tiny",
        metric="cpu_ms_per_object",
        unit="ms/obj",
        row="mine",
        peer="obstore",
        most=0.75,
        letter="T",
    )
    assert row.peer.startswith("obstore-plain ")
    assert row.verdict == "NOT MET"  # 0.35 / 0.4, not 0.35 / 0.5


def test_cp_r_must_take_at_most_four_fifths_of_s5cmd_wall() -> None:
    medians = {
        "asyncdl-cli": _median(1.0, wall_s=9.0),
        "asyncdl-cli@uvloop": _median(1.0, wall_s=7.9),
        "s5cmd": _median(1.0, wall_s=10.0),
    }
    rows = targets.judge_command({"median": medians, "config": {"objects": 10000}}, "C")
    assert [(r.target, r.verdict) for r in rows] == [("3", "NOT MET"), ("3", "MET")]
