"""What produced the run, as PROV: software environments, packages, containers, hosts, scripts.

Input: ``records.environments`` and ``records.packages`` (see :mod:`metaprov.ingest.environment`;
both empty for runs without them, which then map exactly as before). Output:

- mp:SoftwarePackage per (manager, name, version), IRI ``<base>/package/<manager>/<name>/<version>``:
  shared by every environment (and every run) holding that version (docs/model.md, decision 31);
- mp:SoftwareEnvironment per content id, IRI ``<base>/environment/<id>``: interpreter, venv,
  conda or Spack environment, ``mp:containerImage`` and ``mp:package`` of its packages;
- mp:ContainerImage per runtime and image;
- on each process agent (client, scheduler, worker process; a traced process of a Mofka run)
  ``mp:environment``; the run ``prov:used`` every environment and client script;
- on each mp:Node its operating system, kernel, CPU model and count, memory, GPU models;
- mp:ClientScript per client record with a script (path, SHA-256, git commit, branch, dirty).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

from metaprov.mapping.agents import client_table
from metaprov.mapping.block import Block, lit_int, lit_str
from metaprov.mapping.terms import MP, PROV, RDF, XSD, concat, quote_array

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


def _agent_iris(ctx: MapContext, env: pd.DataFrame) -> tuple[pa.Array, list[str]]:
    """The agent IRI of each environment row (null when the process is not an agent we know)
    and its class."""
    iris = ctx.iris
    linked: dict[str, str] = {}
    io = ctx.records.io
    procs = getattr(io, "processes", None)
    if procs is not None and len(procs):
        m = procs.dropna(subset=["worker"])
        linked = dict(zip(m["log"].astype(str), m["worker"].astype(str), strict=True))
    from metaprov.mapping.agents import worker_table

    # only agents the agents step describes (a record of a process the run's tables do not know
    # is kept in the tables and the run's prov:used, never as an undescribed agent)
    known_workers = set(worker_table(ctx)["address"].dropna().astype(str))
    known_clients = set(client_table(ctx)["client"].dropna().astype(str))
    w = ctx.records.workers.dropna(subset=["pid", "address"]).drop_duplicates("pid", keep=False)
    by_pid = dict(zip(w["pid"].astype(int), w["address"].astype(str), strict=True))
    out: list[str | None] = []
    classes: list[str] = []
    for role, address, client, process, pid in zip(
        env["role"], env["address"], env["client"], env["process"], env["pid"], strict=True
    ):
        role = str(role)
        if role == "worker" and not isinstance(address, str) and not pd.isna(pid):
            address = by_pid.get(int(pid))  # anonymous records leave host-name addresses out
        if role == "worker" and isinstance(address, str) and address in known_workers:
            out.append(iris.processes(iris.workers([address]))[0].as_py())
            classes.append(MP.WorkerProcess)
        elif role == "scheduler" and str(process).startswith(("scheduler-",)):
            out.append(iris.scheduler)
            classes.append(MP.Scheduler)
        elif role == "client" and isinstance(client, str) and client in known_clients:
            out.append(iris.clients([client])[0].as_py())
            classes.append(MP.Client)
        elif str(process).startswith("darshan:"):
            log = str(process)[len("darshan:") :]
            worker = linked.get(log)
            if worker:
                out.append(iris.processes(iris.workers([worker]))[0].as_py())
                classes.append(MP.WorkerProcess)
            else:
                out.append(iris.os_processes([log])[0].as_py())
                classes.append(MP.Process)
        else:
            out.append(None)
            classes.append("")
    return pa.array(out, LARGE), classes


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

    # --- process agents -> their environment -----------------------------------------------------
    agents, classes = _agent_iris(ctx, env)
    env_iris = environment_iris(base, env["environment"].fillna("")).to_pylist()
    rows = pd.DataFrame(
        {
            "agent": agents.to_pylist(),
            "cls": classes,
            "env": env_iris,
            "has": env["environment"].notna().to_numpy(),
        }
    )
    rows = rows[rows["agent"].notna() & rows["has"]].drop_duplicates(["agent", "env"])
    for cls in sorted(set(rows["cls"])):
        part = rows[rows["cls"] == cls].sort_values("agent", kind="stable")
        grouped = part.groupby("agent", sort=True)["env"].agg(list)
        ab = Block(pa.array(list(grouped.index), LARGE))
        ab.add(RDF.type, cls)
        ab.add(MP.environment, pa.array(list(grouped), pa.large_list(LARGE)))
        yield ab

    # --- client scripts ----------------------------------------------------------------------------
    scripts = env[env["script_kind"].notna()].sort_values("process", kind="stable")
    script_iris = concat(f"{ctx.iris.run}/script/", quote_array(scripts["process"]))
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
        clients = scripts["client"].isin(client_table(ctx)["client"].dropna()).to_numpy()
        if clients.any():
            cb2 = Block(ctx.iris.clients(scripts["client"][clients]))
            cb2.add(RDF.type, MP.Client)
            cb2.add(MP.script, script_iris.filter(pa.array(clients)))
            yield cb2

    # --- the run used its environments and scripts -------------------------------------------------
    used = sorted(set(e for e, h in zip(env_iris, env["environment"].notna(), strict=True) if h))
    used += sorted(script_iris.to_pylist())
    if used:
        rb = Block(pa.array([ctx.iris.run], LARGE))
        rb.add(RDF.type, MP.Run)
        rb.add(PROV.used, pa.array([used], pa.large_list(LARGE)))
        yield rb

    # --- host facts on the nodes -------------------------------------------------------------------
    hosts = env.dropna(subset=["hostname"]).sort_values(["hostname", "process"], kind="stable")
    if len(hosts):
        first = hosts.groupby("hostname", sort=True).first()
        gpu_models = hosts.groupby("hostname", sort=True)["gpus"].agg(
            lambda s: sorted({g.get("name") for v in s.dropna() for g in _gpus(v) if g.get("name")})
        )
        nb = Block(ctx.iris.nodes(list(first.index)))
        nb.add(RDF.type, MP.Node)
        nb.add(MP.hostname, lit_str(list(first.index)), "str")
        nb.add(MP.operatingSystem, lit_str(first["os"]), "str")
        nb.add(MP.kernelRelease, lit_str(first["kernel"]), "str")
        nb.add(MP.cpuModel, lit_str(first["cpu_model"]), "str")
        nb.add(MP.cpuCount, lit_int(first["cpus"]), "typed", XSD.integer)
        nb.add(MP.memoryBytes, lit_int(first["memory_bytes"]), "typed", XSD.integer)
        nb.add(
            MP.gpuModel,
            pa.array([g or None for g in gpu_models.reindex(first.index)], pa.large_list(LARGE)),
            "str",
        )
        nb.add(MP.run, ctx.iris.run)
        yield nb


def _gpus(text: str) -> list[dict]:
    try:
        v = json.loads(text)
    except (TypeError, ValueError):
        return []
    return [g for g in v if isinstance(g, dict)] if isinstance(v, list) else []
