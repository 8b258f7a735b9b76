"""The homes' seeded data: five listings per city, cheapest first."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from rmsweb_kedro.contracts.seeding import stable_rng
from rmsweb_kedro.web.sandbox.registry import World
from rmsweb_kedro.web.sandbox.world import slug

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


@dataclass
class HomesData:
    world: World

    @cached_property
    def listings(self) -> dict[str, list[Listing]]:
        result = {}
        for city in self.world.pools["cities"]:
            rng = stable_rng("homes", self.world.seed, city)
            streets = rng.sample(self.world.pools["streets"], 5)
            homes = [
                Listing(
                    f"{slug(city)}-{i}",
                    f"{rng.randrange(2, 99)} {street} {rng.choice(['Lane', 'Road', 'Street', 'Way'])}",
                    city,
                    rng.randrange(1, 6),
                    rng.randrange(30, 180) * 5000
                    + i,  # +i keeps prices distinct, so the order is unambiguous
                    rng.randrange(1950, 2021),
                )
                for i, street in enumerate(streets)
            ]
            result[city] = sorted(homes, key=lambda h: h.price)
        return result

    def search_listings(self, city: str, min_bedrooms: int) -> list[Listing]:
        return [h for h in self.listings.get(city, []) if h.bedrooms >= min_bedrooms]

    def listing(self, listing_id: str) -> Listing | None:
        return next((h for hs in self.listings.values() for h in hs if h.id == listing_id), None)
