"""The flights' pages and route table."""

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
    inline_script,
    money,
    not_found,
    notice,
    notice_page,
    page,
    redirect,
    sort_by,
)
from rmsweb_kedro.web.sandbox.registry import Route
from rmsweb_kedro.web.sandbox.sites.flights.data import SORT_FLIGHTS, FlightData

COLLECTIONS = {"flight_bookings": ("flight", "origin", "destination", "date", "passenger")}


def route_of(req: Request) -> dict[str, str]:
    return {"from": req.arg("from"), "to": req.arg("to"), "date": req.arg("date")}


def home(data: FlightData, req: Request, state: State) -> Response:
    inner = (
        field_input("From", "from")
        + field_input("To", "to")
        + field_input("Date", "date", kind="date")
        + hidden(new="1")
        + "<button>Search</button>"
    )
    status = f'<p><a href="{req.url("/status")}">Flight status</a></p>'
    return page(req, "Search flights", "<h1>Search flights</h1>" + form(req.url("/results"), inner) + status)


def results(data: FlightData, req: Request, state: State) -> Response:
    route = route_of(req)
    if not all(route.values()):
        return notice(req, "Results", "Results", "Please enter origin, destination and date.")
    sort, nonstop = req.arg("sort", SORT_FLIGHTS[0]), req.arg("nonstop") == "1"
    found = data.flights(route["from"], route["to"], route["date"])
    if nonstop:
        found = [f for f in found if f.stops == 0]
    found = sort_by(found, sort, {SORT_FLIGHTS[1]: lambda f: f.price, SORT_FLIGHTS[2]: lambda f: f.departs})
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
    listing = f'<ul id="results"{" hidden" if late else ""}>{rows}</ul>'
    if late:
        listing = (
            '<p id="loading">Searching flights...</p>'
            + listing
            + inline_script(__package__, "late_results.js")
        )
    heading = f"<h1>{esc(route['from'])} to {esc(route['to'])}</h1><p>{esc(route['date'])}</p>"
    return page(req, "Results", heading + controls + listing)


def book(data: FlightData, req: Request, state: State) -> Response:
    route = route_of(req)
    flight = next(
        (f for f in data.flights(route["from"], route["to"], route["date"]) if f.id == req.arg("flight")),
        None,
    )
    if flight is None or not all(route.values()):
        return not_found(req)
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
        req, "Passenger", "<h1>Passenger details</h1>" + summary + form(req.url("/book"), inner, "post")
    )


def status(data: FlightData, req: Request, state: State) -> Response:
    number = req.arg("flight")
    inner = field_input("Flight number", "flight", number) + "<button>Check status</button>"
    result = ""
    if number:
        found = data.flight_status(number)
        result = (
            f"<p>{esc(number.upper())} departs at {found[1]} from gate {found[0]}</p>"
            if found
            else f"<p>No flight {esc(number)} found.</p>"
        )
    return page(req, "Flight status", "<h1>Flight status</h1>" + form(req.url("/status"), inner) + result)


ROUTES = (
    Route("/", home),
    Route("/results", results),
    Route("/book", book),
    Route("/booked", notice_page("Booked", "Booking confirmed", "Have a good trip.")),
    Route("/status", status),
)
