"""The hotels' seeded data: four per city."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from rmsweb_kedro.contracts.seeding import stable_rng
from rmsweb_kedro.web.sandbox.registry import World
from rmsweb_kedro.web.sandbox.world import slug

SORT_HOTELS = ["Recommended", "Price: low to high", "Rating"]


@dataclass(frozen=True)
class Hotel:
    id: str
    name: str
    city: str
    price: int
    rating: float


@dataclass
class HotelsData:
    world: World

    @cached_property
    def hotels(self) -> dict[str, list[Hotel]]:
        result = {}
        for city in self.world.pools["cities"]:
            rng = stable_rng("hotels", self.world.seed, city)
            words = rng.sample(self.world.pools["hotel_words"], 4)
            result[city] = [
                Hotel(
                    f"{slug(city)}-{i}",
                    f"Hotel {word}",
                    city,
                    rng.randrange(60, 260),
                    rng.randrange(60, 99) / 10,
                )
                for i, word in enumerate(words)
            ]
        return result
