"""The restaurants' pages and route table."""

from __future__ import annotations

from rmsweb_kedro.web.sandbox.pages import (
    Request,
    Response,
    State,
    esc,
    field_input,
    field_select,
    form,
    hidden,
    item_list,
    not_found,
    notice,
    notice_page,
    page,
    redirect,
)
from rmsweb_kedro.web.sandbox.registry import Route
from rmsweb_kedro.web.sandbox.sites.dine.data import TABLE_TIMES, DineData

COLLECTIONS = {"reservations": ("restaurant", "city", "date", "time", "party")}


def home(data: DineData, req: Request, state: State) -> Response:
    inner = field_input("City", "city") + "<button>Search</button>"
    return page(req, "Find a table", "<h1>Find a table</h1>" + form(req.url("/restaurants"), inner))


def restaurants(data: DineData, req: Request, state: State) -> Response:
    city = req.arg("city").strip()
    found = data.restaurants.get(data.city(city), [])
    listing = item_list([(req.url(f"/restaurant/{r.id}"), r.name, r.cuisine) for r in found])
    return page(
        req,
        "Restaurants",
        f"<h1>Restaurants in {esc(city)}</h1>" + (listing or "<p>No restaurants found.</p>"),
    )


def restaurant(data: DineData, req: Request, state: State, restaurant_id: str) -> Response:
    found = data.restaurant(restaurant_id)
    if found is None:
        return not_found(req)
    facts = f"<p>{found.cuisine} · opens at {found.opens} · rating {found.rating}</p>"
    inner = (
        hidden(rid=found.id)
        + field_input("Date", "date", kind="date")
        + field_select("Time", "time", TABLE_TIMES)
        + field_select("Party size", "party", [str(n) for n in range(1, 9)], "2")
        + '<button type="button" onclick="document.getElementById(\'modal\').hidden=false">Reserve</button>'
    )
    modal = (
        '<div id="modal" role="dialog" hidden><p>Confirm your reservation?</p>'
        '<button type="submit" form="reserve">Confirm</button> '
        '<button type="button" onclick="document.getElementById(\'modal\').hidden=true">Cancel</button></div>'
    )
    main = f"<h1>{esc(found.name)}</h1>{facts}" + form(req.url("/reserve"), inner, "post", "reserve") + modal
    return page(req, found.name, main)


def reserve(data: DineData, req: Request, state: State) -> Response:
    found = data.restaurant(req.arg("rid"))
    if found is None or not req.arg("date"):
        return notice(req, "Reserve", "Reservation failed", "Please choose a date.")
    state["reservations"].append(
        {"restaurant": found.name, "city": found.city, "date": req.arg("date"),
         "time": req.arg("time"), "party": req.arg("party")}
    )  # fmt: skip
    return redirect(req.url("/reserved"))


ROUTES = (
    Route("/", home),
    Route("/restaurants", restaurants),
    Route(r"/restaurant/([\w-]+)", restaurant),
    Route("/reserve", reserve, ("POST",)),
    Route("/reserved", notice_page("Reserved", "Reservation confirmed", "See you soon.")),
)
