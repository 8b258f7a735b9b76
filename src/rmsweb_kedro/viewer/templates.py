"""The viewer's pages as Jinja2 templates (autoescaped): server-rendered HTML, no script needed to read them, so an
exported episode is one self-contained file."""

from __future__ import annotations

from jinja2 import DictLoader, Environment, select_autoescape

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#222}
nav{background:#243447;padding:.4em 1em}nav a{color:#dde;margin-right:1.2em;text-decoration:none}
nav a.on{color:#fff;font-weight:bold;border-bottom:2px solid #fc6}
main{padding:1em}table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:.2em .5em}
th{background:#eef}.success{background:#d8f5d0}.failure{background:#f8d4d4}.env{background:#fff0c0}
.placeholder{border:2px dashed #c66;color:#a33;padding:2em;background:#fee;max-width:40em}
.shot{margin:0;max-width:100%}.frame{position:relative;display:inline-block;max-width:100%}
.frame img{max-width:100%;height:auto;display:block;border:1px solid #999}
.target{position:absolute;border:3px solid #e0218a;box-sizing:border-box;pointer-events:none}
.typed{position:absolute;background:#e0218a;color:#fff;font-size:.8em;padding:0 .3em;white-space:nowrap}
.step{border:1px solid #ccc;margin:.5em 0;padding:.5em}.removed{opacity:.55;border:2px dashed #c00}
.removed .tag{color:#c00;font-weight:bold}.diverged{border:3px solid #f60;background:#fff4e8}
.diverged .tag{color:#f60;font-weight:bold}.side{display:flex;gap:1em;align-items:flex-start}
.side>div{flex:1;min-width:0}pre{white-space:pre-wrap;font-size:.85em;background:#f6f6f6;padding:.3em}
.missing{color:#a33}.facts td:first-child{font-weight:bold}.small img{max-width:360px}
"""

BASE = """<!doctype html><html><head><meta charset="utf-8"><title>{{ title }} - rmsweb viewer</title>
<style>{{ style }}</style></head><body>
{% if not export %}<nav>{% for key, label in tabs %}<a href="/{{ key }}" class="{{ 'on' if key == tab }}">{{ label }}</a>
{% endfor %}<span style="color:#9ab;float:right">{{ run_label }}</span></nav>{% endif %}
<main><h2>{{ title }}</h2>{% block body %}{% endblock %}</main></body></html>"""

MACROS = """
{% macro shot(s, box=None, typed=None) -%}
{% if s.url %}<figure class="shot"><div class="frame">
<img src="{{ src(s) }}" width="{{ s.width }}" height="{{ s.height }}" loading="{{ 'eager' if export else 'lazy' }}" alt="screenshot">
{% if box %}<div class="target" data-box="{{ box|join(',') }}" style="left:{{ 100*box[0]/s.width }}%;top:{{ 100*box[1]/s.height }}%;width:{{ 100*box[2]/s.width }}%;height:{{ 100*box[3]/s.height }}%"></div>
{% if typed %}<div class="typed" style="left:{{ 100*box[0]/s.width }}%;top:{{ 100*(box[1]+box[3])/s.height }}%">typed: {{ typed }}</div>{% endif %}{% endif %}
</div></figure>{% else %}<div class="placeholder screenshot-missing">{{ s.problem }}</div>{% endif %}
{%- endmacro %}
{% macro step_body(st, small=False) -%}
<div class="step{{ ' removed' if st.removed }}{{ ' diverged' if st.diverged }}" id="step-{{ st.index }}" data-index="{{ st.index }}">
<b>step {{ st.index }}</b> {% if st.removed %}<span class="tag">removed detour</span>{% endif %}
{% if st.diverged %}<span class="tag">leaves the reference path here</span>{% endif %}
<div>URL: <code>{{ st.url }}</code></div>
<div>action: <code class="action">{{ st.action if st.action is not none else '(did not parse)' }}</code></div>
{% if st.thought %}<div>thought: {{ st.thought }}</div>{% endif %}
{% if st.error %}<div class="missing">error: {{ st.error }}</div>{% endif %}
<div class="{{ 'small' if small }}">{{ shot(st.screenshot, st.box, st.typed) }}</div>
{% if st.raw_output and not small %}<details><summary>raw reply</summary><pre>{{ st.raw_output }}</pre></details>{% endif %}
</div>{%- endmacro %}
{% macro facts(d) -%}<table class="facts">{% for k, v in d.items() %}<tr><td>{{ k }}</td><td>{{ v }}</td></tr>{% endfor %}</table>{%- endmacro %}
{% macro pager(page, total, size, link) -%}<p>{{ total }} rows; page {{ page + 1 }} of {{ ((total - 1) // size + 1) if total else 1 }}
{% if page > 0 %}<a href="{{ link(page - 1) }}" class="prev-page">previous</a>{% endif %}
{% if (page + 1) * size < total %}<a href="{{ link(page + 1) }}" class="next-page">next</a>{% endif %}</p>{%- endmacro %}
{% macro frame_table(frame, links={}, colored=()) -%}<table class="rows"><tr>{% for c in frame.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in frame.iter_rows(named=True) %}<tr>{% for c in frame.columns %}<td class="{{ outcome_class(row[c]) if c in colored else '' }}">
{% if c in links %}<a href="{{ links[c](row) }}">{{ row[c] }}</a>{% else %}{{ row[c] if row[c] is not none else '' }}{% endif %}</td>{% endfor %}</tr>{% endfor %}</table>{%- endmacro %}
"""

NOT_HERE = """{% extends "base" %}{% block body %}<p class="not-in-run">{{ message }}</p>{% endblock %}"""

EPISODE = """{% extends "base" %}{% import "macros" as m with context %}{% block body %}
{% if not export %}<p><a href="{{ episode.link }}" class="permalink">link to this episode</a> |
<a href="/export?{{ query }}" class="export">export as one HTML file</a></p>{% endif %}
{{ m.facts(episode.facts) }}
{% if export %}{% for st in episode.steps %}{{ m.step_body(st) }}{% endfor %}
{% elif episode.steps %}{% set st = episode.steps[current] %}
<p class="stepper">step {{ current + 1 }} of {{ episode.steps|length }}
{% if current > 0 %}<a class="prev-step" href="{{ episode.link }}&step={{ current - 1 }}">previous</a>{% endif %}
{% if current + 1 < episode.steps|length %}<a class="next-step" href="{{ episode.link }}&step={{ current + 1 }}">next</a>{% endif %}</p>
{{ m.step_body(st) }}
<p>all steps: {% for s in episode.steps %}<a href="{{ episode.link }}&step={{ loop.index0 }}">{{ s.index }}: {{ s.action }}</a>{{ ' · ' if not loop.last }}{% endfor %}</p>
{% else %}<p>this episode has no steps recorded</p>{% endif %}
{% endblock %}"""

EVALUATION = """{% extends "base" %}{% import "macros" as m with context %}{% block body %}
<form method="get" action="/evaluation" class="filters">
A <select name="a">{% for x in models %}<option {{ 'selected' if x == f.a }}>{{ x }}</option>{% endfor %}</select>
B <select name="b">{% for x in models %}<option {{ 'selected' if x == f.b }}>{{ x }}</option>{% endfor %}</select>
<select name="pair"><option value="">any outcomes</option>{% for k, label in pairs %}<option value="{{ k }}" {{ 'selected' if k == f.pair }}>{{ label }}</option>{% endfor %}</select>
{% for key, label in [('site','site'),('split','split'),('mode','failure mode'),('termination','termination')] %}
{{ label }} <select name="{{ key }}"><option value="">all</option>{% for v in choices[key] %}<option {{ 'selected' if v == f[key] }}>{{ v }}</option>{% endfor %}</select>{% endfor %}
<button type="submit">filter</button></form>
<p>Outcomes: success, failure, or the environment's end (env_error, blocked, judge_error, ...) shown apart: never the agent's failure.</p>
{{ m.pager(page, total, size, link) }}
{{ m.frame_table(rows, links, colored) }}
{% endblock %}"""

EVALUATION_TASK = """{% extends "base" %}{% import "macros" as m with context %}{% block body %}
{% if reference %}<details open><summary>reference solution</summary><ol>{% for r in reference %}<li><code>{{ r }}</code></li>{% endfor %}</ol></details>{% endif %}
<div class="side">{% for col in columns %}<div class="model" data-model="{{ col.episode.model }}">
<h3><a href="{{ col.link }}">{{ col.episode.model }}</a>: <span class="outcome">{{ col.episode.outcome }}</span></h3>
<p>{{ col.episode.n_steps }} steps{% if col.episode.diverged_at is not none %}; leaves the reference at step {{ col.episode.diverged_at }} ({{ col.episode.divergence_mode }}){% endif %}</p>
{% for st in col.steps %}{{ m.step_body(st, small=True) }}{% endfor %}</div>{% endfor %}</div>
{% endblock %}"""

COLLECTION = """{% extends "base" %}{% import "macros" as m with context %}{% block body %}
<form method="get" action="/collection">solved <select name="solved"><option value="">all</option>
<option {{ 'selected' if solved == 'yes' }}>yes</option><option {{ 'selected' if solved == 'no' }}>no</option></select>
<button type="submit">filter</button></form>
{{ m.pager(page, total, size, link) }}{{ m.frame_table(rows, links) }}{% endblock %}"""

COLLECTION_TASK = """{% extends "base" %}{% import "macros" as m with context %}{% block body %}
{% for a in attempts %}<section class="attempt" id="{{ a.id }}"><h3>attempt {{ a.facts.attempt }} ({{ a.facts.mode }}):
<span class="outcome">{{ a.facts.outcome }}</span> <a href="{{ a.link }}">link</a></h3>{{ m.facts(a.facts) }}
{% if a.shortened %}<div class="side"><div><h4>as collected</h4>{% for st in a.steps %}{{ m.step_body(st, small=True) }}{% endfor %}</div>
<div class="shortened"><h4>shortened (what SFT trains on)</h4>{% for st in a.shortened %}{{ m.step_body(st, small=True) }}{% endfor %}</div></div>
{% else %}{% for st in a.steps %}{{ m.step_body(st, small=True) }}{% endfor %}{% endif %}
{% if a.reflection_after %}<div class="reflection"><b>reflection written after this attempt:</b><pre>{{ a.reflection_after }}</pre></div>{% endif %}
</section>{% else %}<p>no attempt of this task in this run</p>{% endfor %}{% endblock %}"""

MINING = """{% extends "base" %}{% import "macros" as m with context %}{% block body %}<p>from <code>{{ table }}</code></p>
<form method="get" action="/mining">failure mode <input name="mode" value="{{ mode or '' }}"><button type="submit">filter</button></form>
{{ m.pager(page, total, size, link) }}{{ m.frame_table(rows, links) }}
{% if rollouts %}<h3>online rollouts of the SFT policy</h3><ul class="rollouts">{% for r in rollouts %}
<li><a href="/episode?stage=mining&amp;id={{ r.trajectory_id|urlencode }}">{{ r.trajectory_id }}</a>: {{ 'success' if r.success else ('failure' if r.success is false else r.termination) }}, {{ r.n_steps }} steps</li>{% endfor %}</ul>{% endif %}
{% endblock %}"""

MINING_STATE = """{% extends "base" %}{% import "macros" as m with context %}{% block body %}
<p><a class="permalink" href="/mining/state?id={{ s.state_id|urlencode }}">link to this state</a> (from <code>{{ table }}</code>)</p>
{{ m.facts({'task': s.task_id, 'instruction': s.instruction, 'URL': s.url, 'reference action': s.reference_action,
 'greedy action': s.greedy_action, 'competence': s.competence, 'failure mode': s.failure_mode,
 'SFT trained on it (in_sft)': s.in_sft, 'source': s.source, 'selection': s.get('selection'),
 'origin (why critical)': s.get('origin')}) }}
<h3>K = {{ samples|length }} samples</h3><table class="samples"><tr><th>sample</th><th>reward</th><th>failure mode</th></tr>
{% for x in samples %}<tr class="{{ 'success' if x.reward > 0 else 'failure' }}"><td><code>{{ x.action }}</code></td><td>{{ x.reward }}</td><td>{{ x.failure_mode or '' }}</td></tr>{% endfor %}</table>
<h3>page</h3>{{ m.shot(screenshot) }}<details><summary>page tree</summary><pre>{{ s.axtree }}</pre></details>{% endblock %}"""

SALVAGE = """{% extends "base" %}{% import "macros" as m with context %}{% block body %}
<h3>training seeds</h3>{% if seeds is not none %}<p>Each seed's run from the same SFT checkpoint: the update whose weights it returned (<code>sft</code>: none beat the SFT policy on the dev split), dev step success (%) of SFT and of the returned weights, and means per sampled batch.</p>{{ m.frame_table(seeds) }}{% else %}<p class="not-in-run">salvage_ds_report: not in this run</p>{% endif %}
{% for name, caption in figures.items() %}<figure class="plot"><img src="/figure?name={{ name }}" alt="{{ name }}" style="max-width:100%"><figcaption>{{ caption }} (<code>{{ name }}</code>)</figcaption></figure>{% endfor %}
{% if report %}<details><summary>report</summary><pre>{{ report }}</pre></details>{% endif %}
<h3>groups (batch k feeds updates k&middot;&mu; to k&middot;&mu; + &mu; - 1)</h3>{% if groups is not none %}{{ m.frame_table(groups, {}, ['decision']) }}{% else %}<p class="not-in-run">salvage_ds_groups: not in this run</p>{% endif %}
{% endblock %}"""

LIVE = """{% extends "base" %}{% import "macros" as m with context %}{% block body %}{{ m.frame_table(rows, links) }}{% endblock %}"""

TEMPLATES = {
    "base": BASE,
    "macros": MACROS,
    "not_here": NOT_HERE,
    "episode": EPISODE,
    "evaluation": EVALUATION,
    "evaluation_task": EVALUATION_TASK,
    "collection": COLLECTION,
    "collection_task": COLLECTION_TASK,
    "mining": MINING,
    "mining_state": MINING_STATE,
    "salvage": SALVAGE,
    "live": LIVE,
}


def outcome_class(value: object) -> str:
    """The colour of an outcome cell: success, failure, or an environment's end (anything else); a Salvage-DS
    group: accepted as a success, rejected as a failure."""
    value = {"accepted": "success", "rejected": "failure"}.get(str(value), value)
    if value in ("success", "failure"):
        return str(value)
    return "env" if value else ""


def environment() -> Environment:
    env = Environment(
        loader=DictLoader(TEMPLATES), autoescape=select_autoescape(default=True, default_for_string=True)
    )
    env.globals["outcome_class"] = outcome_class
    return env
