"""The recipes' pages and route table."""

from __future__ import annotations

from rmsweb_kedro.web.sandbox.pages import (
    Request,
    Response,
    State,
    esc,
    field_input,
    form,
    item_list,
    not_found,
    page,
)
from rmsweb_kedro.web.sandbox.registry import Route
from rmsweb_kedro.web.sandbox.sites.recipes.data import RecipesData


def render(req: Request, title: str, main: str) -> Response:
    """A recipes page: the search form above its content (the print version has none)."""
    search_form = form(req.url("/search"), field_input("Search recipes", "q") + "<button>Search</button>")
    return page(req, title, search_form + main)


def home(data: RecipesData, req: Request, state: State) -> Response:
    return render(req, "Home", "<h1>CookBook</h1><p>Simple recipes for every day.</p>")


def search(data: RecipesData, req: Request, state: State) -> Response:
    query = req.arg("q")
    found = data.search_recipes(query)
    listing = item_list([(req.url(f"/recipe/{r.id}"), r.name, "") for r in found])
    return render(
        req, "Search", f"<h1>Recipes for {esc(query)}</h1>" + (listing or "<p>No recipes found.</p>")
    )


def recipe(data: RecipesData, req: Request, state: State, view: str, recipe_id: str) -> Response:
    """``/recipe/<id>``: the recipe with a link to ``/print/<id>`` (a new tab), its bare print version."""
    found = next((r for r in data.recipes if r.id == int(recipe_id)), None)
    if found is None:
        return not_found(req)
    facts = (
        f"<p>Ready in {found.minutes} minutes</p><p>Serves {found.serves}</p>"
        f"<p>{found.calories} calories per serving</p>"
    )
    if view == "print":
        return page(req, found.name, f"<h1>{esc(found.name)}</h1>{facts}")
    printable = f'<p><a href="{req.url(f"/print/{found.id}")}" target="_blank">Print version</a></p>'
    return render(req, found.name, f"<h1>{esc(found.name)}</h1>{facts}{printable}")


ROUTES = (
    Route("/", home),
    Route("/search", search),
    Route(r"/(recipe|print)/(\d+)", recipe),
)
