"""The homes' pages and route table."""

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
    money,
    not_found,
    notice,
    notice_page,
    page,
    redirect,
)
from rmsweb_kedro.web.sandbox.registry import Route
from rmsweb_kedro.web.sandbox.sites.homes.data import BEDROOM_FILTERS, HOMES_PER_PAGE, HomesData

COLLECTIONS = {"viewings": ("address", "city", "name", "date")}


def home(data: HomesData, req: Request, state: State) -> Response:
    inner = (
        field_input("City", "city")
        + field_select("Bedrooms", "beds", BEDROOM_FILTERS)
        + "<button>Search</button>"
    )
    return page(req, "Find a home", "<h1>Find a home</h1>" + form(req.url("/listings"), inner))


def listings(data: HomesData, req: Request, state: State) -> Response:
    city, beds = data.city(req.arg("city").strip()), req.arg("beds", "Any")
    found = data.search_listings(city, 0 if beds == "Any" else int(beds.rstrip("+") or 0))
    number = max(1, int(req.arg("page", "1")) if req.arg("page", "1").isdigit() else 1)
    shown = found[(number - 1) * HOMES_PER_PAGE : number * HOMES_PER_PAGE]
    listing = item_list([(req.url(f"/listing/{h.id}"), h.address, money(h.price)) for h in shown])
    pager = ""
    if number > 1:
        pager += f'<a href="{req.url("/listings", city=city, beds=beds, page=number - 1)}">Previous page</a> '
    if number * HOMES_PER_PAGE < len(found):
        pager += f'<a href="{req.url("/listings", city=city, beds=beds, page=number + 1)}">Next page</a>'
    main = f"<h1>Homes in {esc(city)}</h1>" + (listing or "<p>No homes match.</p>") + f"<p>{pager}</p>"
    return page(req, "Listings", main)


def listing(data: HomesData, req: Request, state: State, listing_id: str) -> Response:
    home = data.listing(listing_id)
    if home is None:
        return not_found(req)
    facts = f"<p>{money(home.price)} · {home.bedrooms} bedrooms · built in {home.year_built}</p>"
    inner = (
        hidden(lid=home.id)
        + field_input("Your name", "name")
        + field_input("Viewing date", "date", kind="date")
        + "<button>Request viewing</button>"
    )
    return page(
        req, home.address, f"<h1>{esc(home.address)}</h1>{facts}" + form(req.url("/viewing"), inner, "post")
    )


def request_viewing(data: HomesData, req: Request, state: State) -> Response:
    home = data.listing(req.arg("lid"))
    if home is None or not (req.arg("name").strip() and req.arg("date")):
        return notice(req, "Viewing", "Request failed", "Please give your name and a date.")
    state["viewings"].append(
        {"address": home.address, "city": home.city, "name": req.arg("name").strip(), "date": req.arg("date")}
    )
    return redirect(req.url("/viewing/done"))


ROUTES = (
    Route("/", home),
    Route("/listings", listings),
    Route(r"/listing/([\w-]+)", listing),
    Route("/viewing", request_viewing, ("POST",)),
    Route("/viewing/done", notice_page("Requested", "Viewing requested", "The agent will confirm by email.")),
)
