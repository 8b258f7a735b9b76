"""The jobs' pages and route table."""

from __future__ import annotations

from rmsweb_kedro.web.sandbox.pages import (
    Request,
    Response,
    State,
    esc,
    field_input,
    field_select,
    form,
    hidden,
    item_list,
    not_found,
    notice_page,
    page,
    redirect,
)
from rmsweb_kedro.web.sandbox.registry import Route
from rmsweb_kedro.web.sandbox.sites.jobs.data import EXPERIENCE, JOB_TYPES, JobsData

COLLECTIONS = {"applications": ("job", "city", "name", "email", "experience")}


def home(data: JobsData, req: Request, state: State) -> Response:
    inner = field_input("Keyword", "kw") + field_input("Location", "loc") + "<button>Search</button>"
    return page(req, "Jobs", "<h1>Find your next job</h1>" + form(req.url("/jobs"), inner))


def search(data: JobsData, req: Request, state: State) -> Response:
    keyword, location, kind = req.arg("kw"), req.arg("loc"), req.arg("type", "Any")
    found = data.search_jobs(keyword, location, kind)
    controls = form(
        req.url("/jobs"),
        hidden(kw=keyword, loc=location) + field_select("Job type", "type", ["Any", *JOB_TYPES], kind, True),
    )
    listing = item_list([(req.url(f"/job/{j.id}"), j.label, f"{j.city} · {j.kind}") for j in found])
    return page(req, "Jobs", "<h1>Jobs</h1>" + controls + (listing or "<p>No jobs match.</p>"))


def job_or_apply(data: JobsData, req: Request, state: State, view: str, job_id: str) -> Response:
    """``/job/<id>``: the opening; ``/apply/<id>``: its application form (a POST with name and e-mail applies)."""
    job = data.job(job_id)
    if job is None:
        return not_found(req)
    if view == "job":
        facts = f"<p>{esc(job.company)} · {esc(job.city)} · {job.kind} · {job.salary:,} USD a year</p>"
        apply = f'<p><a href="{req.url(f"/apply/{job.id}")}">Apply now</a></p>'
        return page(req, job.title, f"<h1>{esc(job.title)}</h1>{facts}{apply}")
    if req.method == "POST":
        name, email = req.arg("name").strip(), req.arg("email").strip()
        if name and email:
            state["applications"].append(
                {"job": job.label, "city": job.city, "name": name, "email": email,
                 "experience": req.arg("experience")}
            )  # fmt: skip
            return redirect(req.url("/applied"))
    inner = (
        field_input("Full name", "name")
        + field_input("Email", "email", kind="email")
        + field_select("Experience", "experience", EXPERIENCE)
        + "<button>Submit application</button>"
    )
    return page(
        req, "Apply", f"<h1>Apply: {esc(job.label)}</h1>" + form(req.url(f"/apply/{job.id}"), inner, "post")
    )


ROUTES = (
    Route("/", home),
    Route("/jobs", search),
    Route(r"/(job|apply)/([\w-]+)", job_or_apply),
    Route("/applied", notice_page("Applied", "Application sent", "Good luck!")),
)
