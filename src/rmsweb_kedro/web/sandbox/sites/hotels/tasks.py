"""The hotels' task templates: a hotel's rating, booking the cheapest."""

from __future__ import annotations

import random

from rmsweb_kedro.web.sandbox.sites.hotels.data import SORT_HOTELS, HotelsData
from rmsweb_kedro.web.sandbox.steps import (
    Draft,
    Pools,
    accept_cookies,
    answer_task,
    choose,
    click,
    dead_end_search,
    done,
    named_templates,
    person,
    pick,
    record,
    submit,
    type_in,
)
from rmsweb_kedro.web.sandbox.world import DATES


def hotel_rating(hotels: HotelsData, rng: random.Random, pools: Pools) -> Draft | None:
    city = rng.choice(pools["cities"])
    choices = [h for h in hotels.hotels[city] if h.name.split()[1] in pools["hotel_words"]]
    if not choices:
        return None
    hotel = rng.choice(choices)
    steps = [
        accept_cookies(),
        dead_end_search("City", city, f"Hotels in {city}."),
        pick("link", hotel.name, [h.name for h in hotels.hotels[city]], f"Open {hotel.name}."),
    ]
    return answer_task(
        f"What is the guest rating of {hotel.name} in {city}?",
        {"hotel": hotel.name, "city": city},
        steps,
        str(hotel.rating),
        read=r"Rating (\d+(?:\.\d+)?)",
    )


def hotel_book(hotels: HotelsData, rng: random.Random, pools: Pools) -> Draft:
    city, date = rng.choice(pools["cities"]), rng.choice(DATES)
    nights, guests = str(rng.randrange(1, 8)), str(rng.randrange(1, 5))
    hotel = min(hotels.hotels[city], key=lambda h: h.price)
    name, email = person(rng, pools)
    steps = [
        accept_cookies(),
        type_in("City", city, f"Stay in {city}."),
        type_in("Check-in", date, f"Check in on {date}."),
        choose("Nights", nights, [str(n) for n in range(1, 8)], f"{nights} nights."),
        choose("Guests", guests, [str(n) for n in range(1, 5)], f"{guests} guests."),
        click("button", "Search", "Search."),
        choose("Sort by", SORT_HOTELS[1], SORT_HOTELS, "Sort by price."),
        pick("link", hotel.name, [h.name for h in hotels.hotels[city]], f"{hotel.name} is the cheapest."),
        click("link", "Book this hotel", "Book it."),
        type_in("Guest name", name, "Enter the guest."),
        type_in("Email", email, "Enter the e-mail."),
        submit("Confirm booking", "Confirm."),
        done(),
    ]
    return Draft(
        f"Book the cheapest hotel in {city} from {date} for {nights} nights and {guests} guests, for {name} ({email}).",
        {"city": city, "date": date, "nights": nights, "guests": guests, "name": name},
        steps,
        record(
            "hotel_bookings",
            hotel=hotel.name,
            city=city,
            checkin=date,
            nights=nights,
            guests=guests,
            name=name,
            email=email,
        ),
    )


TEMPLATES = named_templates(hotel_rating, hotel_book)
