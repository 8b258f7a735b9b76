"""Seeded draws, one home: the same keys or seed give the same draw in every process and on every machine.

Every stage draws through these helpers, so one kind of draw is written once:

==========================  =========================================================================================
:func:`stable_rng`          a ``random.Random`` from keys hashed with SHA-256: the sandbox's world, its task splits
                            and the task sources' splits
:func:`seeded_rng`          a ``random.Random`` from a stage's seed (and keys): the scripted teacher, mining's
                            ballast, the online tasks, the augmentation, the judge agreement's bootstrap
:func:`draw_up_to`          up to ``limit`` items of a list, kept in their order (or sorted by ``key``)
:func:`draw_states`         up to ``limit`` STATE rows, in ``state_id`` order: how every stage picks the states it scores
:func:`sample_rows`         ``n`` rows of a table in a seeded random order; :func:`shuffled` all of them
:func:`pool_first`          the prioritised draw: as many of a pool as fit, then the rest (mining's probe pool)
:func:`bootstrap_indices`   resampling with replacement, numpy's generator (the report's intervals)
==========================  =========================================================================================

Each helper keeps its random family (Python's Mersenne Twister, polars' row sampler, numpy's PCG64) and its seed
derivation, so a draw routed here is the draw it was. Two keyed derivations coexist for that reason:
:func:`stable_rng` (SHA-256 of the ``|``-joined keys) seeds the sandbox's world, :func:`seeded_rng` (the seed, or
Python's own SHA-512 of the ``:``-joined seed and keys) the stages; changing either would change every page or every
trajectory. Torch's generators are not here: the training loop's order and the sampled decoding read torch's own
(global, checkpointed) state, and stay with torch.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import polars as pl

if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")
Part = TypeVar("Part", pl.DataFrame, list[Any])


def stable_rng(*keys: object) -> random.Random:
    """A random generator determined by ``keys`` alone (not by Python's per-process string hashing)."""
    digest = hashlib.sha256("|".join(map(str, keys)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def seeded_rng(seed: int, *keys: object) -> random.Random:
    """A stage's random generator: ``random.Random(seed)``, or with ``keys`` one of its own streams,
    ``random.Random("seed:key:...")`` (a string seed is hashed with SHA-512 by Python: the same in every process).
    ``seeded_rng(3, "shop-12")`` is the scripted teacher's generator for seed 3 on task ``shop-12``."""
    return random.Random(":".join(map(str, (seed, *keys))) if keys else seed)


def draw_up_to(
    items: Sequence[T], limit: int | None, rng: random.Random, key: Callable[[T], Any] | None = None
) -> list[T]:
    """Up to ``limit`` of ``items`` drawn with ``rng`` (``rng.sample``), sorted (by ``key``); all of them, in their
    order and without touching ``rng``, when ``limit`` is None or not smaller. Several draws from one ``rng`` follow
    each other (evaluate's training-site tasks, then its held-out-site tasks)."""
    if limit is None or len(items) <= limit:
        return list(items)
    return sorted(rng.sample(items, limit), key=key)


def draw_states(states: pl.DataFrame, limit: int | None, seed: int) -> pl.DataFrame:
    """Up to ``limit`` rows of ``states`` drawn with ``seed``, in ``state_id`` order (all of them when ``limit`` is
    None or not smaller): how every stage picks the val states it scores."""
    if limit is None or states.height <= limit:
        return states
    return states.sample(limit, seed=seed).sort("state_id")


def sample_rows(frame: pl.DataFrame, n: int, seed: int) -> pl.DataFrame:
    """``n`` rows of ``frame`` (no more than it has) drawn without replacement with ``seed``, in the draw's random
    order (polars' ``sample(shuffle=True)``)."""
    return frame.sample(n=n, shuffle=True, seed=seed)


def shuffled(frame: pl.DataFrame, seed: int) -> pl.DataFrame:
    """Every row of ``frame`` in a random order drawn with ``seed`` (:func:`sample_rows` of all of them)."""
    return sample_rows(frame, frame.height, seed)


def pool_first(pool: Part, rest: Part, limit: int, draw: Callable[[Part, int], Part]) -> tuple[Part, Part]:
    """The prioritised draw: up to ``limit`` items, ``pool`` first (as many of it as fit), then ``rest`` fills what
    is left. ``draw(part, n)`` draws ``n`` of a part (lists or tables); it is called for the pool, then for the
    rest, so a shared generator draws the pool's items first. Returns ``(drawn from pool, drawn from rest)``.
    An empty pool makes it one draw over ``rest`` (mining's ``probe_pool_first: false``)."""
    first = draw(pool, min(limit, len(pool)))
    return first, draw(rest, min(limit - len(first), len(rest)))


def bootstrap_indices(seed: int, resamples: int, *sizes: int) -> tuple[np.ndarray, ...]:
    """Resampling with replacement, one ``(resamples, size)`` array of indices in ``[0, size)`` per size, drawn in
    order from one numpy generator seeded with ``seed``: ``bootstrap_indices(s, B, n)`` resamples n pairs,
    ``bootstrap_indices(s, B, items, seeds)`` resamples the items and, independently, the seeds."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return tuple(rng.integers(0, size, size=(resamples, size)) for size in sizes)
