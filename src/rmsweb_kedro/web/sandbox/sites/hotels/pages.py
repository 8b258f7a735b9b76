"""The hotels' pages and route table."""

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
    notice_page,
    page,
    redirect,
    sort_by,
)
from rmsweb_kedro.web.sandbox.registry import Route
from rmsweb_kedro.web.sandbox.sites.hotels.data import SORT_HOTELS, HotelsData

COLLECTIONS = {"hotel_bookings": ("hotel", "city", "checkin", "nights", "guests", "name", "email")}


def stay_of(req: Request) -> dict[str, str]:
    return {k: req.arg(k) for k in ("checkin", "nights", "guests")}


def home(data: HotelsData, req: Request, state: State) -> Response:
    inner = (
        field_input("City", "city")
        + field_input("Check-in", "checkin", kind="date")
        + field_select("Nights", "nights", [str(n) for n in range(1, 8)])
        + field_select("Guests", "guests", [str(n) for n in range(1, 5)], "2")
        + "<button>Search</button>"
    )
    return page(req, "Find a stay", "<h1>Find a stay</h1>" + form(req.url("/hotels"), inner))


def search(data: HotelsData, req: Request, state: State) -> Response:
    stay = stay_of(req)
    city, sort = req.arg("city").strip(), req.arg("sort", SORT_HOTELS[0])
    sort_keys = {SORT_HOTELS[1]: lambda h: h.price, SORT_HOTELS[2]: lambda h: -h.rating}
    found = sort_by(data.hotels.get(data.city(city), []), sort, sort_keys)
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
        req, "Hotels", f"<h1>Hotels in {esc(city)}</h1>" + controls + (listing or "<p>No hotels found.</p>")
    )


def hotel_or_book(data: HotelsData, req: Request, state: State, view: str, hotel_id: str) -> Response:
    """``/hotel/<id>``: the hotel; ``/book/<id>``: the booking form (a POST with name, e-mail and check-in books)."""
    stay = stay_of(req)
    hotel = data.hotel(hotel_id)
    if hotel is None:
        return not_found(req)
    if view == "hotel":
        facts = f"<p>Rating {hotel.rating} · {money(hotel.price)} per night</p>"
        book = f'<p><a href="{req.url(f"/book/{hotel.id}", **stay)}">Book this hotel</a></p>'
        return page(req, hotel.name, f"<h1>{esc(hotel.name)}</h1>{facts}{book}")
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
        req, "Book", "<h1>Your details</h1>" + summary + form(req.url(f"/book/{hotel.id}"), inner, "post")
    )


ROUTES = (
    Route("/", home),
    Route("/hotels", search),
    Route(r"/(hotel|book)/([\w-]+)", hotel_or_book),
    Route("/booked", notice_page("Booked", "Booking confirmed", "Enjoy your stay.")),
)
