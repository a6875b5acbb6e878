"""``ro-crate-preview.html``: the crate's metadata as one static page a person can read.

Input: the crate's entities (after every run was added, so runs added by an earlier
``--add-to`` show too). Output: HTML without scripts or remote resources: the dataset (name,
description, license, authors, date), then per run its span, status, engine, resource usage,
PROV files (size, sha256), a table of its task prefixes and its record files; then every other
data entity of the crate.
"""

from __future__ import annotations

import html
import re
from typing import Any

from metaprov.crate.builder import ids_of, types_of

_CSS = """
body{font-family:system-ui,Arial,sans-serif;color:#222;max-width:1100px;margin:2em auto;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:.85em;word-break:break-all}
h2{border-bottom:2px solid #916f6f;padding-bottom:.2em;margin-top:2em}
.note{background:#fff6e0;padding:.3em .6em;border-left:3px solid #e0a000}
"""


def _e(v: Any) -> str:
    return html.escape("" if v is None else str(v))


#: A scheme at the start of an id (``javascript:``, ``data:``, ``file:``, ``http:``).
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _linkable(i: str) -> bool:
    """May ``i`` (an id from a crate, untrusted) be a live link? Only ``http:``, ``https:``,
    ``mailto:`` and paths inside the crate (no scheme, not ``//host``, not absolute)."""
    if any(ord(c) < 0x21 or c in "\\\x7f" for c in i):
        return False  # browsers drop blanks and control characters: "java\tscript:" runs
    if _SCHEME.match(i):
        return i.lower().startswith(("http://", "https://", "mailto:"))
    return not i.startswith(("/", "#"))


def _link(crate: Any, i: str) -> str:
    e = crate.get(i)
    name = e.get("name") if e is not None else None
    if not _linkable(i):
        return _e(name or i)
    return f'<a href="{_e(i)}">{_e(name or i)}</a>'


def _size(v: Any) -> int | str:
    """A ``contentSize`` as a number when it is one (an existing crate may hold anything)."""
    try:
        return int(v if v is not None else 0)
    except (TypeError, ValueError, OverflowError):
        return str(v)


def _usage(crate: Any, action: Any, *, by: str = "term") -> dict[str, Any]:
    """An action's resource usage: value by ontology term (``by="term"``) or by ``name``."""
    out = {}
    for i in ids_of(action.get("resourceUsage")):
        pv = crate.get(i)
        if pv is not None:
            key = (
                pv.get("name") if by == "name" else str(pv.get("propertyID", "")).rsplit("#", 1)[-1]
            )
            out[str(key)] = pv.get("value")
    return out


def _num(v: Any, digits: int = 6) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return _e(v)


#: Resource usage terms that count things (bytes, tasks, calls): whole numbers.
_COUNT = re.compile(r"(?i)bytes|count")


def _count(v: Any) -> str:
    """A count (bytes, tasks): a whole number, even when the JSON-LD holds it as a float
    (``75851923.0`` -> ``75,851,923``, never ``75,851,923.000000``)."""
    if isinstance(v, float) and v.is_integer():
        return f"{int(v):,}"
    return _num(v)


def render_preview(crate: Any) -> str:
    """The preview page of ``crate`` (an ``rocrate.ROCrate``)."""
    root = crate.root_dataset
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(root.get('name') or 'RO-Crate')}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{_e(root.get('name'))}</h1>",
        f"<p>{_e(root.get('description'))}</p>",
        "<table>",
    ]
    lic = root.get("license")
    lic_text = (
        ", ".join(_link(crate, i) for i in ids_of(lic)) if not isinstance(lic, str) else _e(lic)
    )
    rows = [
        ("License", lic_text),
        (
            "Authors",
            ", ".join(_link(crate, i) for i in ids_of(root.get("author"))) or "(none given)",
        ),
        ("Published", _e(root.get("datePublished"))),
        ("Conforms to", ", ".join(_link(crate, i) for i in ids_of(root.get("conformsTo")))),
        ("Metadata", '<a href="ro-crate-metadata.json">ro-crate-metadata.json</a>'),
    ]
    out += [f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows]
    out.append("</table>")
    organize = [e for e in crate.get_entities() if "OrganizeAction" in types_of(e)]
    shown: set[str] = set()
    for org in sorted(organize, key=lambda e: e.id):
        run_ids = ids_of(org.get("result"))
        if not run_ids or crate.get(run_ids[0]) is None:
            continue
        run = crate.get(run_ids[0])
        shown.add(run.id)
        out += _run_section(crate, org, run, shown)
    others = [
        e
        for e in crate.data_entities
        if e.id not in shown and not any(e.id.startswith(f) for f in _folders(crate, shown))
    ]
    if others:
        out.append("<h2>Other data in this crate</h2><ul>")
        out += [
            f"<li>{_link(crate, e.id)} <small>{_e(e.get('description'))}</small></li>"
            for e in others
        ]
        out.append("</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _folders(crate: Any, shown: set[str]) -> list[str]:
    out = []
    for e in crate.data_entities:
        if "Dataset" in types_of(e) and set(ids_of(e.get("about"))) & shown:
            out.append(e.id)
    return out


def _run_section(crate: Any, org: Any, run: Any, shown: set[str]) -> list[str]:
    u = _usage(crate, run, by="name")
    out = [f"<h2>{_e(run.get('name'))}</h2>", f"<p>{_e(run.get('description'))}</p>", "<table>"]
    rows = [
        ("Run", f"<code>{_e(run.id)}</code>"),
        ("From / to", f"{_e(run.get('startTime'))} &ndash; {_e(run.get('endTime'))}"),
        (
            "Status",
            _e(str(run.get("actionStatus", "")).rsplit("/", 1)[-1])
            + (f" ({_e(run.get('error'))})" if run.get("error") else ""),
        ),
        ("Agent", ", ".join(_link(crate, i) for i in ids_of(run.get("agent"))) or "(unknown)"),
        ("Workflow", ", ".join(_link(crate, i) for i in ids_of(run.get("instrument")))),
        ("Engine", ", ".join(_link(crate, i) for i in ids_of(org.get("instrument")))),
        (
            "Resources",
            "; ".join(
                f"{_e(k)}: {_count(v) if _COUNT.search(str(k)) else _num(v)}" for k, v in u.items()
            ),
        ),
    ]
    out += [f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows]
    out.append("</table>")
    folder = next(
        (
            e
            for e in crate.data_entities
            if "Dataset" in types_of(e) and run.id in ids_of(e.get("about"))
        ),
        None,
    )
    if folder is not None:
        parts = [crate.get(i) for i in ids_of(folder.get("hasPart"))]
        prov = [
            p for p in parts if p is not None and str(p.id).rsplit("/", 1)[-1].startswith("prov.")
        ]
        if prov:
            out.append(
                "<h3>PROV files</h3><table><tr><th>file</th><th>format</th><th>bytes</th><th>sha256</th></tr>"
            )
            for p in prov:
                out.append(
                    f"<tr><td>{_link(crate, p.id)}</td><td>{_e(p.get('encodingFormat'))}</td>"
                    f"<td class=n>{_num(_size(p.get('contentSize')))}</td><td><code>{_e(p.get('sha256'))}</code></td></tr>"
                )
            out.append("</table>")
        desc = folder.get("description") or ""
        if "not included" in desc:
            out.append(f'<p class="note">{_e(desc)}</p>')
        report = [p for p in parts if p is not None and str(p.id).endswith("report.html")]
        for p in report:
            out.append(f"<p>HTML report: {_link(crate, p.id)}</p>")
    controls = [crate.get(i) for i in ids_of(org.get("object"))]
    acts = [crate.get(i) for c in controls if c is not None for i in ids_of(c.get("object"))]
    acts = [a for a in acts if a is not None]
    if acts:
        out.append(
            "<h3>Task prefixes</h3><table><tr><th>prefix</th><th>tasks</th><th>status</th>"
            "<th>first start</th><th>last end</th><th>compute s</th><th>mean s</th><th>max s</th>"
            "<th>bytes read</th><th>bytes written</th></tr>"
        )
        for a in acts:
            au = _usage(crate, a)
            tool = (
                crate.get(ids_of(a.get("instrument"))[0]) if ids_of(a.get("instrument")) else None
            )
            out.append(
                "<tr>"
                f"<td>{_e(tool.get('name') if tool is not None else a.get('name'))}</td>"
                f"<td class=n>{_count(au.get('taskCount'))}</td>"
                f"<td>{_e(str(a.get('actionStatus', '')).rsplit('/', 1)[-1].replace('ActionStatus', ''))}</td>"
                f"<td>{_e(a.get('startTime'))}</td><td>{_e(a.get('endTime'))}</td>"
                f"<td class=n>{_num(au.get('totalDuration'))}</td><td class=n>{_num(au.get('meanDuration'))}</td>"
                f"<td class=n>{_num(au.get('maxDuration'))}</td>"
                f"<td class=n>{_count(au.get('bytesRead'))}</td><td class=n>{_count(au.get('bytesWritten'))}</td>"
                "</tr>"
            )
        out.append("</table>")
    if folder is not None:
        records = [crate.get(i) for i in ids_of(folder.get("mentions"))] + [
            p
            for p in (crate.get(i) for i in ids_of(folder.get("hasPart")))
            if p is not None and "/records/" in p.id
        ]
        records = [r for r in records if r is not None]
        if records:
            out.append(
                "<h3>Record files of the run</h3><table><tr><th>file</th><th>bytes</th><th>sha256</th></tr>"
            )
            for r in records:
                out.append(
                    f"<tr><td>{_link(crate, r.id)}</td><td class=n>{_num(_size(r.get('contentSize')))}</td>"
                    f"<td><code>{_e(r.get('sha256'))}</code></td></tr>"
                )
            out.append("</table>")
    return out
