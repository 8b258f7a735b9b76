"""The recipes' seeded data: every recipe word of the pool with every dish."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

from rmsweb_kedro.web.sandbox.world import SiteData, search_rank

DISHES = ["soup", "pie", "tacos", "risotto", "bread", "curry"]


@dataclass(frozen=True)
class Recipe:
    id: int
    name: str
    minutes: int
    serves: int
    calories: int


def draw_recipe(rng: random.Random, ident: int, word: str, dish: str) -> Recipe:
    return Recipe(
        ident, f"{word} {dish}", rng.randrange(3, 19) * 5, rng.randrange(2, 7), rng.randrange(18, 90) * 10
    )


class RecipesData(SiteData):
    @cached_property
    def recipes(self) -> list[Recipe]:
        return self.per_kind("recipe", "recipe_words", DISHES, draw_recipe)

    def search_recipes(self, query: str) -> list[Recipe]:
        return search_rank(query, self.recipes, lambda r: r.name, "recipes")
