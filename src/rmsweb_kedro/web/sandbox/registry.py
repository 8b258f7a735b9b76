"""The sites of the sandbox: every package under ``web/sandbox/sites/`` that defines ``SITE = Site(...)``.

A site package holds its seeded data, its route table and pages, its task templates (with their reference
solutions) and the session-state collections its checker reads; adding a folder adds a site (docs/sandbox.md,
"Adding a site"). A package split into ``data.py``, ``pages.py`` and ``tasks.py``, as the seven sites are, states
only what is its own: ``SITE = Site.from_package(__name__, title, order=..., data=...)``. Discovery imports the
packages once and orders them by ``Site.order``.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from rmsweb_kedro.contracts.seeding import stable_rng
from rmsweb_kedro.web.sandbox.pages import Handler, Request, Response, State, help_page, not_found
from rmsweb_kedro.web.sandbox.world import DATES, REAL_WORDS, made_up_words

if TYPE_CHECKING:
    from rmsweb_kedro.web.sandbox.steps import Template

SITES_PACKAGE = "rmsweb_kedro.web.sandbox.sites"


@dataclass(frozen=True)
class Route:
    """One entry of a site's route table: ``handler(data, request, state, *groups)`` answers the requests whose
    whole path matches ``pattern`` (a regular expression; its groups become arguments) with one of ``methods``."""

    pattern: str
    handler: Handler
    methods: tuple[str, ...] = ("GET", "POST")


@dataclass(frozen=True)
class Site:
    """What a site package provides (its ``SITE``)."""

    name: str  # Task.site, the host's first label (shop.sandbox.test) and the package's folder name
    title: str  # the site's name on its pages ("Shopwell")
    order: int  # position in the suite: task order and ids' order, the index page, the state's collections
    data: Callable[[World], Any]  # the site's seeded data for a world (built once per World, World.site)
    routes: tuple[Route, ...]  # tried in order; no match: /help is the help page, anything else 404
    templates: dict[str, Template]  # task templates by name (the name is Task.metadata["template"])
    # Session-state collections its forms write, with each record's fields; the checker's `record` kind reads them.
    collections: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Words the made-up half of the world's value pools must not coincide with (e.g. the shop's product kinds).
    reserved_words: tuple[str, ...] = ()

    @classmethod
    def from_package(
        cls,
        package: str,
        title: str,
        *,
        order: int,
        data: Callable[[World], Any],
        reserved_words: tuple[str, ...] = (),
    ) -> Site:
        """The ``SITE`` of a package split as the sites are, into ``data.py``, ``pages.py`` and ``tasks.py``: its
        ``name`` is the package's folder, its ``routes`` and ``collections`` are ``pages.ROUTES`` and
        ``pages.COLLECTIONS`` (the state those pages' forms write; none when they write none), its ``templates``
        are ``tasks.TEMPLATES``. Call it from the package's ``__init__``: ``SITE = Site.from_package(__name__, ...)``."""
        pages = importlib.import_module(f"{package}.pages")
        tasks = importlib.import_module(f"{package}.tasks")
        return cls(
            name=package.rpartition(".")[2],
            title=title,
            order=order,
            data=data,
            routes=pages.ROUTES,
            templates=tasks.TEMPLATES,
            collections=getattr(pages, "COLLECTIONS", {}),
            reserved_words=reserved_words,
        )

    def handle(self, data: Any, req: Request, state: State) -> Response:
        """The response of the first route that takes the request."""
        for route in self.routes:
            if req.method in route.methods and (match := re.fullmatch(route.pattern, req.path)):
                return route.handler(data, req, state, *match.groups())
        return help_page(req) if req.path == "/help" else not_found(req)


@cache
def all_sites() -> dict[str, Site]:
    """Every site package's ``SITE`` by name, in ``Site.order``."""
    package = importlib.import_module(SITES_PACKAGE)
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"{SITES_PACKAGE}.{info.name}")
        site = getattr(module, "SITE", None)
        if not isinstance(site, Site):
            raise TypeError(f"sandbox site package {module.__name__} does not define SITE = Site(...)")
        if site.name != info.name:
            raise ValueError(
                f"sandbox site package {module.__name__}: SITE.name is {site.name!r}, not {info.name!r}"
            )
        found.append(site)
    found.sort(key=lambda s: s.order)
    for first, second in zip(found, found[1:], strict=False):
        if first.order == second.order:
            raise ValueError(
                f"sandbox sites {first.name} and {second.name} have the same order {first.order}"
            )
    return {site.name: site for site in found}


def site(name: str) -> Site:
    try:
        return all_sites()[name]
    except KeyError:
        raise KeyError(f"no sandbox site {name!r} (sites: {', '.join(all_sites())})") from None


def collections() -> tuple[str, ...]:
    """The session-state collections of every site, in site order: what the checkers may read."""
    return tuple(name for s in all_sites().values() for name in s.collections)


def templates() -> dict[str, tuple[str, Template]]:
    """Every task template by name with its site, in site order."""
    found: dict[str, tuple[str, Template]] = {}
    for s in all_sites().values():
        for name, template in s.templates.items():
            if name in found:
                raise ValueError(f"task template {name!r} is defined by sites {found[name][0]} and {s.name}")
            found[name] = (s.name, template)
    return found


@dataclass
class World:
    """The value pools for one seed, and each site's data (built on first use)."""

    seed: int = 0
    pools: dict[str, list[str]] = field(init=False)
    made_up: set[str] = field(init=False)
    _sites: dict[str, Any] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        rng = stable_rng("pools", self.seed)
        taken = {w.lower() for words in REAL_WORDS.values() for w in words}
        taken |= {w.lower() for site in all_sites().values() for w in site.reserved_words}
        self.pools = {}
        self.made_up = set()
        for name, real in REAL_WORDS.items():
            fake = made_up_words(rng, len(real), taken)
            self.made_up |= set(fake)
            merged = [w for pair in zip(real, fake, strict=True) for w in pair]
            self.pools[name] = merged
        self.pools["dates"] = list(DATES)

    def site(self, name: str) -> Any:
        """The seeded data of site ``name`` (its package's ``Site.data``), built once."""
        if name not in self._sites:
            self._sites[name] = site(name).data(self)
        return self._sites[name]
