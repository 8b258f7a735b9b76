"""The shop's seeded catalogue: every adjective of the pool with every product kind."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from rmsweb_kedro.contracts.seeding import stable_rng
from rmsweb_kedro.web.sandbox.registry import World
from rmsweb_kedro.web.sandbox.world import search_rank

PRODUCT_KINDS = ["scarf", "mug", "lamp", "backpack", "jacket", "kettle"]
SIZES = ["S", "M", "L"]
SORT_SHOP = ["Relevance", "Price: low to high", "Price: high to low"]


@dataclass(frozen=True)
class Product:
    id: int
    name: str
    color: str
    price: float


@dataclass
class ShopData:
    world: World

    @cached_property
    def products(self) -> list[Product]:
        products = []
        for adjective in self.world.pools["adjectives"]:
            for kind in PRODUCT_KINDS:
                rng = stable_rng("product", self.world.seed, adjective, kind)
                products.append(
                    Product(
                        len(products) + 1,
                        f"{adjective} {kind}",
                        adjective.lower(),
                        rng.randrange(16, 240) / 2,
                    )
                )
        return products

    def product_by_name(self, name: str) -> Product:
        return next(p for p in self.products if p.name == name)

    def search_products(self, query: str) -> list[Product]:
        return [self.products[i] for i in search_rank(query, [p.name for p in self.products], "shop")]
