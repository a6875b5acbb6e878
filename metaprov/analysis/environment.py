"""What ran a run, where its processes differ, and what changed between two runs.

Input: :class:`~metaprov.records.RunRecords` with ``environments`` and ``packages`` (see
:mod:`metaprov.ingest.environment`). Output: small DataFrames, one row per fact, for the
``environment`` question, ``inspect`` and ``compare`` (which uses :func:`package_changes` as
evidence: "numpy 1.26.4 -> 2.1.0 between run A and run B").
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from metaprov.records import RunRecords

#: Columns of :func:`package_changes`.
CHANGE_COLUMNS = ["manager", "package", "change", "before", "after", "processes", "text"]
#: Columns of :func:`process_differences`.
DIFFERENCE_COLUMNS = ["manager", "package", "version", "processes", "roles", "n_processes"]


def _norm(names: pd.Series) -> pd.Series:
    return names.astype(str).str.replace(r"[-_.]+", "-", regex=True).str.lower()


def software_table(records: RunRecords) -> pd.DataFrame:
    """The run's packages, one row per process and package: process, role, manager, name,
    version (the form :attr:`~metaprov.analysis.timeline.Timeline.software` holds)."""
    pk = records.packages.dropna(subset=["name"])
    env = records.environments
    role = dict(zip(env["process"].astype(str), env["role"].fillna("").astype(str), strict=True))
    return pd.DataFrame(
        {
            "process": pk["process"].astype(str).to_numpy(),
            "role": pk["process"].astype(str).map(role).fillna("").to_numpy(),
            "manager": pk["manager"].fillna("pip").astype(str).to_numpy(),
            "name": pk["name"].astype(str).to_numpy(),
            "version": pk["version"].fillna("").astype(str).to_numpy(),
        }
    )


def _versions_of(software: pd.DataFrame | None) -> pd.DataFrame:
    """One row per (manager, package, version) with the processes and roles holding it."""
    if software is None or not len(software):
        return pd.DataFrame(columns=["manager", "package", "version", "processes", "roles"])
    df = software.assign(package=_norm(software["name"]))
    g = df.groupby(["manager", "package", "version"], sort=True)
    return g.agg(
        processes=("process", lambda s: sorted(set(s))), roles=("role", lambda s: sorted(set(s)))
    ).reset_index()


def _versions(records: RunRecords) -> pd.DataFrame:
    return _versions_of(software_table(records))


def process_differences(records: RunRecords) -> pd.DataFrame:
    """Packages whose version differs between the processes of one run (a worker with another
    numpy is a finding, not noise), and packages some processes lack.

    Returns:
        One row per (manager, package, version) of every package that is not the same in all
        the run's recorded processes: ``version`` ("" when a process lacks the package),
        ``processes`` (the process records holding it, space-separated), ``roles``,
        ``n_processes``. Empty when every process ran the same software.

    Example:
        >>> process_differences(read_run("runs/r1"))  # doctest: +SKIP
          manager package version               processes   roles  n_processes
        0     pip   attrs  23.2.0  worker-311-ab12cd34 ...  worker            1
    """
    v = _versions(records)
    env = records.environments
    procs = sorted(set(records.packages["process"].dropna().astype(str)))
    if not len(v) or len(procs) < 2:
        return pd.DataFrame(columns=DIFFERENCE_COLUMNS)
    role_of = dict(zip(env["process"].astype(str), env["role"].fillna("").astype(str), strict=True))
    pk = records.packages
    managed = {
        m: set(g.astype(str))
        for m, g in pk["process"].groupby(pk["manager"].fillna("pip"), sort=True)
    }
    rows = []
    for (manager, package), grp in v.groupby(["manager", "package"], sort=True):
        holders = set().union(*grp["processes"])
        missing = sorted(managed.get(manager, set()) - holders)
        if len(grp) == 1 and not missing:
            continue  # one version in every process that lists this manager's packages
        for r in grp.itertuples(index=False):
            rows.append(
                (
                    manager,
                    package,
                    r.version,
                    " ".join(r.processes),
                    " ".join(r.roles),
                    len(r.processes),
                )
            )
        if missing:
            roles = sorted({role_of.get(p, "") for p in missing})
            rows.append((manager, package, "", " ".join(missing), " ".join(roles), len(missing)))
    return pd.DataFrame(rows, columns=DIFFERENCE_COLUMNS)


def package_changes(
    before: RunRecords,
    after: RunRecords,
    *,
    before_label: str | None = None,
    after_label: str | None = None,
) -> pd.DataFrame:
    """What changed in the software between two runs: packages upgraded, downgraded, added or
    removed (over all their processes).

    Args:
        before: the earlier (reference) run's records.
        after: the other run's records.
        before_label, after_label: how ``text`` names the runs (default: their run ids).

    Returns:
        One row per package whose versions differ, sorted by manager and package:
        ``change`` is ``changed``, ``added`` or ``removed``; ``before``/``after`` the versions
        in each run (several joined by `` / `` when the run's processes differ; "" when
        absent); ``processes`` the process roles of ``after`` holding the new version;
        ``text`` a sentence such as ``numpy 1.26.4 -> 2.1.0 between run A and run B``.
        Empty (with these columns) when the software is the same or either run recorded none.

    Example:
        >>> package_changes(read_run("runs/3"), read_run("runs/7"))  # doctest: +SKIP
          manager package   change  before  after processes                                   text
        0     pip   numpy  changed  1.26.4  2.1.0    worker  numpy 1.26.4 -> 2.1.0 between run 3 and run 7
    """
    return software_changes(
        software_table(before),
        software_table(after),
        before_label=before_label or before.run_id or str(before.path),
        after_label=after_label or after.run_id or str(after.path),
    )


def software_changes(
    before: pd.DataFrame | None,
    after: pd.DataFrame | None,
    *,
    before_label: str,
    after_label: str,
) -> pd.DataFrame:
    """:func:`package_changes` over two :func:`software_table` tables (what a
    :class:`~metaprov.analysis.timeline.Timeline` carries as ``software``)."""
    a, b = _versions_of(before), _versions_of(after)
    if not len(a) or not len(b):
        return pd.DataFrame(columns=CHANGE_COLUMNS)
    la, lb = before_label, after_label
    va = a.groupby(["manager", "package"])["version"].agg(lambda s: sorted(set(s)))
    vb = b.groupby(["manager", "package"])["version"].agg(lambda s: sorted(set(s)))
    roles_b = b.groupby(["manager", "package"])["roles"].agg(lambda s: sorted(set().union(*s)))
    rows = []
    for key in sorted(set(va.index) | set(vb.index)):
        x, y = va.get(key, []), vb.get(key, [])
        if x == y:
            continue
        manager, package = key
        old, new = " / ".join(x), " / ".join(y)
        change = "added" if not x else "removed" if not y else "changed"
        if change == "changed":
            text = f"{package} {old} -> {new} between run {la} and run {lb}"
        elif change == "added":
            text = f"{package} {new} added between run {la} and run {lb}"
        else:
            text = f"{package} {old} removed between run {la} and run {lb}"
        rows.append((manager, package, change, old, new, " ".join(roles_b.get(key, [])), text))
    return pd.DataFrame(rows, columns=CHANGE_COLUMNS)


def software_evidence(base: Any, other: Any, *, limit: int = 20) -> list[dict[str, Any]]:
    """Evidence rows for ``metaprov compare`` (a hook of ``metaprov.compare.EVIDENCE_HOOKS``):
    one ``{"kind": "software", "detail": "numpy 1.26.4 -> 2.1.0 between run A and run B",
    ...}`` per package that changed between two timelines' runs (at most ``limit``, then one
    row saying how many more); nothing when either run recorded no environment."""
    table = software_changes(
        getattr(base, "software", None),
        getattr(other, "software", None),
        before_label=str(getattr(base, "label", "baseline")),
        after_label=str(getattr(other, "label", "other")),
    )
    rows: list[dict[str, Any]] = [
        {
            "kind": "software",
            "detail": str(r.text),
            "package": str(r.package),
            "manager": str(r.manager),
            "change": str(r.change),
            "before": str(r.before),
            "after": str(r.after),
        }
        for r in table.head(limit).itertuples(index=False)
    ]
    if len(table) > limit:
        rows.append({"kind": "software", "detail": f"{len(table) - limit} more package changes"})
    return rows


def environment_summary(records: RunRecords) -> pd.DataFrame:
    """What ran a run: one row per distinct environment with the processes that used it.

    Returns:
        ``environment``, ``roles``, ``processes`` (count), ``python``, ``venv``, ``conda``,
        ``spack``, ``container``, ``packages``, ``hosts``.
    """
    env = records.environments
    cols = [
        "environment",
        "roles",
        "processes",
        "python",
        "venv",
        "conda",
        "spack",
        "container",
        "packages",
        "hosts",
    ]
    if not len(env):
        return pd.DataFrame(columns=cols)
    rows = []
    for eid, grp in env.groupby(env["environment"].fillna(""), sort=True):
        f = grp.iloc[0]
        cont = " ".join(
            str(x) for x in (f["container_runtime"], f["container_image"]) if not pd.isna(x)
        )
        rows.append(
            (
                eid or None,
                " ".join(sorted(set(grp["role"].dropna().astype(str)))),
                len(grp),
                None if pd.isna(f["python_version"]) else f["python_version"],
                None if pd.isna(f["venv"]) else f["venv"],
                None if pd.isna(f["conda_name"]) else f["conda_name"],
                None if pd.isna(f["spack_environment"]) else f["spack_environment"],
                cont or None,
                int(grp["n_packages"].max()) if grp["n_packages"].notna().any() else 0,
                " ".join(sorted(set(grp["hostname"].dropna().astype(str)))) or None,
            )
        )
    return pd.DataFrame(rows, columns=cols)
