"""The jobs' task templates: an opening's salary, an application."""

from __future__ import annotations

import random

from rmsweb_kedro.web.sandbox.reference import ReferenceStep
from rmsweb_kedro.web.sandbox.sites.jobs.data import EXPERIENCE, JOB_TYPES, Job, JobsData
from rmsweb_kedro.web.sandbox.steps import (
    Draft,
    Pools,
    accept_cookies,
    answer_task,
    choose,
    click,
    done,
    longer,
    named_templates,
    person,
    pick,
    record,
    search,
    submit,
    type_in,
)


def find_job(jobs: JobsData, rng: random.Random, pools: Pools) -> Job | None:
    city = rng.choice(pools["cities"])
    choices = [j for j in jobs.jobs if j.city == city and j.company in pools["companies"]]
    if not choices:
        return None
    job = rng.choice(choices)
    return job if job in jobs.search_jobs(job.title, city, job.kind) else None


def pick_job(jobs: JobsData, job: Job, kind: str = "Any") -> ReferenceStep:
    """Open ``job`` from the results of its title and city (of ``kind``), the other results its distractors."""
    return pick(
        "link",
        job.label,
        [j.label for j in jobs.search_jobs(job.title, job.city, kind)],
        f"Open {job.label}.",
    )


def job_salary(jobs: JobsData, rng: random.Random, pools: Pools) -> Draft | None:
    job = find_job(jobs, rng, pools)
    if job is None or job not in jobs.search_jobs(job.title, job.city):
        return None
    salary = f"{job.salary:,} USD"
    steps = [
        accept_cookies(),
        type_in("Keyword", job.title, f"Search {job.title} jobs."),
        search("Location", job.city, f"In {job.city}."),
        longer(
            pick_job(jobs, job),
            "unnecessary_filter",
            [
                choose("Job type", job.kind, ["Any", *JOB_TYPES], f"Only {job.kind} jobs."),
                pick_job(jobs, job, job.kind),
            ],
        ),
    ]
    return answer_task(
        f"What is the yearly salary of the {job.title} job at {job.company} in {job.city}?",
        {"job": job.label, "city": job.city},
        steps,
        salary,
        read=r"(\d[\d,]* USD) a year",
    )


def job_apply(jobs: JobsData, rng: random.Random, pools: Pools) -> Draft | None:
    job = find_job(jobs, rng, pools)
    if job is None:
        return None
    name, email = person(rng, pools)
    experience = rng.choice(EXPERIENCE)
    steps = [
        accept_cookies(),
        type_in("Keyword", job.title, f"Search {job.title} jobs."),
        type_in("Location", job.city, f"In {job.city}."),
        submit("Search", "Search."),
        choose("Job type", job.kind, ["Any", *JOB_TYPES], f"Only {job.kind} jobs."),
        pick_job(jobs, job, job.kind),
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


TEMPLATES = named_templates(job_salary, job_apply)
