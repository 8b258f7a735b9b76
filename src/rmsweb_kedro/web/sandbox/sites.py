"""The sandbox websites: one handler per site, rendering compact, realistic HTML from the seeded :class:`World`.

A handler takes a :class:`Request` and the browser session's state (a dict of collections of plain records,
mutated in place under the server's lock) and returns a :class:`Response`. Links are written with the request's
``base`` (empty under host mapping, ``/<site>`` under path mode) so both ways of reaching a site work.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlencode

from rmsweb_kedro.web.sandbox.world import (
    BEDROOM_FILTERS,
    EXPERIENCE,
    JOB_TYPES,
    SIZES,
    SORT_FLIGHTS,
    SORT_HOTELS,
    SORT_SHOP,
    TABLE_TIMES,
    World,
    money,
)

State = dict[str, list[dict[str, str]]]
esc = html.escape


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    form: dict[str, str]
    base: str = ""  # "" under host mapping, "/shop" under path mode
    consent: bool = False

    def arg(self, name: str, default: str = "") -> str:
        return (self.form.get(name) if self.method == "POST" else self.query.get(name)) or default

    def url(self, path: str, **params: object) -> str:
        query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
        return f"{self.base}{path}" + (f"?{query}" if query else "")


@dataclass
class Response:
    status: int = 200
    body: str = ""
    location: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


SITE_TITLES = {
    "shop": "Shopwell",
    "flights": "SkyFare",
    "dine": "TableTime",
    "homes": "NestFind",
    "jobs": "WorkBoard",
    "recipes": "CookBook",
    "hotels": "StayInn",
}

_STYLE = (
    "body{font-family:sans-serif;margin:0 0 120px 0}header{background:#234;padding:10px}header a{color:#fff;"
    "margin-right:14px}main{padding:16px;max-width:720px}label{display:block;margin:8px 0}li{margin:6px 0}"
    "#cookie-banner{position:fixed;bottom:0;left:0;right:0;background:#eee;padding:10px;border-top:1px solid #999}"
    "#modal{position:fixed;top:30%;left:30%;background:#fff;border:2px solid #234;padding:20px}"
)
_BANNER = (
    '<div id="cookie-banner"><p>We use cookies to improve your visit.</p>'
    '<button onclick="consent()">Accept cookies</button> <button onclick="consent()">Reject</button></div>'
    "<script>function consent(){document.cookie='consent=1; path=/';"
    "document.getElementById('cookie-banner').remove()}</script>"
)


def page(site: str, req: Request, title: str, main: str, header_extra: str = "") -> Response:
    name = SITE_TITLES[site]
    header = f'<header><a href="{req.url("/")}">{name}</a><a href="{req.url("/help")}">Help</a>{header_extra}</header>'
    banner = "" if req.consent else _BANNER
    document = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)} - {name}</title>"
        f"<style>{_STYLE}</style></head><body>{header}<main>{main}</main>{banner}</body></html>"
    )
    return Response(body=document)


def redirect(location: str) -> Response:
    return Response(status=303, location=location)


def not_found(site: str, req: Request) -> Response:
    response = page(
        site, req, "Not found", "<h1>Page not found</h1><p>The page you asked for does not exist.</p>"
    )
    response.status = 404
    return response


def field_input(label: str, name: str, value: str = "", kind: str = "text") -> str:
    return f'<label>{esc(label)} <input type="{kind}" name="{name}" value="{esc(value)}"></label>'


def field_select(
    label: str, name: str, options: list[str], selected: str = "", autosubmit: bool = False
) -> str:
    change = ' onchange="this.form.submit()"' if autosubmit else ""
    items = "".join(f"<option{' selected' if o == selected else ''}>{esc(o)}</option>" for o in options)
    return f'<label>{esc(label)} <select name="{name}"{change}>{items}</select></label>'


def hidden(**values: str) -> str:
    return "".join(f'<input type="hidden" name="{k}" value="{esc(v)}">' for k, v in values.items())


def form(action: str, inner: str, method: str = "get", form_id: str = "") -> str:
    ident = f' id="{form_id}"' if form_id else ""
    return f'<form action="{action}" method="{method}"{ident}>{inner}</form>'


def item_list(items: list[tuple[str, str, str]]) -> str:
    """A result list: (href, link text, fact after the link)."""
    rows = "".join(f'<li><a href="{h}">{esc(t)}</a> <span>{esc(f)}</span></li>' for h, t, f in items)
    return f"<ul>{rows}</ul>"


def help_page(site: str, req: Request) -> Response:
    return page(site, req, "Help", "<h1>Help</h1><p>Questions? Write to our support team.</p>")


# ---------------------------------------------------------------------------------------------- shop


def shop(world: World, req: Request, state: State) -> Response:
    cart_link = f'<a href="{req.url("/cart")}">Cart</a>'

    def render(title: str, main: str) -> Response:
        return page("shop", req, title, main, cart_link)

    path = req.path
    if path == "/":
        search = field_input("Search products", "q") + "<button>Search</button>"
        return render("Home", "<h1>Shopwell</h1>" + form(req.url("/search"), search))
    if path == "/search":
        query, sort = req.arg("q"), req.arg("sort", SORT_SHOP[0])
        products = world.search_products(query)
        if sort == SORT_SHOP[1]:
            products.sort(key=lambda p: p.price)
        elif sort == SORT_SHOP[2]:
            products.sort(key=lambda p: -p.price)
        controls = form(
            req.url("/search"), hidden(q=query) + field_select("Sort by", "sort", SORT_SHOP, sort, True)
        )
        listing = item_list([(req.url(f"/product/{p.id}"), p.name, "") for p in products])
        return render(
            "Search",
            f"<h1>Results for {esc(query)}</h1>{controls}" + (listing or "<p>No products match.</p>"),
        )
    if match := re.fullmatch(r"/product/(\d+)", path):
        product = next((p for p in world.products if p.id == int(match.group(1))), None)
        if product is None:
            return not_found("shop", req)
        inner = (
            hidden(pid=str(product.id))
            + field_select("Size", "size", SIZES)
            + field_select("Quantity", "qty", [str(n) for n in range(1, 6)])
            + "<button>Add to cart</button>"
        )
        facts = f"<p>Price: {money(product.price)}</p><p>Color: {product.color}</p>"
        return render(
            product.name, f"<h1>{esc(product.name)}</h1>{facts}" + form(req.url("/cart/add"), inner, "post")
        )
    if path == "/cart/add" and req.method == "POST":
        product = next((p for p in world.products if str(p.id) == req.arg("pid")), None)
        if product is None:
            return not_found("shop", req)
        state["cart"].append({"product": product.name, "size": req.arg("size"), "qty": req.arg("qty", "1")})
        return redirect(req.url("/cart"))
    if path == "/cart":
        lines = "".join(
            f"<p>{esc(i['product'])} · size {i['size']} · qty {i['qty']}</p>" for i in state["cart"]
        )
        checkout = (
            f'<a href="{req.url("/checkout")}">Checkout</a>'
            if state["cart"]
            else "<p>Your cart is empty.</p>"
        )
        return render("Cart", f"<h1>Your cart</h1>{lines}{checkout}")
    if path == "/checkout":
        inner = (
            field_input("Full name", "name")
            + field_input("Address", "address")
            + "<button>Place order</button>"
        )
        return render("Checkout", "<h1>Checkout</h1>" + form(req.url("/order"), inner, "post"))
    if path == "/order" and req.method == "POST":
        name, address = req.arg("name").strip(), req.arg("address").strip()
        if not (name and address and state["cart"]):
            return render("Checkout", "<h1>Checkout</h1><p>Please fill in every field.</p>")
        state["orders"] += [{**item, "name": name, "address": address} for item in state["cart"]]
        state["cart"].clear()
        return redirect(req.url("/order/done"))
    if path == "/order/done":
        return render("Thank you", "<h1>Thank you</h1><p>Your order has been placed.</p>")
    return help_page("shop", req) if path == "/help" else not_found("shop", req)


# ---------------------------------------------------------------------------------------------- flights


def flights(world: World, req: Request, state: State) -> Response:
    path = req.path
    route = {"from": req.arg("from"), "to": req.arg("to"), "date": req.arg("date")}
    if path == "/":
        inner = (
            field_input("From", "from")
            + field_input("To", "to")
            + field_input("Date", "date", kind="date")
            + hidden(new="1")
            + "<button>Search</button>"
        )
        status = f'<p><a href="{req.url("/status")}">Flight status</a></p>'
        return page(
            "flights",
            req,
            "Search flights",
            "<h1>Search flights</h1>" + form(req.url("/results"), inner) + status,
        )
    if path == "/results":
        if not all(route.values()):
            return page(
                "flights", req, "Results", "<h1>Results</h1><p>Please enter origin, destination and date.</p>"
            )
        sort, nonstop = req.arg("sort", SORT_FLIGHTS[0]), req.arg("nonstop") == "1"
        found = world.flights(route["from"], route["to"], route["date"])
        if nonstop:
            found = [f for f in found if f.stops == 0]
        if sort == SORT_FLIGHTS[1]:
            found.sort(key=lambda f: f.price)
        elif sort == SORT_FLIGHTS[2]:
            found.sort(key=lambda f: f.departs)
        tick = " checked" if nonstop else ""
        controls = form(
            req.url("/results"),
            hidden(**route)
            + field_select("Sort by", "sort", SORT_FLIGHTS, sort, True)
            + f'<label><input type="checkbox" name="nonstop" value="1"{tick} onchange="this.form.submit()">'
            " Nonstop only</label>",
        )
        rows = "".join(
            f"<li><span>{f.number} · {f.departs}-{f.arrives} · {'nonstop' if f.stops == 0 else '1 stop'}"
            f' · {money(f.price)}</span> <a href="{req.url("/book", flight=f.id, **route)}">Select {f.number}</a></li>'
            for f in found
        )
        # On a fresh search the results appear late, as on real travel sites.
        late = req.arg("new") == "1"
        results = f'<ul id="results"{" hidden" if late else ""}>{rows}</ul>'
        if late:
            results = (
                '<p id="loading">Searching flights...</p>'
                + results
                + "<script>setTimeout(()=>{document.getElementById('results').hidden=false;"
                "document.getElementById('loading').remove()},800)</script>"
            )
        heading = f"<h1>{esc(route['from'])} to {esc(route['to'])}</h1><p>{esc(route['date'])}</p>"
        return page("flights", req, "Results", heading + controls + results)
    if path == "/book":
        flight = next(
            (
                f
                for f in world.flights(route["from"], route["to"], route["date"])
                if f.id == req.arg("flight")
            ),
            None,
        )
        if flight is None or not all(route.values()):
            return not_found("flights", req)
        if req.method == "POST":
            passenger = req.arg("passenger").strip()
            if passenger:
                state["flight_bookings"].append(
                    {"flight": flight.number, "origin": flight.origin, "destination": flight.destination,
                     "date": flight.date, "passenger": passenger}
                )  # fmt: skip
                return redirect(req.url("/booked"))
        summary = f"<p>{flight.number} · {esc(flight.origin)} to {esc(flight.destination)} · {flight.date} · {money(flight.price)}</p>"
        inner = (
            hidden(flight=flight.id, **route)
            + field_input("Passenger name", "passenger")
            + "<button>Confirm booking</button>"
        )
        return page(
            "flights",
            req,
            "Passenger",
            "<h1>Passenger details</h1>" + summary + form(req.url("/book"), inner, "post"),
        )
    if path == "/booked":
        return page("flights", req, "Booked", "<h1>Booking confirmed</h1><p>Have a good trip.</p>")
    if path == "/status":
        number = req.arg("flight")
        inner = field_input("Flight number", "flight", number) + "<button>Check status</button>"
        result = ""
        if number:
            found = world.flight_status(number)
            result = (
                f"<p>{esc(number.upper())} departs at {found[1]} from gate {found[0]}</p>"
                if found
                else f"<p>No flight {esc(number)} found.</p>"
            )
        return page(
            "flights",
            req,
            "Flight status",
            "<h1>Flight status</h1>" + form(req.url("/status"), inner) + result,
        )
    return help_page("flights", req) if path == "/help" else not_found("flights", req)


# ---------------------------------------------------------------------------------------------- restaurants


def dine(world: World, req: Request, state: State) -> Response:
    path = req.path
    if path == "/":
        inner = field_input("City", "city") + "<button>Search</button>"
        return page(
            "dine", req, "Find a table", "<h1>Find a table</h1>" + form(req.url("/restaurants"), inner)
        )
    if path == "/restaurants":
        city = req.arg("city").strip()
        found = next((v for k, v in world.restaurants.items() if k.lower() == city.lower()), [])
        listing = item_list([(req.url(f"/restaurant/{r.id}"), r.name, r.cuisine) for r in found])
        return page(
            "dine",
            req,
            "Restaurants",
            f"<h1>Restaurants in {esc(city)}</h1>" + (listing or "<p>No restaurants found.</p>"),
        )
    if match := re.fullmatch(r"/restaurant/([\w-]+)", path):
        restaurant = next(
            (r for rs in world.restaurants.values() for r in rs if r.id == match.group(1)), None
        )
        if restaurant is None:
            return not_found("dine", req)
        facts = f"<p>{restaurant.cuisine} · opens at {restaurant.opens} · rating {restaurant.rating}</p>"
        inner = (
            hidden(rid=restaurant.id)
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
        main = (
            f"<h1>{esc(restaurant.name)}</h1>{facts}"
            + form(req.url("/reserve"), inner, "post", "reserve")
            + modal
        )
        return page("dine", req, restaurant.name, main)
    if path == "/reserve" and req.method == "POST":
        restaurant = next(
            (r for rs in world.restaurants.values() for r in rs if r.id == req.arg("rid")), None
        )
        if restaurant is None or not req.arg("date"):
            return page("dine", req, "Reserve", "<h1>Reservation failed</h1><p>Please choose a date.</p>")
        state["reservations"].append(
            {"restaurant": restaurant.name, "city": restaurant.city, "date": req.arg("date"),
             "time": req.arg("time"), "party": req.arg("party")}
        )  # fmt: skip
        return redirect(req.url("/reserved"))
    if path == "/reserved":
        return page("dine", req, "Reserved", "<h1>Reservation confirmed</h1><p>See you soon.</p>")
    return help_page("dine", req) if path == "/help" else not_found("dine", req)


# ---------------------------------------------------------------------------------------------- real estate

HOMES_PER_PAGE = 3


def homes(world: World, req: Request, state: State) -> Response:
    path = req.path
    if path == "/":
        inner = (
            field_input("City", "city")
            + field_select("Bedrooms", "beds", BEDROOM_FILTERS)
            + "<button>Search</button>"
        )
        return page("homes", req, "Find a home", "<h1>Find a home</h1>" + form(req.url("/listings"), inner))
    if path == "/listings":
        city, beds = req.arg("city").strip(), req.arg("beds", "Any")
        city = next((c for c in world.listings if c.lower() == city.lower()), city)
        found = world.search_listings(city, 0 if beds == "Any" else int(beds.rstrip("+") or 0))
        number = max(1, int(req.arg("page", "1")) if req.arg("page", "1").isdigit() else 1)
        shown = found[(number - 1) * HOMES_PER_PAGE : number * HOMES_PER_PAGE]
        listing = item_list([(req.url(f"/listing/{h.id}"), h.address, money(h.price)) for h in shown])
        pager = ""
        if number > 1:
            pager += (
                f'<a href="{req.url("/listings", city=city, beds=beds, page=number - 1)}">Previous page</a> '
            )
        if number * HOMES_PER_PAGE < len(found):
            pager += f'<a href="{req.url("/listings", city=city, beds=beds, page=number + 1)}">Next page</a>'
        main = f"<h1>Homes in {esc(city)}</h1>" + (listing or "<p>No homes match.</p>") + f"<p>{pager}</p>"
        return page("homes", req, "Listings", main)
    if match := re.fullmatch(r"/listing/([\w-]+)", path):
        home = next((h for hs in world.listings.values() for h in hs if h.id == match.group(1)), None)
        if home is None:
            return not_found("homes", req)
        facts = f"<p>{money(home.price)} · {home.bedrooms} bedrooms · built in {home.year_built}</p>"
        inner = (
            hidden(lid=home.id)
            + field_input("Your name", "name")
            + field_input("Viewing date", "date", kind="date")
            + "<button>Request viewing</button>"
        )
        return page(
            "homes",
            req,
            home.address,
            f"<h1>{esc(home.address)}</h1>{facts}" + form(req.url("/viewing"), inner, "post"),
        )
    if path == "/viewing" and req.method == "POST":
        home = next((h for hs in world.listings.values() for h in hs if h.id == req.arg("lid")), None)
        if home is None or not (req.arg("name").strip() and req.arg("date")):
            return page(
                "homes", req, "Viewing", "<h1>Request failed</h1><p>Please give your name and a date.</p>"
            )
        state["viewings"].append(
            {
                "address": home.address,
                "city": home.city,
                "name": req.arg("name").strip(),
                "date": req.arg("date"),
            }
        )
        return redirect(req.url("/viewing/done"))
    if path == "/viewing/done":
        return page(
            "homes", req, "Requested", "<h1>Viewing requested</h1><p>The agent will confirm by email.</p>"
        )
    return help_page("homes", req) if path == "/help" else not_found("homes", req)


# ---------------------------------------------------------------------------------------------- jobs


def jobs(world: World, req: Request, state: State) -> Response:
    path = req.path
    if path == "/":
        inner = field_input("Keyword", "kw") + field_input("Location", "loc") + "<button>Search</button>"
        return page("jobs", req, "Jobs", "<h1>Find your next job</h1>" + form(req.url("/jobs"), inner))
    if path == "/jobs":
        keyword, location, kind = req.arg("kw"), req.arg("loc"), req.arg("type", "Any")
        found = world.search_jobs(keyword, location, kind)
        controls = form(
            req.url("/jobs"),
            hidden(kw=keyword, loc=location)
            + field_select("Job type", "type", ["Any", *JOB_TYPES], kind, True),
        )
        listing = item_list([(req.url(f"/job/{j.id}"), j.label, f"{j.city} · {j.kind}") for j in found])
        return page("jobs", req, "Jobs", "<h1>Jobs</h1>" + controls + (listing or "<p>No jobs match.</p>"))
    if match := re.fullmatch(r"/(job|apply)/([\w-]+)", path):
        job = next((j for j in world.jobs if j.id == match.group(2)), None)
        if job is None:
            return not_found("jobs", req)
        if match.group(1) == "job":
            facts = f"<p>{esc(job.company)} · {esc(job.city)} · {job.kind} · {job.salary:,} USD a year</p>"
            apply = f'<p><a href="{req.url(f"/apply/{job.id}")}">Apply now</a></p>'
            return page("jobs", req, job.title, f"<h1>{esc(job.title)}</h1>{facts}{apply}")
        if req.method == "POST":
            name, email = req.arg("name").strip(), req.arg("email").strip()
            if name and email:
                state["applications"].append(
                    {"job": job.label, "city": job.city, "name": name, "email": email,
                     "experience": req.arg("experience")}
                )  # fmt: skip
                return redirect(req.url("/applied"))
        inner = (
            field_input("Full name", "name")
            + field_input("Email", "email", kind="email")
            + field_select("Experience", "experience", EXPERIENCE)
            + "<button>Submit application</button>"
        )
        return page(
            "jobs",
            req,
            "Apply",
            f"<h1>Apply: {esc(job.label)}</h1>" + form(req.url(f"/apply/{job.id}"), inner, "post"),
        )
    if path == "/applied":
        return page("jobs", req, "Applied", "<h1>Application sent</h1><p>Good luck!</p>")
    return help_page("jobs", req) if path == "/help" else not_found("jobs", req)


# ---------------------------------------------------------------------------------------------- recipes


def recipes(world: World, req: Request, state: State) -> Response:
    path = req.path
    search = form(req.url("/search"), field_input("Search recipes", "q") + "<button>Search</button>")

    def render(title: str, main: str) -> Response:
        return page("recipes", req, title, search + main)

    if path == "/":
        return render("Home", "<h1>CookBook</h1><p>Simple recipes for every day.</p>")
    if path == "/search":
        query = req.arg("q")
        found = world.search_recipes(query)
        listing = item_list([(req.url(f"/recipe/{r.id}"), r.name, "") for r in found])
        return render(
            "Search", f"<h1>Recipes for {esc(query)}</h1>" + (listing or "<p>No recipes found.</p>")
        )
    if match := re.fullmatch(r"/(recipe|print)/(\d+)", path):
        recipe = next((r for r in world.recipes if r.id == int(match.group(2))), None)
        if recipe is None:
            return not_found("recipes", req)
        facts = (
            f"<p>Ready in {recipe.minutes} minutes</p><p>Serves {recipe.serves}</p>"
            f"<p>{recipe.calories} calories per serving</p>"
        )
        if match.group(1) == "print":
            return page("recipes", req, recipe.name, f"<h1>{esc(recipe.name)}</h1>{facts}")
        printable = f'<p><a href="{req.url(f"/print/{recipe.id}")}" target="_blank">Print version</a></p>'
        return render(recipe.name, f"<h1>{esc(recipe.name)}</h1>{facts}{printable}")
    return help_page("recipes", req) if path == "/help" else not_found("recipes", req)


# ---------------------------------------------------------------------------------------------- hotels (held out)


def hotels(world: World, req: Request, state: State) -> Response:
    path = req.path
    stay = {k: req.arg(k) for k in ("checkin", "nights", "guests")}
    if path == "/":
        inner = (
            field_input("City", "city")
            + field_input("Check-in", "checkin", kind="date")
            + field_select("Nights", "nights", [str(n) for n in range(1, 8)])
            + field_select("Guests", "guests", [str(n) for n in range(1, 5)], "2")
            + "<button>Search</button>"
        )
        return page("hotels", req, "Find a stay", "<h1>Find a stay</h1>" + form(req.url("/hotels"), inner))
    if path == "/hotels":
        city, sort = req.arg("city").strip(), req.arg("sort", SORT_HOTELS[0])
        found = list(next((v for k, v in world.hotels.items() if k.lower() == city.lower()), []))
        if sort == SORT_HOTELS[1]:
            found.sort(key=lambda h: h.price)
        elif sort == SORT_HOTELS[2]:
            found.sort(key=lambda h: -h.rating)
        controls = form(
            req.url("/hotels"),
            hidden(city=city, **stay) + field_select("Sort by", "sort", SORT_HOTELS, sort, True),
        )
        listing = item_list(
            [
                (req.url(f"/hotel/{h.id}", **stay), h.name, f"{h.price} USD a night · rating {h.rating}")
                for h in found
            ]
        )
        return page(
            "hotels",
            req,
            "Hotels",
            f"<h1>Hotels in {esc(city)}</h1>" + controls + (listing or "<p>No hotels found.</p>"),
        )
    if match := re.fullmatch(r"/(hotel|book)/([\w-]+)", path):
        hotel = next((h for hs in world.hotels.values() for h in hs if h.id == match.group(2)), None)
        if hotel is None:
            return not_found("hotels", req)
        if match.group(1) == "hotel":
            facts = f"<p>Rating {hotel.rating} · {money(hotel.price)} per night</p>"
            book = f'<p><a href="{req.url(f"/book/{hotel.id}", **stay)}">Book this hotel</a></p>'
            return page("hotels", req, hotel.name, f"<h1>{esc(hotel.name)}</h1>{facts}{book}")
        if req.method == "POST":
            name, email = req.arg("name").strip(), req.arg("email").strip()
            if name and email and stay["checkin"]:
                state["hotel_bookings"].append(
                    {"hotel": hotel.name, "city": hotel.city, **stay, "name": name, "email": email}
                )
                return redirect(req.url("/booked"))
        summary = f"<p>{esc(hotel.name)} · {esc(stay['checkin'])} · {esc(stay['nights'])} nights · {esc(stay['guests'])} guests</p>"
        inner = (
            hidden(**stay)
            + field_input("Guest name", "name")
            + field_input("Email", "email", kind="email")
            + "<button>Confirm booking</button>"
        )
        return page(
            "hotels",
            req,
            "Book",
            "<h1>Your details</h1>" + summary + form(req.url(f"/book/{hotel.id}"), inner, "post"),
        )
    if path == "/booked":
        return page("hotels", req, "Booked", "<h1>Booking confirmed</h1><p>Enjoy your stay.</p>")
    return help_page("hotels", req) if path == "/help" else not_found("hotels", req)


SITES: dict[str, Callable[[World, Request, State], Response]] = {
    "shop": shop,
    "flights": flights,
    "dine": dine,
    "homes": homes,
    "jobs": jobs,
    "recipes": recipes,
    "hotels": hotels,
}
#: The collections of a session's state the checkers read.
COLLECTIONS = (
    "cart",
    "orders",
    "flight_bookings",
    "reservations",
    "viewings",
    "applications",
    "hotel_bookings",
)
