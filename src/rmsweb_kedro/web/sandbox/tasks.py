"""The sandbox task suite: templates over the seeded world, each instance a :class:`Task` with a checker and a
reference solution (targets by role and name; decision points with wrong alternatives). See docs/sandbox.md."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from rmsweb_kedro.schema import JudgeSpec, Task, level_for_length
from rmsweb_kedro.web.sandbox.reference import ReferenceStep, make_step
from rmsweb_kedro.web.sandbox.server import site_url
from rmsweb_kedro.web.sandbox.world import (
    DATES,
    EXPERIENCE,
    JOB_TYPES,
    SIZES,
    SORT_FLIGHTS,
    SORT_HOTELS,
    TABLE_TIMES,
    World,
    money,
    stable_rng,
)

logger = logging.getLogger(__name__)

Pools = dict[str, list[str]]


class SandboxParams(BaseModel):
    """``params:sandbox`` (conf/base/parameters_sandbox.yml)."""

    seed: int = 0
    instances_per_template: int = Field(default=24, ge=1)
    val_fraction: float = Field(default=0.15, ge=0, lt=0.5)
    test_fraction: float = Field(default=0.15, ge=0, lt=0.5)
    held_out_sites: list[str] = Field(default_factory=lambda: ["hotels"])
    #: combinations: val/test use unseen combinations of strings seen in train; unseen_strings: unseen values.
    split_mode: Literal["combinations", "unseen_strings"] = "combinations"
    train_value_fraction: float = Field(default=0.7, gt=0, lt=1)


@dataclass
class Draft:
    """One template instance before it becomes a Task."""

    instruction: str
    params: dict[str, Any]
    steps: list[ReferenceStep]
    judge: dict[str, Any]


# ---------------------------------------------------------------------------------------------- step helpers


def accept_cookies() -> ReferenceStep:
    return make_step("click", "Dismiss the cookie banner first.", "button", "Accept cookies")


def back(thought: str = "This page does not help; go back.") -> ReferenceStep:
    return make_step("go_back", thought)


def help_detour() -> ReferenceStep:
    return make_step("click", "Maybe the help page explains this.", "link", "Help", recovery=[back()])


def type_in(label: str, text: str, thought: str, submit: bool = False, **decision: Any) -> ReferenceStep:
    return make_step("type", thought, "textbox", label, text=text, submit=submit, **decision)


def choose(label: str, option: str, others: list[str], thought: str) -> ReferenceStep:
    wrong = [
        make_step("select_option", f"Choose {o}.", "combobox", label, option=o) for o in others if o != option
    ][:2]
    return make_step(
        "select_option",
        thought,
        "combobox",
        label,
        option=option,
        decision="choose_option",
        alternatives=wrong,
    )


def pick(role: str, name: str, distractors: list[str], thought: str) -> ReferenceStep:
    wrong = [
        make_step("click", f"Open {d}.", role, d, recovery=[back(f"{d} is not the one I need; go back.")])
        for d in distractors
        if d != name
    ][:2]
    return make_step(
        "click", thought, role, name, decision="pick_item" if wrong else None, alternatives=wrong
    )


def click(role: str, name: str, thought: str) -> ReferenceStep:
    return make_step("click", thought, role, name)


def longer(step: ReferenceStep, kind: str, steps: list[ReferenceStep]) -> ReferenceStep:
    """``step`` with a longer way to the same point that the scripted teacher may take instead (``kind``
    ``longer_route``: ``steps`` replace the step; ``unnecessary_filter``: ``steps`` end with the step itself). Both
    reach a page the reference also reaches by another path, so removing detours (revisited states) keeps them."""
    return {**step, "longer": {"kind": kind, "steps": steps}}


def search(label: str, text: str, thought: str, button: str = "Search", **decision: Any) -> ReferenceStep:
    """Type into a search field and submit with Enter; the longer route types, then clicks the form's button."""
    step = type_in(label, text, thought, True, **decision)
    route = [type_in(label, text, f"Enter {text}."), click("button", button, "Search.")]
    return longer(step, "longer_route", route)


def dead_end_search(label: str, text: str, thought: str) -> ReferenceStep:
    """:func:`search` at a decision point whose wrong alternative is the help page (a detour, always undone)."""
    return search(label, text, thought, decision="dead_end", alternatives=[help_detour()])


def submit(name: str, thought: str) -> ReferenceStep:
    """A click on a form's submit button right after typing into one of that form's text fields: pressing Enter
    there submits the same form (HTML implicit submission), an equivalent the reward accepts (reference.py)."""
    enter = make_step("press", "Press Enter to send the form.", key="Enter")
    return make_step("click", thought, "button", name, equivalents=[enter])


def answer(text: str) -> ReferenceStep:
    return make_step("answer", f"The page says {text}.", text=text)


def done() -> ReferenceStep:
    return make_step("stop", "The task is complete.", status="success")


def record(collection: str, **match: Any) -> dict[str, Any]:
    return {"checker": "record", "collection": collection, "match": {k: str(v) for k, v in match.items()}}


def expect(value: str) -> dict[str, Any]:
    return {"checker": "answer", "expected": value}


def person(rng: random.Random, pools: Pools) -> tuple[str, str]:
    """A full name and its e-mail address."""
    first, last = rng.choice(pools["first_names"]), rng.choice(pools["last_names"])
    return f"{first} {last}", f"{first}.{last}@example.com".lower()


def first_word_in(items: list[Any], attribute: str, allowed: list[str]) -> list[Any]:
    """Items whose name starts with an allowed pool word (keeps held-out words out of train, and vice versa)."""
    return [i for i in items if getattr(i, attribute).split()[0] in allowed]


# ---------------------------------------------------------------------------------------------- templates


def shop_product(world: World, rng: random.Random, pools: Pools):
    adjective, kind = (
        rng.choice(pools["adjectives"]),
        rng.choice(sorted({p.name.split()[1] for p in world.products})),
    )
    product = world.product_by_name(f"{adjective} {kind}")
    distractors = [p.name for p in world.search_products(product.name)]
    steps = [
        accept_cookies(),
        dead_end_search("Search products", product.name, f"Search for the {product.name}."),
        pick("link", product.name, distractors, f"Open the {product.name}."),
    ]  # fmt: skip
    return product, steps


def shop_price(world: World, rng: random.Random, pools: Pools) -> Draft:
    product, steps = shop_product(world, rng, pools)
    return Draft(
        f"What is the price of the {product.name} on Shopwell?",
        {"product": product.name},
        [*steps, answer(money(product.price))],
        expect(money(product.price)),
    )


def shop_cart(world: World, rng: random.Random, pools: Pools) -> Draft:
    product, steps = shop_product(world, rng, pools)
    size, qty = rng.choice(SIZES), str(rng.randrange(1, 4))
    steps += [
        choose("Size", size, SIZES, f"Pick size {size}."),
        choose("Quantity", qty, ["1", "2", "3"], f"Set the quantity to {qty}."),
        click("button", "Add to cart", "Add it to the cart."),
        done(),
    ]
    return Draft(
        f"Add {qty} {product.name} in size {size} to the cart.",
        {"product": product.name, "size": size, "qty": qty},
        steps,
        record("cart", product=product.name, size=size, qty=qty),
    )


def shop_order(world: World, rng: random.Random, pools: Pools) -> Draft:
    product, steps = shop_product(world, rng, pools)
    size = rng.choice(SIZES)
    name, _ = person(rng, pools)
    street, city = rng.choice(pools["streets"]), rng.choice(pools["cities"])
    address = f"{street} Street {rng.randrange(1, 40)}, {city}"
    steps += [
        choose("Size", size, SIZES, f"Pick size {size}."),
        choose("Quantity", "1", ["2"], "One is enough."),
        click("button", "Add to cart", "Add it to the cart."),
        click("link", "Checkout", "Go to checkout."),
        type_in("Full name", name, "Enter the buyer's name."),
        type_in("Address", address, "Enter the shipping address."),
        submit("Place order", "Place the order."),
        done(),
    ]
    return Draft(
        f"Buy one {product.name} in size {size} for {name}, shipped to {address}.",
        {
            "product": product.name,
            "size": size,
            "name": name,
            "street": street,
            "city": city,
            "address": address,
        },
        steps,
        record("orders", product=product.name, size=size, qty="1", name=name, address=address),
    )


def flight_gate(world: World, rng: random.Random, pools: Pools) -> Draft:
    number = rng.choice(world.status_flights)
    gate, _ = world.flight_status(number) or ("", "")
    steps = [
        accept_cookies(),
        make_step("click", "Flight status is on its own page.", "link", "Flight status",
                  decision="dead_end", alternatives=[help_detour()]),
        search("Flight number", number, f"Look up {number}.", button="Check status"),
        answer(gate),
    ]  # fmt: skip
    return Draft(f"From which gate does flight {number} depart?", {"flight": number}, steps, expect(gate))


def flight_search(world: World, rng: random.Random, pools: Pools):
    origin, destination = rng.sample(pools["cities"], 2)
    date = rng.choice(DATES)
    found = world.flights(origin, destination, date)
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
    skip = [answer(money(overall.price))] if overall is not cheapest else []
    nonstop = make_step("click", "Only nonstop flights.", "checkbox", "Nonstop only",
                        decision="skip_filter" if skip else None, alternatives=skip)  # fmt: skip
    return (origin, destination, date, found, cheapest), [*steps, nonstop]


def flight_cheapest(world: World, rng: random.Random, pools: Pools) -> Draft:
    (origin, destination, date, _, cheapest), steps = flight_search(world, rng, pools)
    return Draft(
        f"Find the cheapest nonstop flight from {origin} to {destination} on {date}. What does it cost?",
        {"origin": origin, "destination": destination, "date": date},
        [*steps, answer(money(cheapest.price))],
        expect(money(cheapest.price)),
    )


def flight_book(world: World, rng: random.Random, pools: Pools) -> Draft:
    (origin, destination, date, found, cheapest), steps = flight_search(world, rng, pools)
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


def dine_restaurant(world: World, rng: random.Random, pools: Pools):
    city = rng.choice(pools["cities"])
    choices = first_word_in(world.restaurants[city], "name", pools["eateries"])
    if not choices:
        return None, []
    restaurant = rng.choice(choices)
    steps = [
        accept_cookies(),
        dead_end_search("City", city, f"Search restaurants in {city}."),
        pick("link", restaurant.name, [r.name for r in world.restaurants[city]], f"Open {restaurant.name}."),
    ]
    return restaurant, steps


def dine_opening(world: World, rng: random.Random, pools: Pools) -> Draft | None:
    restaurant, steps = dine_restaurant(world, rng, pools)
    if restaurant is None:
        return None
    return Draft(
        f"At what time does {restaurant.name} in {restaurant.city} open?",
        {"restaurant": restaurant.name, "city": restaurant.city},
        [*steps, answer(restaurant.opens)],
        expect(restaurant.opens),
    )


def dine_reserve(world: World, rng: random.Random, pools: Pools) -> Draft | None:
    restaurant, steps = dine_restaurant(world, rng, pools)
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


def homes_search(world: World, rng: random.Random, pools: Pools, with_filter: bool):
    """(city, bedrooms filter, listings shown, steps up to the results page)."""
    city = rng.choice(pools["cities"])
    beds = rng.choice(["Any", "2+", "3+"]) if with_filter else "Any"
    found = world.search_listings(city, 0 if beds == "Any" else int(beds[0]))
    steps = [accept_cookies()]
    if with_filter:
        steps += [
            type_in("City", city, f"Homes in {city}."),
            choose("Bedrooms", beds, ["Any", "1+", "2+", "3+", "4+"], f"At least {beds} bedrooms."),
            click("button", "Search", "Search."),
        ]
    else:
        steps.append(dead_end_search("City", city, f"Homes in {city}."))
    return city, beds, found, steps


def open_listing(world: World, rng: random.Random, pools: Pools, with_filter: bool):
    city, beds, found, steps = homes_search(world, rng, pools, with_filter)
    choices = [h for h in found if h.address.split()[1] in pools["streets"]]
    if not choices:
        return None, beds, []
    home = rng.choice(choices)
    position = found.index(home)
    if position >= 3:
        steps.append(click("link", "Next page", "It is not on the first page."))
    shown = found[3:6] if position >= 3 else found[:3]
    steps.append(pick("link", home.address, [h.address for h in shown], f"Open {home.address}."))
    return home, beds, steps


def homes_year(world: World, rng: random.Random, pools: Pools) -> Draft | None:
    home, _, steps = open_listing(world, rng, pools, with_filter=False)
    if home is None:
        return None
    return Draft(
        f"In which year was the home at {home.address} in {home.city} built?",
        {"address": home.address, "city": home.city},
        [*steps, answer(str(home.year_built))],
        expect(str(home.year_built)),
    )


def homes_viewing(world: World, rng: random.Random, pools: Pools) -> Draft | None:
    home, beds, steps = open_listing(world, rng, pools, with_filter=True)
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


def homes_cheapest(world: World, rng: random.Random, pools: Pools) -> Draft | None:
    city, beds, found, steps = homes_search(world, rng, pools, with_filter=True)
    if not found:
        return None
    price = money(found[0].price)
    at_least = "any number of bedrooms" if beds == "Any" else f"at least {beds[0]} bedrooms"
    return Draft(
        f"What is the price of the cheapest home in {city} with {at_least}?",
        {"city": city, "beds": beds},
        [*steps, answer(price)],
        expect(price),
    )


def find_job(world: World, rng: random.Random, pools: Pools):
    city = rng.choice(pools["cities"])
    choices = [j for j in world.jobs if j.city == city and j.company in pools["companies"]]
    if not choices:
        return None
    job = rng.choice(choices)
    return job if job in world.search_jobs(job.title, city, job.kind) else None


def job_salary(world: World, rng: random.Random, pools: Pools) -> Draft | None:
    job = find_job(world, rng, pools)
    if job is None or job not in world.search_jobs(job.title, job.city):
        return None
    salary = f"{job.salary:,} USD"
    steps = [
        accept_cookies(),
        type_in("Keyword", job.title, f"Search {job.title} jobs."),
        search("Location", job.city, f"In {job.city}."),
        longer(
            pick(
                "link",
                job.label,
                [j.label for j in world.search_jobs(job.title, job.city)],
                f"Open {job.label}.",
            ),
            "unnecessary_filter",
            [
                choose("Job type", job.kind, ["Any", *JOB_TYPES], f"Only {job.kind} jobs."),
                pick(
                    "link",
                    job.label,
                    [j.label for j in world.search_jobs(job.title, job.city, job.kind)],
                    f"Open {job.label}.",
                ),
            ],
        ),
        answer(salary),
    ]
    return Draft(
        f"What is the yearly salary of the {job.title} job at {job.company} in {job.city}?",
        {"job": job.label, "city": job.city},
        steps,
        expect(salary),
    )


def job_apply(world: World, rng: random.Random, pools: Pools) -> Draft | None:
    job = find_job(world, rng, pools)
    if job is None:
        return None
    name, email = person(rng, pools)
    experience = rng.choice(EXPERIENCE)
    steps = [
        accept_cookies(),
        type_in("Keyword", job.title, f"Search {job.title} jobs."),
        type_in("Location", job.city, f"In {job.city}."),
        submit("Search", "Search."),
        choose("Job type", job.kind, ["Any", "Full-time", "Part-time", "Contract"], f"Only {job.kind} jobs."),
        pick(
            "link",
            job.label,
            [j.label for j in world.search_jobs(job.title, job.city, job.kind)],
            f"Open {job.label}.",
        ),
        click("link", "Apply now", "Apply."),
        type_in("Full name", name, "Enter the name."),
        type_in("Email", email, "Enter the e-mail."),
        choose("Experience", experience, EXPERIENCE, f"{experience} of experience."),
        click("button", "Submit application", "Submit."),
        done(),
    ]
    return Draft(
        f"Apply to the {job.kind} {job.title} job at {job.company} in {job.city} as {name} ({email}) "
        f"with {experience} of experience.",
        {"job": job.label, "city": job.city, "name": name, "experience": experience},
        steps,
        record("applications", job=job.label, city=job.city, name=name, email=email, experience=experience),
    )


def open_recipe(
    world: World, rng: random.Random, pools: Pools, recipe_name: str | None = None, first: bool = True
):
    recipes = first_word_in(world.recipes, "name", pools["recipe_words"])
    recipe = next(r for r in recipes if r.name == recipe_name) if recipe_name else rng.choice(recipes)
    look_up = search("Search recipes", recipe.name, f"Search for {recipe.name}.")
    if first:
        look_up = dead_end_search("Search recipes", recipe.name, f"Search for {recipe.name}.")
    steps = [
        look_up,
        pick(
            "link", recipe.name, [r.name for r in world.search_recipes(recipe.name)], f"Open {recipe.name}."
        ),
    ]
    return recipe, steps


RECIPE_QUESTIONS = {
    "minutes": ("How many minutes does the {name} take to make?", "minutes"),
    "serves": ("How many people does the {name} serve?", "serves"),
    "calories": ("How many calories per serving does the {name} have?", "calories"),
}


def recipe_fact(world: World, rng: random.Random, pools: Pools) -> Draft:
    recipe, steps = open_recipe(world, rng, pools)
    fact = rng.choice(sorted(RECIPE_QUESTIONS))
    question, attribute = RECIPE_QUESTIONS[fact]
    value = str(getattr(recipe, attribute))
    return Draft(
        question.format(name=recipe.name),
        {"recipe": recipe.name, "fact": fact},
        [accept_cookies(), *steps, answer(value)],
        expect(value),
    )


def recipe_compare(world: World, rng: random.Random, pools: Pools) -> Draft | None:
    first, steps_a = open_recipe(world, rng, pools)
    second, steps_b = open_recipe(world, rng, pools, first=False)
    if first.calories == second.calories or first.name == second.name:
        return None
    lighter = min(first, second, key=lambda r: r.calories)
    return Draft(
        f"Which has fewer calories per serving, the {first.name} or the {second.name}? Answer with its name.",
        {"first": first.name, "second": second.name},
        [accept_cookies(), *steps_a, *steps_b, answer(lighter.name)],
        expect(lighter.name),
    )


def hotel_rating(world: World, rng: random.Random, pools: Pools) -> Draft | None:
    city = rng.choice(pools["cities"])
    choices = [h for h in world.hotels[city] if h.name.split()[1] in pools["hotel_words"]]
    if not choices:
        return None
    hotel = rng.choice(choices)
    steps = [
        accept_cookies(),
        dead_end_search("City", city, f"Hotels in {city}."),
        pick("link", hotel.name, [h.name for h in world.hotels[city]], f"Open {hotel.name}."),
        answer(str(hotel.rating)),
    ]
    return Draft(
        f"What is the guest rating of {hotel.name} in {city}?",
        {"hotel": hotel.name, "city": city},
        steps,
        expect(str(hotel.rating)),
    )


def hotel_book(world: World, rng: random.Random, pools: Pools) -> Draft:
    city, date = rng.choice(pools["cities"]), rng.choice(DATES)
    nights, guests = str(rng.randrange(1, 8)), str(rng.randrange(1, 5))
    hotel = min(world.hotels[city], key=lambda h: h.price)
    name, email = person(rng, pools)
    steps = [
        accept_cookies(),
        type_in("City", city, f"Stay in {city}."),
        type_in("Check-in", date, f"Check in on {date}."),
        choose("Nights", nights, [str(n) for n in range(1, 8)], f"{nights} nights."),
        choose("Guests", guests, [str(n) for n in range(1, 5)], f"{guests} guests."),
        click("button", "Search", "Search."),
        choose("Sort by", SORT_HOTELS[1], SORT_HOTELS, "Sort by price."),
        pick("link", hotel.name, [h.name for h in world.hotels[city]], f"{hotel.name} is the cheapest."),
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


Template = Callable[[World, random.Random, Pools], Draft | None]
TEMPLATES: dict[str, tuple[str, Template]] = {
    "shop_price": ("shop", shop_price),
    "shop_cart": ("shop", shop_cart),
    "shop_order": ("shop", shop_order),
    "flight_gate": ("flights", flight_gate),
    "flight_cheapest": ("flights", flight_cheapest),
    "flight_book": ("flights", flight_book),
    "dine_opening": ("dine", dine_opening),
    "dine_reserve": ("dine", dine_reserve),
    "homes_year": ("homes", homes_year),
    "homes_viewing": ("homes", homes_viewing),
    "homes_cheapest": ("homes", homes_cheapest),
    "job_salary": ("jobs", job_salary),
    "job_apply": ("jobs", job_apply),
    "recipe_fact": ("recipes", recipe_fact),
    "recipe_compare": ("recipes", recipe_compare),
    "hotel_rating": ("hotels", hotel_rating),
    "hotel_book": ("hotels", hotel_book),
}


# ---------------------------------------------------------------------------------------------- generation


def split_pools(world: World, train_fraction: float, seed: int) -> tuple[Pools, Pools]:
    """Each value pool cut in two (train values, held-out values), real and made-up words on both sides."""
    train, held = {}, {}
    for name, values in world.pools.items():
        if name == "dates":
            train[name] = held[name] = values
            continue
        shuffled = list(values)
        stable_rng("split", seed, name).shuffle(shuffled)
        cut = max(1, min(len(values) - 1, round(len(values) * train_fraction)))
        train[name], held[name] = shuffled[:cut], shuffled[cut:]
    return train, held


def draw(name: str, template: Template, world: World, pools: Pools, count: int, seed: int) -> list[Draft]:
    """Up to ``count`` distinct instances of a template (distinct by parameters)."""
    rng = stable_rng("instances", seed, name, sorted(pools.get("cities", [])))
    drafts: dict[str, Draft] = {}
    for _ in range(count * 30):
        if len(drafts) >= count:
            break
        draft = template(world, rng, pools)
        if draft is not None:
            drafts.setdefault(repr(sorted(draft.params.items())), draft)
    if len(drafts) < count:
        logger.info("Template %s has %d distinct instances (asked for %d)", name, len(drafts), count)
    return list(drafts.values())


def atoms(draft: Draft) -> set[str]:
    """The words of a draft's string values: what "seen in train" is measured on."""
    return {
        w.lower() for v in draft.params.values() if isinstance(v, str) for w in v.replace(",", " ").split()
    }


def assign_splits(drafts: list[Draft], params: SandboxParams, rng: random.Random) -> list[str]:
    """train/val/test by instance, at random (the instances' parameter combinations are distinct)."""
    order = list(range(len(drafts)))
    rng.shuffle(order)
    n_test = round(len(drafts) * params.test_fraction)
    n_val = round(len(drafts) * params.val_fraction)
    splits = ["train"] * len(drafts)
    for rank, index in enumerate(order):
        splits[index] = "test" if rank < n_test else "val" if rank < n_test + n_val else "train"
    return splits


def generate_tasks(params: SandboxParams) -> list[Task]:
    """The whole suite: every template's instances as Tasks with splits, levels and checkers."""
    world = World(params.seed)
    planned: list[tuple[str, str, Draft, str]] = []  # template, site, draft, split
    train_pools, held_pools = split_pools(world, params.train_value_fraction, params.seed)
    for name, (site, template) in TEMPLATES.items():
        held_out_site = site in params.held_out_sites
        if params.split_mode == "unseen_strings" and not held_out_site:
            n_eval = round(params.instances_per_template * (params.val_fraction + params.test_fraction))
            train = draw(
                name, template, world, train_pools, params.instances_per_template - n_eval, params.seed
            )
            evaluation = draw(name, template, world, held_pools, n_eval, params.seed)
            n_val = round(
                len(evaluation) * params.val_fraction / (params.val_fraction + params.test_fraction)
            )
            planned += [(name, site, d, "train") for d in train]
            planned += [(name, site, d, "val" if i < n_val else "test") for i, d in enumerate(evaluation)]
            continue
        drafts = draw(name, template, world, world.pools, params.instances_per_template, params.seed)
        splits = (
            ["test"] * len(drafts)
            if held_out_site
            else assign_splits(drafts, params, stable_rng("splits", params.seed, name))
        )
        planned += [(name, site, d, s) for d, s in zip(drafts, splits, strict=True)]
    if params.split_mode == "combinations":  # val/test instances with a word train never saw move to train
        seen = set().union(*(atoms(d) for _, site, d, s in planned if s == "train"))
        planned = [
            (
                n,
                site,
                d,
                "train" if s != "train" and site not in params.held_out_sites and not atoms(d) <= seen else s,
            )
            for n, site, d, s in planned
        ]
    tasks = []
    counters: dict[str, int] = {}
    for name, site, draft, split in planned:
        counters[name] = counters.get(name, 0) + 1
        tasks.append(
            Task(
                id=f"sandbox-{name}-{counters[name]:03d}",
                source="sandbox",
                site=site,
                start_url=site_url(site),
                instruction=draft.instruction,
                level=level_for_length(len(draft.steps)),
                reference_length=len(draft.steps),
                split=split,
                judge=JudgeSpec(kind="sandbox_checker", config=draft.judge),
                reference_solution=draft.steps,
                metadata={
                    "template": name,
                    "params": draft.params,
                    "world_seed": params.seed,
                    "split_mode": params.split_mode,
                },
            )
        )
    return tasks
