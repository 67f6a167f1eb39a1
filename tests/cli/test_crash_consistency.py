"""Crash consistency: ``asyncdl cp -r`` and ``asyncdl sync`` killed with SIGKILL at
random moments over a mixed set (tiny objects, an empty one, multi-chunk ones, one
large enough to be journaled and resumed), run again after each kill; after every
kill nothing reported done is missing or wrong on disk and no target holds bytes of
no version of its object; at the end every file is byte-identical to its object and
no temp file, partial file or journal is left.

The ``power-loss`` variants zero a random piece of a journaled range of every partial
file after each kill (see ``crash_runs.zero_journaled``): the next run must fetch it
again, never publish (and report verified) a file with those zeros.

30 kills per test; ``ASYNCDL_CRASH_KILLS`` asks for more (``nox -s stress`` runs
200), ``ASYNCDL_CRASH_SEED`` replays a failure's seed (printed in its message).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asyncdl._files.writer import is_temp_file
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import CHUNK, payload
from .crash_runs import (
    Bucket,
    Campaign,
    Run,
    command,
    describe,
    leftovers,
    problems_after,
    run_once,
    targets,
    zero_journaled,
)

#: ``nox -s stress`` sets it (200), and then the plain-kill variants run too.
_ASKED = os.environ.get("ASYNCDL_CRASH_KILLS")
KILLS = int(_ASKED or "30")
#: Bytes per second the command may fetch: a run lasts long enough for kills to land
#: mid-transfer, short enough for 30 of them in the suite.
BANDWIDTH = 8 * 1024 * 1024
TINY = 40
#: Above the engine's write_size (1 MiB): journaled, and continued when run again.
LARGE = (2 * 1024 * 1024, 3 * 1024 * 1024)
#: The suite runs the power-loss variants only: they check after each kill all that a
#: plain kill's checks do (only a piece of one journaled range is zeroed; the rest
#: is continued as after a plain kill). A stress run adds the plain kills.
VARIANTS = pytest.mark.parametrize(
    "power_loss",
    [False, True] if _ASKED else [True],
    ids=["killed", "power-loss"] if _ASKED else ["power-loss"],
)
#: About a second per kill where nothing else runs; twice that on a busy machine.
TIMEOUT = pytest.mark.timeout(60 + 5 * KILLS)


def campaign() -> tuple[random.Random, Campaign]:
    given = os.environ.get("ASYNCDL_CRASH_SEED")
    seed = int(given) if given else random.SystemRandom().randrange(2**32)
    return random.Random(seed), Campaign(seed=seed, kills=KILLS)


def put_mixed(objects: Bucket, rng: random.Random) -> None:
    """The mixed set: an empty object, tiny ones (some in a subdirectory), multi-chunk
    ones below the write size (journaled, never continued), one above it."""
    sizes = {"empty": 0}
    # Many: a kill between a tiny file's create and its rename is then not rare.
    for n in range(TINY):
        sizes[f"{'sub/' if n % 3 == 0 else ''}tiny-{n}"] = rng.randint(1, 3000)
    for n in range(3):
        sizes[f"multi-{n}"] = rng.randint(2 * CHUNK, 6 * CHUNK)
    sizes["large.bin"] = rng.randint(*LARGE)
    for n, (name, size) in enumerate(sorted(sizes.items())):
        objects.put(objects.prefix + name, payload(size, seed=rng.randrange(2**32) + n))


def rewrite_some(objects: Bucket, rng: random.Random) -> None:
    """New bytes for about half the keys, and always for the large one: a sync that
    has finished has work again (and meets partials of objects that changed)."""
    for key in sorted(objects.current):
        if key.endswith("large.bin") or rng.random() < 0.5:
            size = len(objects.current[key])
            objects.put(key, payload(size, seed=rng.randrange(2**32)))


def expect_done(objects: Bucket, root: Path, final: Run, campaign: Campaign) -> None:
    """After the last, uninterrupted run: it succeeded, every file is its object's,
    nothing else is there, nothing of asyncdl's is left."""
    problems = problems_after(final, objects, root, records=True)
    if final.returncode != 0:
        problems.append(f"the last run failed (status {final.returncode}): {final.stderr}")
    want = {objects.relative(key): body for key, body in objects.current.items()}
    have = {path.relative_to(root).as_posix(): path.read_bytes() for path in targets(root)}
    problems += [f"{name}: missing at the end" for name in sorted(want.keys() - have.keys())]
    problems += [f"{name}: not an object's file" for name in sorted(have.keys() - want.keys())]
    problems += [
        f"{name}: differs from its object at the end"
        for name in sorted(want.keys() & have.keys())
        if have[name] != want[name]
    ]
    problems += [f"{name}: left behind" for name in leftovers(root)]
    assert not problems, campaign.fail(problems)


def kill_again_and_again(
    objects: Bucket,
    proxy: TcpProxy,
    argv: Callable[[Path], list[str]],
    root: Path,
    *,
    rng: random.Random,
    campaign: Campaign,
    power_loss: bool,
    sync: bool,
) -> None:
    # How long a whole run takes here (from its first request), measured into a
    # directory of its own: kills are drawn over that span, so they land mid-transfer
    # on a slow machine as on a fast one.
    whole = run_once(proxy, argv(root.with_name("whole")), -1, kill_after=None, json_lines=not sync)
    assert whole.returncode == 0, whole.stderr
    span = 1.1 * whole.elapsed
    campaign.note(f"a whole run takes {whole.elapsed:.3f} s")
    finished_last = False
    seen: set[str] = set()
    for number in range(KILLS):
        if sync and finished_last:
            rewrite_some(objects, rng)
        delay = rng.uniform(0, span)
        run = run_once(proxy, argv(root), number, kill_after=delay, json_lines=not sync)
        problems = problems_after(run, objects, root, records=sync)
        if not run.killed and run.returncode != 0:
            problems.append(f"run {number} failed (status {run.returncode}): {run.stderr}")
        zeroed = zero_journaled(root, rng) if power_loss else []
        temps = {name for name in leftovers(root) if is_temp_file(Path(name).name)}
        left, seen = sorted(temps - seen), temps
        extra = (f"; zeroed {zeroed}" if zeroed else "") + (f"; left {left}" if left else "")
        campaign.note(describe(run, extra))
        assert not problems, campaign.fail(problems)
        finished_last = not run.killed


@VARIANTS
@TIMEOUT
def test_cp_recursive_killed_at_random_moments(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, power_loss: bool
) -> None:
    rng, plan = campaign()
    objects = Bucket(s3, bucket, "p/")
    put_mixed(objects, rng)
    root = tmp_path / "dest"

    def argv(root: Path) -> list[str]:
        return command(
            proxy,
            "cp",
            "-r",
            "--json",
            "--chunk-size",
            "64KiB",
            "--concurrency",
            "4",
            "--max-bandwidth",
            str(BANDWIDTH),
            f"s3://{bucket}/p/",
            str(root),
        )

    kill_again_and_again(
        objects,
        proxy,
        argv,
        root,
        rng=rng,
        campaign=plan,
        power_loss=power_loss,
        sync=False,
    )
    final = run_once(proxy, argv(root), KILLS, kill_after=None, json_lines=True)
    plan.note(describe(final))
    assert sorted(key for key, _, _ in final.reported) == sorted(objects.current), plan.fail(
        [f"the last run did not report every object: {final.stdout}{final.stderr}"]
    )
    expect_done(objects, root, final, plan)


@VARIANTS
@TIMEOUT
def test_sync_killed_at_random_moments(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, power_loss: bool
) -> None:
    rng, plan = campaign()
    objects = Bucket(s3, bucket, "p/")
    put_mixed(objects, rng)
    root = tmp_path / "dest"

    def argv(root: Path) -> list[str]:
        return command(
            proxy,
            "sync",
            "--chunk-size",
            "64KiB",
            "--concurrency",
            "4",
            "--max-bandwidth",
            str(BANDWIDTH),
            f"s3://{bucket}/p/",
            str(root),
        )

    kill_again_and_again(
        objects,
        proxy,
        argv,
        root,
        rng=rng,
        campaign=plan,
        power_loss=power_loss,
        sync=True,
    )
    final = run_once(proxy, argv(root), KILLS, kill_after=None, json_lines=False)
    plan.note(describe(final))
    expect_done(objects, root, final, plan)
    # The records the runs left vouch for every file: one more sync fetches nothing.
    again = run_once(proxy, argv(root), KILLS + 1, kill_after=None, json_lines=False)
    gets = [r for r in proxy.requests if r.method == "GET" and "list-type" not in r.path]
    fetched = [f"a sync after the last one fetched again: {again.stdout}{again.stderr} {gets}"]
    assert again.returncode == 0, plan.fail(fetched)
    assert not again.reported, plan.fail(fetched)
    assert not gets, plan.fail(fetched)
