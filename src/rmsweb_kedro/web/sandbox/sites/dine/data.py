"""The restaurants' seeded data: four per city."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

from rmsweb_kedro.web.sandbox.world import SiteData, by_id, city_item_id

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


def draw_restaurant(rng: random.Random, city: str, i: int, word: str) -> Restaurant:
    return Restaurant(
        city_item_id(city, i),
        f"{word} {rng.choice(EATERY_KINDS)}",
        city,
        rng.choice(CUISINES),
        rng.choice(OPENING_TIMES),
        rng.randrange(30, 50) / 10,
    )


class DineData(SiteData):
    @cached_property
    def restaurants(self) -> dict[str, list[Restaurant]]:
        return self.per_city("dine", "eateries", 4, draw_restaurant)

    def restaurant(self, restaurant_id: str) -> Restaurant | None:
        return by_id(self.restaurants, restaurant_id)
