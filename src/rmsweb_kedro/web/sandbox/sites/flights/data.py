"""The flights' seeded data: five flights per route and date, and the flight numbers the status page knows."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from rmsweb_kedro.contracts.seeding import stable_rng
from rmsweb_kedro.web.sandbox.world import SiteData

AIRLINES = ["SK", "LH", "AF", "KL", "ZV"]
SORT_FLIGHTS = ["Recommended", "Price: low to high", "Departure time"]


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


class FlightData(SiteData):
    def flights(self, origin: str, destination: str, date: str) -> list[Flight]:
        """Five flights on a route and date; at least one nonstop, and one cheapest nonstop."""
        rng = stable_rng("flights", self.world.seed, origin.lower(), destination.lower(), date)
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
        rng = stable_rng("status", self.world.seed)
        return sorted({f"{rng.choice(AIRLINES)} {rng.randrange(100, 1000)}" for _ in range(16)})

    def flight_status(self, number: str) -> tuple[str, str] | None:
        """(gate, departure time) of a known flight number."""
        number = " ".join(number.upper().split())
        if number not in self.status_flights:
            return None
        rng = stable_rng("gate", self.world.seed, number)
        return (
            f"{rng.choice('ABCDE')}{rng.randrange(1, 30)}",
            f"{rng.randrange(6, 22):02d}:{rng.choice(['05', '20', '45'])}",
        )
