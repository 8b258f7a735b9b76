"""The jobs' seeded data: six openings per city."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from rmsweb_kedro.contracts.seeding import stable_rng
from rmsweb_kedro.web.sandbox.registry import World
from rmsweb_kedro.web.sandbox.world import search_rank, slug

JOB_TITLES = ["Data analyst", "Nurse", "Baker", "Web developer", "Accountant", "Electrician"]
JOB_TYPES = ["Full-time", "Part-time", "Contract"]
EXPERIENCE = ["0-1 years", "2-4 years", "5+ years"]


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


@dataclass
class JobsData:
    world: World

    @cached_property
    def jobs(self) -> list[Job]:
        jobs = []
        for city in self.world.pools["cities"]:
            rng = stable_rng("jobs", self.world.seed, city)
            for i, company in enumerate(rng.sample(self.world.pools["companies"], 6)):
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
