"""What produced the run, as PROV: software environments, packages, containers, hosts, scripts.

Input: ``records.environments`` and ``records.packages`` (see :mod:`metaprov.ingest.environment`;
both empty for runs without them, which then map exactly as before). Output:

- mp:SoftwarePackage per (manager, name, version), IRI ``<base>/package/<manager>/<name>/<version>``:
  shared by every environment (and every run) holding that version (docs/model.md, decision 32);
- mp:SoftwareEnvironment per content id, IRI ``<base>/environment/<id>``: interpreter, venv,
  conda or Spack environment, ``mp:containerImage`` and ``mp:package`` of its packages;
- mp:ContainerImage per runtime and image;
- mp:ClientScript per client record with a script (path, SHA-256, git commit, branch, dirty);
- on nodes other steps describe (columns they ask for through :func:`add_env_columns`, so no
  triple is stated twice): ``mp:environment`` of each process agent (client, scheduler, worker
  process, a traced process of a Mofka run), ``mp:script`` of a client, the host facts of each
  mp:Node (operating system, kernel, CPU model and count, memory, GPU models), and the run's
  ``prov:used`` of every environment and script (:func:`run_used`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from metaprov.mapping.block import Block, lit_int, lit_str
from metaprov.mapping.terms import MP, RDF, XSD, concat, quote_array

if TYPE_CHECKING:
    from metaprov.mapping import MapContext

LARGE = pa.large_string()


def package_iris(base: str, managers: object, names: object, versions: object) -> pa.Array:
    """``<base>/package/<manager>/<name>/<version>`` for each package (a pip name normalised as
    PEP 503 does: ``Jinja2`` and ``jinja2`` are one distribution)."""
    m = pd.Series(list(managers), dtype=object).astype(str)
    n = pd.Series(list(names), dtype=object).astype(str)
    norm = n.str.replace(r"[-_.]+", "-", regex=True).str.lower()
    n = n.where(m != "pip", norm)
    return concat(
        f"{base}/package/",
        quote_array(m),
        "/",
        quote_array(n),
        "/",
        quote_array(versions),
    )


def environment_iris(base: str, ids: object) -> pa.Array:
    """``<base>/environment/<content id>``."""
    return concat(f"{base}/environment/", quote_array(ids))


def _container_iris(ctx: MapContext, df: pd.DataFrame) -> pa.Array:
    image = df["container_image"].fillna("")
    ident = df["container_id"].fillna("unknown")
    scoped = concat(
        f"{ctx.iris.run}/container/", quote_array(df["container_runtime"]), "/", quote_array(ident)
    ).to_pylist()
    shared = concat(
        f"{ctx.iris.base}/container/",
        quote_array(df["container_runtime"]),
        "/",
        quote_array(image.where(image != "", "-")),
    ).to_pylist()
    return pa.array([g if i else s for g, s, i in zip(shared, scoped, image, strict=True)], LARGE)


def _agent_iris(ctx: MapContext, env: pd.DataFrame) -> list[str | None]:
    """The agent IRI of each environment row (None when the process is no agent we name)."""
    iris = ctx.iris
    linked: dict[str, str] = {}
    procs = getattr(ctx.records.io, "processes", None)
    if procs is not None and len(procs):
        m = procs.dropna(subset=["worker"])
        linked = dict(zip(m["log"].astype(str), m["worker"].astype(str), strict=True))
    w = ctx.records.workers.dropna(subset=["pid", "address"]).drop_duplicates("pid", keep=False)
    by_pid = dict(zip(w["pid"].astype(int), w["address"].astype(str), strict=True))
    out: list[str | None] = []
    for role, address, client, process, pid in zip(
        env["role"], env["address"], env["client"], env["process"], env["pid"], strict=True
    ):
        role, process = str(role), str(process)
        if role == "worker" and not isinstance(address, str) and not pd.isna(pid):
            address = by_pid.get(int(pid))  # anonymous records leave host-name addresses out
        if role == "worker" and isinstance(address, str):
            out.append(iris.processes(iris.workers([address]))[0].as_py())
        elif role == "scheduler" and process.startswith("scheduler-"):
            out.append(iris.scheduler)
        elif role == "client" and isinstance(client, str):
            out.append(iris.clients([client])[0].as_py())
        elif process.startswith("darshan:"):
            log = process[len("darshan:") :]
            worker = linked.get(log)
            out.append(
                iris.processes(iris.workers([worker]))[0].as_py()
                if worker
                else iris.os_processes([log])[0].as_py()
            )
        else:
            out.append(None)
    return out


def _script_iris(ctx: MapContext, scripts: pd.DataFrame) -> pa.Array:
    return concat(f"{ctx.iris.run}/script/", quote_array(scripts["process"]))


def _maps(ctx: MapContext) -> dict[str, Any]:
    """Per subject IRI, the environment facts other steps' blocks carry (cached per export)."""

    def make() -> dict[str, Any]:
        env = ctx.records.environments
        out: dict[str, Any] = {"agent": {}, "script": {}, "node": {}, "used": []}
        if not len(env):
            return out
        has = env["environment"].notna().to_numpy()
        env_iris = environment_iris(ctx.iris.base, env["environment"].fillna("")).to_pylist()
        for agent, e, h in zip(_agent_iris(ctx, env), env_iris, has, strict=True):
            if agent and h:
                out["agent"].setdefault(agent, set()).add(e)
        scripts = env[env["script_kind"].notna()].sort_values("process", kind="stable")
        s_iris = _script_iris(ctx, scripts).to_pylist()
        for client, si in zip(scripts["client"], s_iris, strict=True):
            if isinstance(client, str):
                out["script"].setdefault(ctx.iris.clients([client])[0].as_py(), set()).add(si)
        out["used"] = sorted({e for e, h in zip(env_iris, has, strict=True) if h}) + sorted(s_iris)
        hosts = env[env["source"].eq("capture").fillna(False)].dropna(subset=["hostname"])
        hosts = hosts.sort_values(["hostname", "process"], kind="stable")
        for host, grp in hosts.groupby("hostname", sort=True):
            first = grp.bfill().iloc[0]
            gpus = sorted(
                {g.get("name") for v in grp["gpus"].dropna() for g in _gpus(v) if g.get("name")}
            )
            out["node"][ctx.iris.nodes([host])[0].as_py()] = {
                "roles": sorted(set(grp["role"].dropna().astype(str))),
                MP.operatingSystem: first["os"],
                MP.kernelRelease: first["kernel"],
                MP.cpuModel: first["cpu_model"],
                MP.cpuCount: first["cpus"],
                MP.memoryBytes: first["memory_bytes"],
                MP.gpuModel: gpus or None,
            }
        return out

    return ctx.cached("environment_maps", make)


def env_hosts(ctx: MapContext) -> list[tuple[str, str]]:
    """(host, role) of every process an environment record names: the job step's nodes."""
    env = ctx.records.environments
    if not len(env):
        return []
    rows = env[env["source"].eq("capture").fillna(False)].dropna(subset=["hostname"])
    return sorted({(str(h), str(r)) for h, r in zip(rows["hostname"], rows["role"], strict=True)})


def run_used(ctx: MapContext) -> list[str]:
    """The environments and client scripts the run ``prov:used`` (the job step adds them)."""
    return list(_maps(ctx)["used"])


def add_env_columns(ctx: MapContext, blk: Block, what: str) -> None:
    """Add the environment facts of ``blk``'s subjects: ``what`` is ``agent`` (clients,
    scheduler, processes: ``mp:environment``, and ``mp:script`` of a client) or ``node``
    (the host facts). Nothing for runs without environment records."""
    if not len(ctx.records.environments):
        return
    maps = _maps(ctx)
    subjects = blk.subjects.to_pylist()
    if what == "agent":
        for pred, table in ((MP.environment, maps["agent"]), (MP.script, maps["script"])):
            col = [sorted(table[s]) if s in table else None for s in subjects]
            if any(c is not None for c in col):
                blk.add(pred, pa.array(col, pa.large_list(LARGE)))
        return
    facts = [maps["node"].get(s) for s in subjects]
    if not any(f is not None for f in facts):
        return

    def col(pred: str) -> list[Any]:
        return [None if f is None or _na(f[pred]) else f[pred] for f in facts]

    blk.add(MP.operatingSystem, lit_str(pd.Series(col(MP.operatingSystem), dtype=object)), "str")
    blk.add(MP.kernelRelease, lit_str(pd.Series(col(MP.kernelRelease), dtype=object)), "str")
    blk.add(MP.cpuModel, lit_str(pd.Series(col(MP.cpuModel), dtype=object)), "str")
    blk.add(MP.cpuCount, lit_int(pd.Series(col(MP.cpuCount), dtype="Int64")), "typed", XSD.integer)
    blk.add(
        MP.memoryBytes,
        lit_int(pd.Series(col(MP.memoryBytes), dtype="Int64")),
        "typed",
        XSD.integer,
    )
    blk.add(MP.gpuModel, pa.array(col(MP.gpuModel), pa.large_list(LARGE)), "str")


def _na(v: Any) -> bool:
    return v is None or (not isinstance(v, list) and pd.isna(v))


def add_environment(ctx: MapContext) -> Iterator[Block]:
    """Packages, environments, containers, process links, host facts and client scripts."""
    rec = ctx.records
    env = rec.environments
    if not len(env):
        return
    base = ctx.iris.base
    pk = rec.packages.dropna(subset=["name"])
    pk = pk.assign(version=pk["version"].fillna(""), manager=pk["manager"].fillna("pip"))

    # --- packages: one per (manager, name, version), shared ------------------------------------
    uniq = pk.drop_duplicates(["manager", "name", "version"]).sort_values(
        ["manager", "name", "version"], kind="stable"
    )
    if len(uniq):
        pb = Block(package_iris(base, uniq["manager"], uniq["name"], uniq["version"]))
        pb.add(RDF.type, MP.SoftwarePackage)
        pb.add(MP.packageName, lit_str(uniq["name"]), "str")
        pb.add(MP.packageVersion, pa.array(uniq["version"].astype(str).tolist(), LARGE), "str")
        pb.add(MP.packageManager, lit_str(uniq["manager"]), "str")
        yield pb

    # --- environments: one per content id --------------------------------------------------------
    with_id = env.dropna(subset=["environment"])
    envs = with_id.drop_duplicates("environment").sort_values("environment", kind="stable")
    if len(envs):
        first_proc = with_id.drop_duplicates("environment").set_index("environment")["process"]
        pk_env = pk.assign(
            environment=pk["process"].map(
                dict(zip(with_id["process"], with_id["environment"], strict=True))
            )
        )
        pk_env = pk_env[pk_env["process"].isin(set(first_proc.to_numpy()))]
        pk_env = pk_env.assign(
            iri=package_iris(base, pk_env["manager"], pk_env["name"], pk_env["version"]).to_pylist()
        )
        by_env = pk_env.groupby("environment", sort=False)["iri"].agg(lambda s: sorted(set(s)))
        eb = Block(environment_iris(base, envs["environment"]))
        eb.add(RDF.type, MP.SoftwareEnvironment)
        eb.add(MP.environmentId, lit_str(envs["environment"]), "str")
        eb.add(MP.pythonVersion, lit_str(envs["python_version"]), "str")
        eb.add(MP.pythonExecutable, lit_str(envs["python_executable"]), "str")
        eb.add(MP.virtualEnvironment, lit_str(envs["venv"]), "str")
        eb.add(MP.condaEnvironment, lit_str(envs["conda_name"]), "str")
        eb.add(MP.condaPrefix, lit_str(envs["conda_prefix"]), "str")
        eb.add(MP.spackEnvironment, lit_str(envs["spack_environment"]), "str")
        counts = pk_env.groupby("environment", sort=False).size()
        eb.add(
            MP.packageCount,
            lit_int(envs["environment"].map(counts).astype("Int64")),
            "typed",
            XSD.integer,
        )
        eb.add(
            MP.package,
            pa.array([by_env.get(e) or None for e in envs["environment"]], pa.large_list(LARGE)),
        )
        has_c = envs["container_runtime"].notna().to_numpy()
        if has_c.any():
            c_iris = _container_iris(ctx, envs[has_c])
            col = [None] * len(envs)
            for i, v in zip(has_c.nonzero()[0], c_iris.to_pylist(), strict=True):
                col[i] = v
            eb.add(MP.containerImage, pa.array(col, LARGE))
        yield eb

    # --- containers ------------------------------------------------------------------------------
    conts = env.dropna(subset=["container_runtime"])
    if len(conts):
        c_iris = _container_iris(ctx, conts)
        cdf = conts.assign(iri=c_iris.to_pylist()).drop_duplicates("iri").sort_values("iri")
        cb = Block(pa.array(cdf["iri"].tolist(), LARGE))
        cb.add(RDF.type, MP.ContainerImage)
        cb.add(MP.containerRuntime, lit_str(cdf["container_runtime"]), "str")
        cb.add(MP.imageReference, lit_str(cdf["container_image"]), "str")
        cb.add(MP.containerId, lit_str(cdf["container_id"]), "str")
        yield cb

    # --- client scripts ----------------------------------------------------------------------------
    scripts = env[env["script_kind"].notna()].sort_values("process", kind="stable")
    script_iris = _script_iris(ctx, scripts)
    if len(scripts):
        sb = Block(script_iris)
        sb.add(RDF.type, MP.ClientScript)
        sb.add(MP.scriptKind, lit_str(scripts["script_kind"]), "str")
        sb.add(MP.scriptPath, lit_str(scripts["script"]), "str")
        sb.add(MP.scriptSha256, lit_str(scripts["script_sha256"]), "str")
        sb.add(MP.gitRepository, lit_str(scripts["git_root"]), "str")
        sb.add(MP.gitCommit, lit_str(scripts["git_commit"]), "str")
        sb.add(MP.gitBranch, lit_str(scripts["git_branch"]), "str")
        dirty = [
            None if pd.isna(v) else ("true" if v else "false")
            for v in scripts["git_dirty"].astype(object)
        ]
        sb.add(MP.gitDirty, pa.array(dirty, LARGE), "typed", XSD.boolean)
        sb.add(MP.run, ctx.iris.run)
        yield sb


def _gpus(text: str) -> list[dict]:
    try:
        v = json.loads(text)
    except (TypeError, ValueError):
        return []
    return [g for g in v if isinstance(g, dict)] if isinstance(v, list) else []
