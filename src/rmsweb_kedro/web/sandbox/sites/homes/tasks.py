"""The homes' task templates: a listing's year (maybe on page 2), the cheapest with a filter, a viewing request."""

from __future__ import annotations

import random

from rmsweb_kedro.web.sandbox.pages import money
from rmsweb_kedro.web.sandbox.reference import ReferenceStep
from rmsweb_kedro.web.sandbox.sites.homes.data import BEDROOM_FILTERS, HOMES_PER_PAGE, HomesData, Listing
from rmsweb_kedro.web.sandbox.steps import (
    MONEY,
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


def homes_search(
    homes: HomesData, rng: random.Random, pools: Pools, with_filter: bool
) -> tuple[str, str, list[Listing], list[ReferenceStep]]:
    """(city, bedrooms filter, listings shown, steps up to the results page)."""
    city = rng.choice(pools["cities"])
    beds = rng.choice(["Any", "2+", "3+"]) if with_filter else "Any"
    found = homes.search_listings(city, 0 if beds == "Any" else int(beds[0]))
    steps = [accept_cookies()]
    if with_filter:
        steps += [
            type_in("City", city, f"Homes in {city}."),
            choose("Bedrooms", beds, BEDROOM_FILTERS, f"At least {beds} bedrooms."),
            click("button", "Search", "Search."),
        ]
    else:
        steps.append(dead_end_search("City", city, f"Homes in {city}."))
    return city, beds, found, steps


def open_listing(
    homes: HomesData, rng: random.Random, pools: Pools, with_filter: bool
) -> tuple[Listing | None, str, list[ReferenceStep]]:
    city, beds, found, steps = homes_search(homes, rng, pools, with_filter)
    choices = [h for h in found if h.address.split()[1] in pools["streets"]]
    if not choices:
        return None, beds, []
    home = rng.choice(choices)
    position = found.index(home)
    if position >= HOMES_PER_PAGE:
        steps.append(click("link", "Next page", "It is not on the first page."))
    shown = (
        found[HOMES_PER_PAGE : 2 * HOMES_PER_PAGE] if position >= HOMES_PER_PAGE else found[:HOMES_PER_PAGE]
    )
    steps.append(pick("link", home.address, [h.address for h in shown], f"Open {home.address}."))
    return home, beds, steps


def homes_year(homes: HomesData, rng: random.Random, pools: Pools) -> Draft | None:
    home, _, steps = open_listing(homes, rng, pools, with_filter=False)
    if home is None:
        return None
    return answer_task(
        f"In which year was the home at {home.address} in {home.city} built?",
        {"address": home.address, "city": home.city},
        steps,
        str(home.year_built),
        read=r"built in (\d{4})",
    )


def homes_viewing(homes: HomesData, rng: random.Random, pools: Pools) -> Draft | None:
    home, beds, steps = open_listing(homes, rng, pools, with_filter=True)
    if home is None:
        return None
    name, _ = person(rng, pools)
    date = rng.choice(DATES)
    steps += [
        type_in("Your name", name, "Enter the name."),
        type_in("Viewing date", date, "Enter the date."),
        submit("Request viewing", "Send the request."),
        done(),
    ]
    at_least = "any number of bedrooms" if beds == "Any" else f"at least {beds[0]} bedrooms"
    return Draft(
        f"Search homes in {home.city} with {at_least} and request a viewing of {home.address} for {name} on {date}.",
        {"address": home.address, "city": home.city, "beds": beds, "name": name, "date": date},
        steps,
        record("viewings", address=home.address, city=home.city, name=name, date=date),
    )


def homes_cheapest(homes: HomesData, rng: random.Random, pools: Pools) -> Draft | None:
    city, beds, found, steps = homes_search(homes, rng, pools, with_filter=True)
    if not found:
        return None
    price = money(found[0].price)
    at_least = "any number of bedrooms" if beds == "Any" else f"at least {beds[0]} bedrooms"
    return answer_task(
        f"What is the price of the cheapest home in {city} with {at_least}?",
        {"city": city, "beds": beds},
        steps,
        price,
        read=MONEY,
    )


TEMPLATES = named_templates(homes_year, homes_viewing, homes_cheapest)
