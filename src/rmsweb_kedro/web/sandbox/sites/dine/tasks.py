"""The restaurants' task templates: an opening time, a reservation through the confirmation modal."""

from __future__ import annotations

import random

from rmsweb_kedro.web.sandbox.reference import ReferenceStep
from rmsweb_kedro.web.sandbox.sites.dine.data import TABLE_TIMES, DineData, Restaurant
from rmsweb_kedro.web.sandbox.steps import (
    Draft,
    Pools,
    accept_cookies,
    answer_task,
    choose,
    click,
    dead_end_search,
    done,
    first_word_in,
    named_templates,
    pick,
    record,
    type_in,
)
from rmsweb_kedro.web.sandbox.world import DATES


def dine_restaurant(
    dine: DineData, rng: random.Random, pools: Pools
) -> tuple[Restaurant | None, list[ReferenceStep]]:
    city = rng.choice(pools["cities"])
    choices = first_word_in(dine.restaurants[city], "name", pools["eateries"])
    if not choices:
        return None, []
    restaurant = rng.choice(choices)
    steps = [
        accept_cookies(),
        dead_end_search("City", city, f"Search restaurants in {city}."),
        pick("link", restaurant.name, [r.name for r in dine.restaurants[city]], f"Open {restaurant.name}."),
    ]
    return restaurant, steps


def dine_opening(dine: DineData, rng: random.Random, pools: Pools) -> Draft | None:
    restaurant, steps = dine_restaurant(dine, rng, pools)
    if restaurant is None:
        return None
    return answer_task(
        f"At what time does {restaurant.name} in {restaurant.city} open?",
        {"restaurant": restaurant.name, "city": restaurant.city},
        steps,
        restaurant.opens,
        read=r"opens at (\d{1,2}:\d\d)",
    )


def dine_reserve(dine: DineData, rng: random.Random, pools: Pools) -> Draft | None:
    restaurant, steps = dine_restaurant(dine, rng, pools)
    if restaurant is None:
        return None
    date, time, party = rng.choice(DATES), rng.choice(TABLE_TIMES), str(rng.randrange(1, 9))
    steps += [
        type_in("Date", date, f"Reserve for {date}."),
        choose("Time", time, TABLE_TIMES, f"At {time}."),
        choose("Party size", party, [str(n) for n in range(1, 9)], f"For {party}."),
        click("button", "Reserve", "Reserve."),
        click("button", "Confirm", "Confirm in the dialog."),
        done(),
    ]
    return Draft(
        f"Reserve a table for {party} at {restaurant.name} in {restaurant.city} on {date} at {time}.",
        {"restaurant": restaurant.name, "city": restaurant.city, "date": date, "time": time, "party": party},
        steps,
        record(
            "reservations",
            restaurant=restaurant.name,
            city=restaurant.city,
            date=date,
            time=time,
            party=party,
        ),
    )


TEMPLATES = named_templates(dine_opening, dine_reserve)
