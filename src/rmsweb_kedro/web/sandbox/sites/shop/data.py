"""The shop's seeded catalogue: every adjective of the pool with every product kind."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

from rmsweb_kedro.web.sandbox.world import SiteData, search_rank

PRODUCT_KINDS = ["scarf", "mug", "lamp", "backpack", "jacket", "kettle"]
SIZES = ["S", "M", "L"]
SORT_SHOP = ["Relevance", "Price: low to high", "Price: high to low"]


@dataclass(frozen=True)
class Product:
    id: int
    name: str
    color: str
    price: float


def draw_product(rng: random.Random, ident: int, adjective: str, kind: str) -> Product:
    return Product(ident, f"{adjective} {kind}", adjective.lower(), rng.randrange(16, 240) / 2)


class ShopData(SiteData):
    @cached_property
    def products(self) -> list[Product]:
        return self.per_kind("product", "adjectives", PRODUCT_KINDS, draw_product)

    def product_by_name(self, name: str) -> Product:
        return next(p for p in self.products if p.name == name)

    def search_products(self, query: str) -> list[Product]:
        return search_rank(query, self.products, lambda p: p.name, "shop")
