"""The recipes' task templates: one fact of a recipe, the lighter of two."""

from __future__ import annotations

import random

from rmsweb_kedro.web.sandbox.reference import ReferenceStep
from rmsweb_kedro.web.sandbox.sites.recipes.data import Recipe, RecipesData
from rmsweb_kedro.web.sandbox.steps import (
    Draft,
    Pools,
    accept_cookies,
    answer_task,
    dead_end_search,
    first_word_in,
    named_templates,
    pick,
    search,
)


def open_recipe(
    recipes: RecipesData, rng: random.Random, pools: Pools, first: bool = True
) -> tuple[Recipe, list[ReferenceStep]]:
    """A recipe and the steps that open it (``first``: the task's first search, with the help-page dead end)."""
    recipe = rng.choice(first_word_in(recipes.recipes, "name", pools["recipe_words"]))
    look_up = search("Search recipes", recipe.name, f"Search for {recipe.name}.")
    if first:
        look_up = dead_end_search("Search recipes", recipe.name, f"Search for {recipe.name}.")
    steps = [
        look_up,
        pick(
            "link", recipe.name, [r.name for r in recipes.search_recipes(recipe.name)], f"Open {recipe.name}."
        ),
    ]
    return recipe, steps


#: fact -> (question, the recipe's attribute, where the recipe page shows it)
RECIPE_QUESTIONS = {
    "minutes": ("How many minutes does the {name} take to make?", "minutes", r"Ready in (\d+) minutes"),
    "serves": ("How many people does the {name} serve?", "serves", r"Serves (\d+)"),
    "calories": (
        "How many calories per serving does the {name} have?",
        "calories",
        r"(\d+) calories per serving",
    ),
}


def recipe_fact(recipes: RecipesData, rng: random.Random, pools: Pools) -> Draft:
    recipe, steps = open_recipe(recipes, rng, pools)
    fact = rng.choice(sorted(RECIPE_QUESTIONS))
    question, attribute, shown = RECIPE_QUESTIONS[fact]
    value = str(getattr(recipe, attribute))
    return answer_task(
        question.format(name=recipe.name),
        {"recipe": recipe.name, "fact": fact},
        [accept_cookies(), *steps],
        value,
        read=shown,
    )


def recipe_compare(recipes: RecipesData, rng: random.Random, pools: Pools) -> Draft | None:
    first, steps_a = open_recipe(recipes, rng, pools)
    second, steps_b = open_recipe(recipes, rng, pools, first=False)
    if first.calories == second.calories or first.name == second.name:
        return None
    lighter = min(first, second, key=lambda r: r.calories)
    return answer_task(
        f"Which has fewer calories per serving, the {first.name} or the {second.name}? Answer with its name.",
        {"first": first.name, "second": second.name},
        [accept_cookies(), *steps_a, *steps_b],
        lighter.name,  # compared across two pages: a fixed answer, not read off one
    )


TEMPLATES = named_templates(recipe_fact, recipe_compare)
