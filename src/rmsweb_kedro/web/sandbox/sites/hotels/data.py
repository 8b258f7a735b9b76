"""The hotels' seeded data: four per city."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

from rmsweb_kedro.web.sandbox.world import SiteData, by_id, city_item_id

SORT_HOTELS = ["Recommended", "Price: low to high", "Rating"]


@dataclass(frozen=True)
class Hotel:
    id: str
    name: str
    city: str
    price: int
    rating: float


def draw_hotel(rng: random.Random, city: str, i: int, word: str) -> Hotel:
    return Hotel(
        city_item_id(city, i), f"Hotel {word}", city, rng.randrange(60, 260), rng.randrange(60, 99) / 10
    )


class HotelsData(SiteData):
    @cached_property
    def hotels(self) -> dict[str, list[Hotel]]:
        return self.per_city("hotels", "hotel_words", 4, draw_hotel)

    def hotel(self, hotel_id: str) -> Hotel | None:
        return by_id(self.hotels, hotel_id)
