"""The sandbox's seeded ground truth: the value pools every site draws from (half real words, half made-up) and
the seeded helpers; each site's own data is built by its package (``Site.data``, a :class:`SiteData`) and reached
with :meth:`~rmsweb_kedro.web.sandbox.registry.World.site` (the world of one seed lives with the registry of sites it
draws for).

Everything is a pure function of the seed, so the server, the task generator and the checkers agree without
sharing state.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from rmsweb_kedro.contracts.seeding import stable_rng

if TYPE_CHECKING:
    from rmsweb_kedro.web.sandbox.registry import World

T = TypeVar("T")

_SYLLABLES = [
    "ka",
    "lo",
    "vin",
    "dra",
    "mek",
    "sul",
    "tor",
    "bre",
    "qui",
    "zan",
    "pel",
    "rud",
    "osk",
    "fen",
    "mar",
]


def made_up_words(rng: random.Random, count: int, taken: set[str]) -> list[str]:
    """``count`` capitalised nonsense words of two syllables, distinct from ``taken``."""
    words: list[str] = []
    while len(words) < count:
        word = (rng.choice(_SYLLABLES) + rng.choice(_SYLLABLES)).capitalize()
        if word.lower() not in taken:
            taken.add(word.lower())
            words.append(word)
    return words


#: The value pools, shared by the sites (shop addresses use the homes' streets) and split by the task generator into
#: train and held-out values. Pools are drawn in this order: a new pool goes at the end, so the pools before it keep
#: their words (unless one of its real words equals a made-up word drawn before).
REAL_WORDS = {
    "cities": ["Oslo", "Lyon", "Porto", "Krakow", "Dublin", "Bergen", "Seville", "Graz"],
    "first_names": ["Ada", "Liam", "Maria", "Omar", "Yuki", "Elena"],
    "last_names": ["Novak", "Berg", "Silva", "Khan", "Moreau", "Lund"],
    "adjectives": ["Blue", "Red", "Green", "Black", "Wool", "Linen"],
    "streets": ["Birch", "Harbor", "Mill", "Chapel", "Oak", "Station"],
    "companies": ["Northwind", "Bluebird", "Acme", "Globex", "Initech", "Vertex"],
    "eateries": ["Casa", "Golden", "Little", "Olive", "Harbor", "Maple"],
    "recipe_words": ["Classic", "Spicy", "Quick", "Rustic", "Smoky", "Creamy"],
    "hotel_words": ["Aurora", "Central", "Riverside", "Park"],
}
DATES = [
    "2027-03-14",
    "2027-03-21",
    "2027-04-02",
    "2027-04-18",
    "2027-05-06",
    "2027-05-23",
    "2027-06-11",
    "2027-06-27",
]


def slug(text: str) -> str:
    return "-".join(text.lower().split())


def city_item_id(city: str, index: int) -> str:
    """The id of a city's ``index``-th item (from 0), as the per-city sites number them: ``oslo-2``."""
    return f"{slug(city)}-{index}"


def by_id(per_city: Mapping[str, list[T]], ident: str) -> T | None:
    """The item whose ``id`` is ``ident`` among every city's items (None when there is none)."""
    return next((item for items in per_city.values() for item in items if item.id == ident), None)


def search_rank(
    query: str, items: list[T], name: Callable[[T], str], seed: object, limit: int = 5
) -> list[T]:
    """The (at most ``limit``) items whose ``name`` shares most words with ``query``, in a seeded display order
    (so the best match is not always first)."""
    names = [name(item) for item in items]
    words = set(query.lower().split())
    scored = [(len(words & set(n.lower().split())), i) for i, n in enumerate(names)]
    best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], names[s[1]]))[:limit]
    chosen = [i for _, i in best]
    stable_rng("display", seed, query.lower()).shuffle(chosen)
    return [items[i] for i in chosen]


@dataclass
class SiteData:
    """What a site's seeded data (its ``Site.data``, built once per world by ``World.site``) stands on: the world,
    and the two ways the sites draw their items from its pools. Each city (:meth:`per_city`) or each word and kind
    (:meth:`per_kind`) draws with a generator of its own, so that its draws never shift another's items."""

    world: World

    def per_city(
        self, stream: str, pool: str, count: int, draw: Callable[[random.Random, str, int, str], T]
    ) -> dict[str, list[T]]:
        """``count`` items for every city of the world, each named after a word of ``pool``:
        ``draw(rng, city, i, word)`` for the ``i``-th word (from 0; its id :func:`city_item_id`). Each city has its
        generator, ``stable_rng(stream, seed, city)``, which draws the words and then its items in order."""
        found = {}
        for city in self.world.pools["cities"]:
            rng = stable_rng(stream, self.world.seed, city)
            words = rng.sample(self.world.pools[pool], count)
            found[city] = [draw(rng, city, i, word) for i, word in enumerate(words)]
        return found

    def per_kind(
        self, stream: str, pool: str, kinds: list[str], draw: Callable[[random.Random, int, str, str], T]
    ) -> list[T]:
        """One item for every word of ``pool`` with every kind: ``draw(rng, id, word, kind)``, ids counted from 1,
        each pair with its own generator ``stable_rng(stream, seed, word, kind)``."""
        pairs = [(word, kind) for word in self.world.pools[pool] for kind in kinds]
        return [
            draw(stable_rng(stream, self.world.seed, word, kind), ident, word, kind)
            for ident, (word, kind) in enumerate(pairs, start=1)
        ]

    def city(self, name: str) -> str:
        """The world's city spelled ``name`` in any case (``name`` itself when there is none)."""
        return next((city for city in self.world.pools["cities"] if city.lower() == name.lower()), name)
