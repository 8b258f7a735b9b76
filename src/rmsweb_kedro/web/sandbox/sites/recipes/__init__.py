"""CookBook (``recipes``): information pages (time, servings, calories) and a print version in a new tab."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.recipes.data import DISHES, RecipesData
from rmsweb_kedro.web.sandbox.sites.recipes.pages import ROUTES
from rmsweb_kedro.web.sandbox.sites.recipes.tasks import TEMPLATES

SITE = Site(
    name="recipes",
    title="CookBook",
    order=60,
    data=RecipesData,
    routes=ROUTES,
    templates=TEMPLATES,
    reserved_words=tuple(DISHES),
)
