"""The homes' seeded data: five listings per city, cheapest first."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

from rmsweb_kedro.web.sandbox.world import SiteData, by_id, city_item_id

BEDROOM_FILTERS = ["Any", "1+", "2+", "3+", "4+"]
HOMES_PER_PAGE = 3


@dataclass(frozen=True)
class Listing:
    id: str
    address: str
    city: str
    bedrooms: int
    price: int
    year_built: int


def draw_listing(rng: random.Random, city: str, i: int, street: str) -> Listing:
    return Listing(
        city_item_id(city, i),
        f"{rng.randrange(2, 99)} {street} {rng.choice(['Lane', 'Road', 'Street', 'Way'])}",
        city,
        rng.randrange(1, 6),
        rng.randrange(30, 180) * 5000 + i,  # +i keeps prices distinct, so the order is unambiguous
        rng.randrange(1950, 2021),
    )


class HomesData(SiteData):
    @cached_property
    def listings(self) -> dict[str, list[Listing]]:
        per_city = self.per_city("homes", "streets", 5, draw_listing)
        return {city: sorted(homes, key=lambda h: h.price) for city, homes in per_city.items()}

    def search_listings(self, city: str, min_bedrooms: int) -> list[Listing]:
        return [h for h in self.listings.get(city, []) if h.bedrooms >= min_bedrooms]

    def listing(self, listing_id: str) -> Listing | None:
        return by_id(self.listings, listing_id)
