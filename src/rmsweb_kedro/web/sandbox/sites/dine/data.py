"""The restaurants' seeded data: four per city."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from rmsweb_kedro.contracts.seeding import stable_rng
from rmsweb_kedro.web.sandbox.registry import World
from rmsweb_kedro.web.sandbox.world import slug

EATERY_KINDS = ["Bistro", "Kitchen", "Grill", "Trattoria"]
CUISINES = ["Thai", "Italian", "Mexican", "Japanese", "Lebanese", "French"]
OPENING_TIMES = ["11:30", "12:00", "17:00", "17:30", "18:00"]
TABLE_TIMES = ["18:00", "18:30", "19:00", "19:30", "20:00", "20:30", "21:00"]


@dataclass(frozen=True)
class Restaurant:
    id: str
    name: str
    city: str
    cuisine: str
    opens: str
    rating: float


@dataclass
class DineData:
    world: World

    @cached_property
    def restaurants(self) -> dict[str, list[Restaurant]]:
        result = {}
        for city in self.world.pools["cities"]:
            rng = stable_rng("dine", self.world.seed, city)
            words = rng.sample(self.world.pools["eateries"], 4)
            result[city] = [
                Restaurant(
                    f"{slug(city)}-{i}",
                    f"{word} {rng.choice(EATERY_KINDS)}",
                    city,
                    rng.choice(CUISINES),
                    rng.choice(OPENING_TIMES),
                    rng.randrange(30, 50) / 10,
                )
                for i, word in enumerate(words)
            ]
        return result

    def restaurant(self, restaurant_id: str) -> Restaurant | None:
        return next((r for rs in self.restaurants.values() for r in rs if r.id == restaurant_id), None)
