"""The sandbox's seeded ground truth: value pools (half real words, half made-up) and every site's data.

Everything is a pure function of the seed, so the server, the task generator and the checkers agree without
sharing state.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from functools import cached_property

_SYLLABLES = [
    "ka",
    "lo",
    "vin",
    "dra",
    "mek",
    "sul",
    "tor",
    "bre",
    "qui",
    "zan",
    "pel",
    "rud",
    "osk",
    "fen",
    "mar",
]


def stable_rng(*keys: object) -> random.Random:
    """A random generator determined by ``keys`` alone (not by Python's per-process string hashing)."""
    digest = hashlib.sha256("|".join(map(str, keys)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def made_up_words(rng: random.Random, count: int, taken: set[str]) -> list[str]:
    """``count`` capitalised nonsense words of two syllables, distinct from ``taken``."""
    words: list[str] = []
    while len(words) < count:
        word = (rng.choice(_SYLLABLES) + rng.choice(_SYLLABLES)).capitalize()
        if word.lower() not in taken:
            taken.add(word.lower())
            words.append(word)
    return words


REAL_WORDS = {
    "cities": ["Oslo", "Lyon", "Porto", "Krakow", "Dublin", "Bergen", "Seville", "Graz"],
    "first_names": ["Ada", "Liam", "Maria", "Omar", "Yuki", "Elena"],
    "last_names": ["Novak", "Berg", "Silva", "Khan", "Moreau", "Lund"],
    "adjectives": ["Blue", "Red", "Green", "Black", "Wool", "Linen"],
    "streets": ["Birch", "Harbor", "Mill", "Chapel", "Oak", "Station"],
    "companies": ["Northwind", "Bluebird", "Acme", "Globex", "Initech", "Vertex"],
    "eateries": ["Casa", "Golden", "Little", "Olive", "Harbor", "Maple"],
    "recipe_words": ["Classic", "Spicy", "Quick", "Rustic", "Smoky", "Creamy"],
    "hotel_words": ["Aurora", "Central", "Riverside", "Park"],
}
PRODUCT_KINDS = ["scarf", "mug", "lamp", "backpack", "jacket", "kettle"]
DISHES = ["soup", "pie", "tacos", "risotto", "bread", "curry"]
JOB_TITLES = ["Data analyst", "Nurse", "Baker", "Web developer", "Accountant", "Electrician"]
JOB_TYPES = ["Full-time", "Part-time", "Contract"]
EXPERIENCE = ["0-1 years", "2-4 years", "5+ years"]
EATERY_KINDS = ["Bistro", "Kitchen", "Grill", "Trattoria"]
CUISINES = ["Thai", "Italian", "Mexican", "Japanese", "Lebanese", "French"]
OPENING_TIMES = ["11:30", "12:00", "17:00", "17:30", "18:00"]
TABLE_TIMES = ["18:00", "18:30", "19:00", "19:30", "20:00", "20:30", "21:00"]
SIZES = ["S", "M", "L"]
AIRLINES = ["SK", "LH", "AF", "KL", "ZV"]
DATES = [
    "2027-03-14",
    "2027-03-21",
    "2027-04-02",
    "2027-04-18",
    "2027-05-06",
    "2027-05-23",
    "2027-06-11",
    "2027-06-27",
]
SORT_FLIGHTS = ["Recommended", "Price: low to high", "Departure time"]
SORT_SHOP = ["Relevance", "Price: low to high", "Price: high to low"]
SORT_HOTELS = ["Recommended", "Price: low to high", "Rating"]
BEDROOM_FILTERS = ["Any", "1+", "2+", "3+", "4+"]


def money(amount: float) -> str:
    """Prices as the sites print them: ``1,250.00 USD``."""
    return f"{amount:,.2f} USD"


@dataclass(frozen=True)
class Product:
    id: int
    name: str
    color: str
    price: float


@dataclass(frozen=True)
class Flight:
    id: str  # "SK412": unique among the flights of one route and date
    number: str  # "SK 412"
    origin: str
    destination: str
    date: str
    departs: str
    arrives: str
    stops: int
    price: float


@dataclass(frozen=True)
class Restaurant:
    id: str
    name: str
    city: str
    cuisine: str
    opens: str
    rating: float


@dataclass(frozen=True)
class Listing:
    id: str
    address: str
    city: str
    bedrooms: int
    price: int
    year_built: int


@dataclass(frozen=True)
class Job:
    id: str
    title: str
    company: str
    city: str
    kind: str  # Full-time, Part-time, Contract
    salary: int

    @property
    def label(self) -> str:
        return f"{self.title} at {self.company}"


@dataclass(frozen=True)
class Recipe:
    id: int
    name: str
    minutes: int
    serves: int
    calories: int


@dataclass(frozen=True)
class Hotel:
    id: str
    name: str
    city: str
    price: int
    rating: float


def slug(text: str) -> str:
    return "-".join(text.lower().split())


def search_rank(query: str, names: list[str], seed: object, limit: int = 5) -> list[int]:
    """Indexes of the (at most ``limit``) names sharing most words with ``query``, in a seeded display order
    (so the best match is not always first)."""
    words = set(query.lower().split())
    scored = [(len(words & set(name.lower().split())), i) for i, name in enumerate(names)]
    best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], names[s[1]]))[:limit]
    chosen = [i for _, i in best]
    stable_rng("display", seed, query.lower()).shuffle(chosen)
    return chosen


@dataclass
class World:
    """All sites' data for one seed."""

    seed: int = 0
    pools: dict[str, list[str]] = field(init=False)
    made_up: set[str] = field(init=False)

    def __post_init__(self) -> None:
        rng = stable_rng("pools", self.seed)
        taken = {w.lower() for words in REAL_WORDS.values() for w in words}
        taken |= {w.lower() for w in PRODUCT_KINDS + DISHES + CUISINES}
        self.pools = {}
        self.made_up = set()
        for name, real in REAL_WORDS.items():
            fake = made_up_words(rng, len(real), taken)
            self.made_up |= set(fake)
            merged = [w for pair in zip(real, fake, strict=True) for w in pair]
            self.pools[name] = merged
        self.pools["dates"] = list(DATES)

    # ------------------------------------------------------------------ shop
    @cached_property
    def products(self) -> list[Product]:
        products = []
        for adjective in self.pools["adjectives"]:
            for kind in PRODUCT_KINDS:
                rng = stable_rng("product", self.seed, adjective, kind)
                products.append(
                    Product(
                        len(products) + 1,
                        f"{adjective} {kind}",
                        adjective.lower(),
                        rng.randrange(16, 240) / 2,
                    )
                )
        return products

    def product_by_name(self, name: str) -> Product:
        return next(p for p in self.products if p.name == name)

    def search_products(self, query: str) -> list[Product]:
        return [self.products[i] for i in search_rank(query, [p.name for p in self.products], "shop")]

    # ------------------------------------------------------------------ flights
    def flights(self, origin: str, destination: str, date: str) -> list[Flight]:
        """Five flights on a route and date; at least one nonstop, and one cheapest nonstop."""
        rng = stable_rng("flights", self.seed, origin.lower(), destination.lower(), date)
        flights: list[Flight] = []
        numbers: set[str] = set()
        while len(flights) < 5:
            number = f"{rng.choice(AIRLINES)} {rng.randrange(100, 1000)}"
            if number in numbers:
                continue
            numbers.add(number)
            departs = rng.randrange(6 * 60, 21 * 60, 5)
            stops = 0 if len(flights) < 2 else rng.choice([0, 1, 1])
            arrives = departs + rng.randrange(70, 200) + 90 * stops
            price = float(rng.randrange(60, 400) + 0.5 * rng.randrange(2)) + len(flights) * 0.25
            flights.append(
                Flight(
                    id=number.replace(" ", ""),
                    number=number,
                    origin=origin,
                    destination=destination,
                    date=date,
                    departs=f"{departs // 60:02d}:{departs % 60:02d}",
                    arrives=f"{(arrives // 60) % 24:02d}:{arrives % 60:02d}",
                    stops=stops,
                    price=price,
                )
            )
        return flights

    @cached_property
    def status_flights(self) -> list[str]:
        """Flight numbers the status page knows."""
        rng = stable_rng("status", self.seed)
        return sorted({f"{rng.choice(AIRLINES)} {rng.randrange(100, 1000)}" for _ in range(16)})

    def flight_status(self, number: str) -> tuple[str, str] | None:
        """(gate, departure time) of a known flight number."""
        number = " ".join(number.upper().split())
        if number not in self.status_flights:
            return None
        rng = stable_rng("gate", self.seed, number)
        return (
            f"{rng.choice('ABCDE')}{rng.randrange(1, 30)}",
            f"{rng.randrange(6, 22):02d}:{rng.choice(['05', '20', '45'])}",
        )

    # ------------------------------------------------------------------ restaurants, homes, jobs, hotels
    @cached_property
    def restaurants(self) -> dict[str, list[Restaurant]]:
        result = {}
        for city in self.pools["cities"]:
            rng = stable_rng("dine", self.seed, city)
            words = rng.sample(self.pools["eateries"], 4)
            result[city] = [
                Restaurant(
                    f"{slug(city)}-{i}",
                    f"{word} {rng.choice(EATERY_KINDS)}",
                    city,
                    rng.choice(CUISINES),
                    rng.choice(OPENING_TIMES),
                    rng.randrange(30, 50) / 10,
                )
                for i, word in enumerate(words)
            ]
        return result

    @cached_property
    def listings(self) -> dict[str, list[Listing]]:
        result = {}
        for city in self.pools["cities"]:
            rng = stable_rng("homes", self.seed, city)
            streets = rng.sample(self.pools["streets"], 5)
            homes = [
                Listing(
                    f"{slug(city)}-{i}",
                    f"{rng.randrange(2, 99)} {street} {rng.choice(['Lane', 'Road', 'Street', 'Way'])}",
                    city,
                    rng.randrange(1, 6),
                    rng.randrange(30, 180) * 5000
                    + i,  # +i keeps prices distinct, so the order is unambiguous
                    rng.randrange(1950, 2021),
                )
                for i, street in enumerate(streets)
            ]
            result[city] = sorted(homes, key=lambda h: h.price)
        return result

    def search_listings(self, city: str, min_bedrooms: int) -> list[Listing]:
        return [h for h in self.listings.get(city, []) if h.bedrooms >= min_bedrooms]

    @cached_property
    def jobs(self) -> list[Job]:
        jobs = []
        for city in self.pools["cities"]:
            rng = stable_rng("jobs", self.seed, city)
            for i, company in enumerate(rng.sample(self.pools["companies"], 6)):
                jobs.append(
                    Job(
                        f"{slug(city)}-{i}",
                        rng.choice(JOB_TITLES),
                        company,
                        city,
                        rng.choice(JOB_TYPES),
                        rng.randrange(30, 95) * 1000,
                    )
                )
        return jobs

    def search_jobs(self, keyword: str, location: str, kind: str = "Any") -> list[Job]:
        pool = [
            j
            for j in self.jobs
            if (not location.strip() or j.city.lower() == location.strip().lower())
            and kind in ("Any", j.kind)
        ]
        if not keyword.strip():
            return pool[:5]
        return [pool[i] for i in search_rank(keyword, [j.title for j in pool], "jobs")]

    @cached_property
    def recipes(self) -> list[Recipe]:
        recipes = []
        for word in self.pools["recipe_words"]:
            for dish in DISHES:
                rng = stable_rng("recipe", self.seed, word, dish)
                recipes.append(
                    Recipe(
                        len(recipes) + 1,
                        f"{word} {dish}",
                        rng.randrange(3, 19) * 5,
                        rng.randrange(2, 7),
                        rng.randrange(18, 90) * 10,
                    )
                )
        return recipes

    def search_recipes(self, query: str) -> list[Recipe]:
        return [self.recipes[i] for i in search_rank(query, [r.name for r in self.recipes], "recipes")]

    @cached_property
    def hotels(self) -> dict[str, list[Hotel]]:
        result = {}
        for city in self.pools["cities"]:
            rng = stable_rng("hotels", self.seed, city)
            words = rng.sample(self.pools["hotel_words"], 4)
            result[city] = [
                Hotel(
                    f"{slug(city)}-{i}",
                    f"Hotel {word}",
                    city,
                    rng.randrange(60, 260),
                    rng.randrange(60, 99) / 10,
                )
                for i, word in enumerate(words)
            ]
        return result
