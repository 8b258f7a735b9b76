"""The recipes' seeded data: every recipe word of the pool with every dish."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from rmsweb_kedro.contracts.seeding import stable_rng
from rmsweb_kedro.web.sandbox.registry import World
from rmsweb_kedro.web.sandbox.world import search_rank

DISHES = ["soup", "pie", "tacos", "risotto", "bread", "curry"]


@dataclass(frozen=True)
class Recipe:
    id: int
    name: str
    minutes: int
    serves: int
    calories: int


@dataclass
class RecipesData:
    world: World

    @cached_property
    def recipes(self) -> list[Recipe]:
        recipes = []
        for word in self.world.pools["recipe_words"]:
            for dish in DISHES:
                rng = stable_rng("recipe", self.world.seed, word, dish)
                recipes.append(
                    Recipe(
                        len(recipes) + 1,
                        f"{word} {dish}",
                        rng.randrange(3, 19) * 5,
                        rng.randrange(2, 7),
                        rng.randrange(18, 90) * 10,
                    )
                )
        return recipes

    def search_recipes(self, query: str) -> list[Recipe]:
        return [self.recipes[i] for i in search_rank(query, [r.name for r in self.recipes], "recipes")]
