"""The sandbox's seeded ground truth: the value pools every site draws from (half real words, half made-up) and
the seeded helpers; each site's own data is built by its package (``Site.data``) and reached with
:meth:`~rmsweb_kedro.web.sandbox.registry.World.site` (the world of one seed lives with the registry of sites it
draws for).

Everything is a pure function of the seed, so the server, the task generator and the checkers agree without
sharing state.
"""

from __future__ import annotations

import random

from rmsweb_kedro.contracts.seeding import stable_rng

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


def search_rank(query: str, names: list[str], seed: object, limit: int = 5) -> list[int]:
    """Indexes of the (at most ``limit``) names sharing most words with ``query``, in a seeded display order
    (so the best match is not always first)."""
    words = set(query.lower().split())
    scored = [(len(words & set(name.lower().split())), i) for i, name in enumerate(names)]
    best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], names[s[1]]))[:limit]
    chosen = [i for _, i in best]
    stable_rng("display", seed, query.lower()).shuffle(chosen)
    return chosen
