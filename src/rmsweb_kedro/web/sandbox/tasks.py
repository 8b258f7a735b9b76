"""The sandbox task suite: every site's templates (its package's ``Site.templates``) drawn over the seeded world,
each instance a :class:`Task` with a checker and a reference solution (targets by role and name; decision points
with wrong alternatives), split into train/val/test. See docs/sandbox.md."""

from __future__ import annotations

import logging
import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.contracts.schema import JudgeSpec, Task, level_for_length
from rmsweb_kedro.contracts.seeding import stable_rng
from rmsweb_kedro.web.sandbox.registry import World, all_sites, templates
from rmsweb_kedro.web.sandbox.server import site_url
from rmsweb_kedro.web.sandbox.steps import Draft, Pools, Template

logger = logging.getLogger(__name__)


class SandboxParams(BaseModel):
    """``params:sandbox`` (conf/base/parameters_sandbox.yml)."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 0
    instances_per_template: int = Field(default=24, ge=1)
    val_fraction: float = Field(default=0.15, ge=0, lt=0.5)
    test_fraction: float = Field(default=0.15, ge=0, lt=0.5)
    held_out_sites: list[str] = Field(default_factory=lambda: ["hotels"])
    #: combinations: val/test use unseen combinations of strings seen in train; unseen_strings: unseen values.
    split_mode: Literal["combinations", "unseen_strings"] = "combinations"
    train_value_fraction: float = Field(default=0.7, gt=0, lt=1)


def split_pools(world: World, train_fraction: float, seed: int) -> tuple[Pools, Pools]:
    """Each value pool cut in two (train values, held-out values), real and made-up words on both sides."""
    train, held = {}, {}
    for name, values in world.pools.items():
        if name == "dates":
            train[name] = held[name] = values
            continue
        shuffled = list(values)
        stable_rng("split", seed, name).shuffle(shuffled)
        cut = max(1, min(len(values) - 1, round(len(values) * train_fraction)))
        train[name], held[name] = shuffled[:cut], shuffled[cut:]
    return train, held


def draw(name: str, template: Template, data: Any, pools: Pools, count: int, seed: int) -> list[Draft]:
    """Up to ``count`` distinct instances of a template (distinct by parameters); ``data``: its site's data."""
    rng = stable_rng("instances", seed, name, sorted(pools.get("cities", [])))
    drafts: dict[str, Draft] = {}
    for _ in range(count * 30):
        if len(drafts) >= count:
            break
        draft = template(data, rng, pools)
        if draft is not None:
            drafts.setdefault(repr(sorted(draft.params.items())), draft)
    if len(drafts) < count:
        logger.info("Template %s has %d distinct instances (asked for %d)", name, len(drafts), count)
    return list(drafts.values())


def atoms(draft: Draft) -> set[str]:
    """The words of a draft's string values: what "seen in train" is measured on."""
    return {
        w.lower() for v in draft.params.values() if isinstance(v, str) for w in v.replace(",", " ").split()
    }


def assign_splits(drafts: list[Draft], params: SandboxParams, rng: random.Random) -> list[str]:
    """train/val/test by instance, at random (the instances' parameter combinations are distinct)."""
    order = list(range(len(drafts)))
    rng.shuffle(order)
    n_test = round(len(drafts) * params.test_fraction)
    n_val = round(len(drafts) * params.val_fraction)
    splits = ["train"] * len(drafts)
    for rank, index in enumerate(order):
        splits[index] = "test" if rank < n_test else "val" if rank < n_test + n_val else "train"
    return splits


def generate_tasks(params: SandboxParams) -> list[Task]:
    """The whole suite: every template's instances as Tasks with splits, levels and checkers."""
    unknown = sorted(set(params.held_out_sites) - set(all_sites()))
    if unknown:
        raise ValueError(
            f"sandbox.held_out_sites: {unknown} are not sandbox sites ({', '.join(all_sites())})"
        )
    world = World(params.seed)
    planned: list[tuple[str, str, Draft, str]] = []  # template, site, draft, split
    train_pools, held_pools = split_pools(world, params.train_value_fraction, params.seed)
    for name, (site, template) in templates().items():
        data = world.site(site)
        held_out_site = site in params.held_out_sites
        if params.split_mode == "unseen_strings" and not held_out_site:
            n_eval = round(params.instances_per_template * (params.val_fraction + params.test_fraction))
            train = draw(
                name, template, data, train_pools, params.instances_per_template - n_eval, params.seed
            )
            evaluation = draw(name, template, data, held_pools, n_eval, params.seed)
            n_val = round(
                len(evaluation) * params.val_fraction / (params.val_fraction + params.test_fraction)
            )
            planned += [(name, site, d, "train") for d in train]
            planned += [(name, site, d, "val" if i < n_val else "test") for i, d in enumerate(evaluation)]
            continue
        drafts = draw(name, template, data, world.pools, params.instances_per_template, params.seed)
        splits = (
            ["test"] * len(drafts)
            if held_out_site
            else assign_splits(drafts, params, stable_rng("splits", params.seed, name))
        )
        planned += [(name, site, d, s) for d, s in zip(drafts, splits, strict=True)]
    if params.split_mode == "combinations":  # val/test instances with a word train never saw move to train
        seen = set().union(*(atoms(d) for _, site, d, s in planned if s == "train"))
        planned = [
            (
                n,
                site,
                d,
                "train" if s != "train" and site not in params.held_out_sites and not atoms(d) <= seen else s,
            )
            for n, site, d, s in planned
        ]
    tasks = []
    counters: dict[str, int] = {}
    for name, site, draft, split in planned:
        counters[name] = counters.get(name, 0) + 1
        tasks.append(
            Task(
                id=f"sandbox-{name}-{counters[name]:03d}",
                source="sandbox",
                site=site,
                start_url=site_url(site),
                instruction=draft.instruction,
                level=level_for_length(len(draft.steps)),
                reference_length=len(draft.steps),
                split=split,
                judge=JudgeSpec(kind="sandbox_checker", config=draft.judge),
                reference_solution=draft.steps,
                metadata={
                    "template": name,
                    "params": draft.params,
                    "world_seed": params.seed,
                    "split_mode": params.split_mode,
                },
            )
        )
    return tasks
