"""Seeded draws, one home: the same keys or seed give the same draw in every process and on every machine.

:func:`stable_rng` (a generator from keys, not from Python's per-process string hashing) seeds the sandbox's world,
its task splits and the task sources' splits; :func:`draw_states` is how every stage picks the states it scores.
"""

from __future__ import annotations

import hashlib
import random

import polars as pl


def stable_rng(*keys: object) -> random.Random:
    """A random generator determined by ``keys`` alone (not by Python's per-process string hashing)."""
    digest = hashlib.sha256("|".join(map(str, keys)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def draw_states(states: pl.DataFrame, limit: int | None, seed: int) -> pl.DataFrame:
    """Up to ``limit`` rows of ``states`` drawn with ``seed``, in ``state_id`` order (all of them when ``limit`` is
    None or not smaller): how every stage picks the val states it scores."""
    if limit is None or states.height <= limit:
        return states
    return states.sample(limit, seed=seed).sort("state_id")
