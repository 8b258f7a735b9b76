"""The flights' task templates: a flight's gate, the cheapest nonstop's price, booking it."""

from __future__ import annotations

import random

from rmsweb_kedro.web.sandbox.pages import money
from rmsweb_kedro.web.sandbox.reference import ReferenceStep, make_step
from rmsweb_kedro.web.sandbox.sites.flights.data import SORT_FLIGHTS, Flight, FlightData
from rmsweb_kedro.web.sandbox.steps import (
    MONEY,
    Draft,
    Pools,
    accept_cookies,
    answer,
    answer_task,
    choose,
    done,
    help_detour,
    longer,
    named_templates,
    person,
    pick,
    record,
    search,
    submit,
    type_in,
)
from rmsweb_kedro.web.sandbox.world import DATES


def flight_gate(flights: FlightData, rng: random.Random, pools: Pools) -> Draft:
    number = rng.choice(flights.status_flights)
    gate, _ = flights.flight_status(number) or ("", "")
    steps = [
        accept_cookies(),
        make_step("click", "Flight status is on its own page.", "link", "Flight status",
                  decision="dead_end", alternatives=[help_detour()]),
        search("Flight number", number, f"Look up {number}.", button="Check status"),
    ]  # fmt: skip
    return answer_task(f"From which gate does flight {number} depart?", {"flight": number}, steps, gate,
                       read=r"from gate (\w+)")  # fmt: skip


def flight_search(
    flights: FlightData, rng: random.Random, pools: Pools
) -> tuple[tuple[str, str, str, list[Flight], Flight], list[ReferenceStep]]:
    """((origin, destination, date, flights found, the cheapest nonstop), steps up to the filtered results)."""
    origin, destination = rng.sample(pools["cities"], 2)
    date = rng.choice(DATES)
    found = flights.flights(origin, destination, date)
    cheapest = min((f for f in found if f.stops == 0), key=lambda f: f.price)
    others = [c for c in pools["cities"] if c not in (origin, destination)]
    steps = [
        accept_cookies(),
        type_in("From", origin, f"Departure city is {origin}."),
        type_in("To", destination, f"Destination is {destination}.", decision="type_value",
                alternatives=[type_in("To", rng.choice(others), "Enter the destination.")]),
        type_in("Date", date, f"Travel date {date}."),
        submit("Search", "Search flights."),
        make_step("wait", "Results are still loading.", seconds=1),
        longer(choose("Sort by", SORT_FLIGHTS[1], SORT_FLIGHTS, "Sort by price."), "unnecessary_filter",
               [choose("Sort by", SORT_FLIGHTS[2], SORT_FLIGHTS, "Sort by departure first."),
                choose("Sort by", SORT_FLIGHTS[1], SORT_FLIGHTS, "Sort by price.")]),
    ]  # fmt: skip
    overall = min(found, key=lambda f: f.price)
    skip = [answer(money(overall.price), MONEY)] if overall is not cheapest else []
    nonstop = make_step("click", "Only nonstop flights.", "checkbox", "Nonstop only",
                        decision="skip_filter" if skip else None, alternatives=skip)  # fmt: skip
    return (origin, destination, date, found, cheapest), [*steps, nonstop]


def flight_cheapest(flights: FlightData, rng: random.Random, pools: Pools) -> Draft:
    (origin, destination, date, _, cheapest), steps = flight_search(flights, rng, pools)
    return answer_task(
        f"Find the cheapest nonstop flight from {origin} to {destination} on {date}. What does it cost?",
        {"origin": origin, "destination": destination, "date": date},
        steps,
        money(cheapest.price),
        read=MONEY,
    )


def flight_book(flights: FlightData, rng: random.Random, pools: Pools) -> Draft:
    (origin, destination, date, found, cheapest), steps = flight_search(flights, rng, pools)
    name, _ = person(rng, pools)
    others = [f"Select {f.number}" for f in found if f.stops == 0]
    steps += [
        pick("link", f"Select {cheapest.number}", others, f"{cheapest.number} is the cheapest nonstop."),
        type_in("Passenger name", name, "Enter the passenger."),
        submit("Confirm booking", "Confirm."),
        done(),
    ]
    return Draft(
        f"Book the cheapest nonstop flight from {origin} to {destination} on {date} for {name}.",
        {"origin": origin, "destination": destination, "date": date, "name": name},
        steps,
        record(
            "flight_bookings",
            flight=cheapest.number,
            date=date,
            origin=origin,
            destination=destination,
            passenger=name,
        ),
    )


TEMPLATES = named_templates(flight_gate, flight_cheapest, flight_book)
