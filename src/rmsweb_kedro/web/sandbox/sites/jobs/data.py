"""The jobs' seeded data: six openings per city."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

from rmsweb_kedro.web.sandbox.world import SiteData, city_item_id, search_rank

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


def draw_job(rng: random.Random, city: str, i: int, company: str) -> Job:
    return Job(
        city_item_id(city, i),
        rng.choice(JOB_TITLES),
        company,
        city,
        rng.choice(JOB_TYPES),
        rng.randrange(30, 95) * 1000,
    )


class JobsData(SiteData):
    @cached_property
    def jobs(self) -> list[Job]:
        return [job for jobs in self.per_city("jobs", "companies", 6, draw_job).values() for job in jobs]

    def job(self, job_id: str) -> Job | None:
        return next((j for j in self.jobs if j.id == job_id), None)

    def search_jobs(self, keyword: str, location: str, kind: str = "Any") -> list[Job]:
        pool = [
            j
            for j in self.jobs
            if (not location.strip() or j.city.lower() == location.strip().lower())
            and kind in ("Any", j.kind)
        ]
        if not keyword.strip():
            return pool[:5]
        return search_rank(keyword, pool, lambda j: j.title, "jobs")
