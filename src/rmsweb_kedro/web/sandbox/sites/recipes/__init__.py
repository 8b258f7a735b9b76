"""CookBook (``recipes``): information pages (time, servings, calories) and a print version in a new tab."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.recipes.data import DISHES, RecipesData

SITE = Site.from_package(__name__, "CookBook", order=60, data=RecipesData, reserved_words=tuple(DISHES))
