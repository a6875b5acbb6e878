"""What a process ran in: interpreter, installed distributions, venv/conda, container, batch job,
host, client script and its git state.

Input: the process itself (``sys``, ``importlib.metadata``) and, for everything a runtime or a
batch system provides, a **root directory** and an **environ mapping** given as parameters (``/``
and ``os.environ`` in a real capture; a temporary directory and a dict in tests, which create
there the variables and files the real runtimes set). Output: one JSON-safe ``dict`` per process
(the schema is documented in ``docs/capture.md``, *Environment*), written by the capture as
``environment/<role>-<pid>-<token>.json`` in the run directory.

Privacy rules (every function here follows them):

- environment variables are never recorded wholesale: only the named variables of the batch
  systems and container runtimes below are read, and only the facts listed are kept;
- a value that looks like a secret (token, password, key, credentials in a URL) is never kept,
  whatever variable or file it came from (:func:`looks_secret`);
- ``anonymous=True`` leaves out host names and user names (home directories become ``~``).

Nothing here may raise into Dask: :func:`collect` degrades to the parts it could read and lists
what failed in ``errors``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from metaprov.hostlist import expand_nodelist
from metaprov.redact import looks_secret, scrub

#: Version of the per-process environment record (``layout`` field).
ENV_LAYOUT = "metaprov-environment/1"
#: Sub-directory of the run directory holding one environment file per process.
ENV_DIR = "environment"
ROLES = ("client", "scheduler", "worker")


def _clean(value: Any) -> Any:
    """``value``, or None when it looks like a secret."""
    if value is None or value == "":
        return None
    return None if looks_secret(value) else value


def _at(root: Path, path: str | os.PathLike[str]) -> Path:
    """``path`` (absolute, as the process sees it) under ``root``."""
    p = PurePosixPath(str(path))
    return root.joinpath(*p.parts[1:]) if p.is_absolute() else root / p


def _read(root: Path, path: str, limit: int = 1 << 20) -> str | None:
    try:
        with open(_at(root, path), "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


# -- interpreter and distributions ----------------------------------------------------------------


def interpreter() -> dict[str, Any]:
    """Path, version and implementation of this process's Python."""
    return {
        "executable": sys.executable or None,
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "prefix": sys.prefix,
        "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    }


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_DIST_DIR = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+?)(?:-py\d[^-]*)?\.(?:dist|egg)-info$")


def distributions(path: list[str] | None = None) -> list[dict[str, str]]:
    """Every installed distribution visible on ``path`` (default ``sys.path``): the one an
    import would find first (the earliest ``sys.path`` entry), sorted by normalised name.

    Name and version come from the ``<name>-<version>.dist-info`` directory name, the form the
    wheel specification has installers write (listing a directory is ~300x faster than parsing
    every METADATA file); a ``.dist-info``/``.egg-info`` whose name holds no version, and
    anything else ``importlib.metadata`` finds (zipped eggs), is read from its metadata.

    Returns:
        ``{"name", "version", "location"}`` per distribution; ``location`` is the ``sys.path``
        entry it was found in (a ``PYTHONPATH`` overlay shows there).
    """
    from importlib import metadata

    seen: dict[str, dict[str, str]] = {}
    for entry in list(sys.path if path is None else path):
        if not entry:
            continue
        try:
            names = sorted(os.listdir(entry))
        except OSError:
            names = None
        slow = names is None
        for n in names or ():
            if not n.endswith((".dist-info", ".egg-info")):
                continue
            m = _DIST_DIR.match(n)
            if not m:
                slow = True
                continue
            key = _norm(m.group("name"))
            if key not in seen:
                seen[key] = {
                    "name": m.group("name"),
                    "version": m.group("version"),
                    "location": entry,
                }
        if not slow:
            continue
        try:
            dists = list(metadata.distributions(path=[entry]))
        except Exception:
            continue
        for d in dists:
            try:
                name = d.metadata["Name"]
                version = d.version
            except Exception:
                continue
            if not name or version is None:
                continue
            key = _norm(name)
            if key not in seen:
                seen[key] = {"name": str(name), "version": str(version), "location": entry}
    return [seen[k] for k in sorted(seen)]


def virtualenv(
    environ: Mapping[str, str], prefix: str, base_prefix: str, root: Path
) -> dict | None:
    """The virtual environment this interpreter runs in (``sys.prefix != sys.base_prefix``,
    with its ``pyvenv.cfg``), else the one ``$VIRTUAL_ENV`` names, else None."""
    path = prefix if prefix != base_prefix else environ.get("VIRTUAL_ENV")
    if not path:
        return None
    out: dict[str, Any] = {"path": path, "active": prefix != base_prefix}
    cfg = _read(root, str(PurePosixPath(path) / "pyvenv.cfg"), 64_000)
    if cfg:
        for line in cfg.splitlines():
            k, sep, v = line.partition("=")
            k = k.strip().lower()
            if sep and k in ("home", "version", "version_info", "include-system-site-packages"):
                out[k.replace("-", "_")] = v.strip()
    return out


def conda(environ: Mapping[str, str], prefix: str, root: Path) -> dict | None:
    """The conda environment: ``$CONDA_PREFIX`` (else this interpreter's prefix) when it holds
    ``conda-meta/``; name from ``$CONDA_DEFAULT_ENV`` (else the prefix's last part); its package
    list from the ``conda-meta/*.json`` records (name, version, build, channel)."""
    candidates = [environ.get("CONDA_PREFIX"), prefix]
    for pfx in candidates:
        if not pfx:
            continue
        meta = _at(root, pfx) / "conda-meta"
        if not meta.is_dir():
            continue
        packages = []
        for f in sorted(meta.glob("*.json")):
            try:
                rec = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError):
                continue
            if not isinstance(rec, dict) or not rec.get("name"):
                continue
            channel = rec.get("channel") or rec.get("schannel")
            packages.append(
                {
                    "name": str(rec["name"]),
                    "version": str(rec.get("version") or ""),
                    "build": str(rec.get("build") or ""),
                    "channel": None if channel is None else _clean(str(channel)),
                }
            )
        name = environ.get("CONDA_DEFAULT_ENV") if pfx == environ.get("CONDA_PREFIX") else None
        if not name:
            name = "base" if (meta.parent / "condabin").is_dir() else PurePosixPath(pfx).name
        return {"name": name, "prefix": pfx, "packages": packages}
    return None


# -- containers --------------------------------------------------------------------------------

_DOCKER_ID = re.compile(r"(?:/docker/|/docker-|/containers/)([0-9a-f]{64})")


def _kv_file(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip().strip('"')
    return out


#: The image a process runs in, named by the user where the runtime does not show it (Docker):
#: ``ENV METAPROV_CONTAINER_IMAGE=registry/name:tag`` in the image, or ``docker run -e ...``.
CONTAINER_IMAGE_VARIABLE = "METAPROV_CONTAINER_IMAGE"


def container(environ: Mapping[str, str], root: Path) -> dict | None:
    """The container runtime and image (see :func:`detected_container`); an image the runtime
    does not show is taken from ``$METAPROV_CONTAINER_IMAGE`` when the user sets it (a
    container the runtime does not reveal at all is then of runtime ``container``)."""
    found = detected_container(environ, root)
    given = _clean(environ.get(CONTAINER_IMAGE_VARIABLE))
    if not given:
        return found
    if found is None:
        return {"runtime": "container", "image": given, "name": None, "id": None}
    if not found.get("image"):
        found = {**found, "image": given}
    return found


def detected_container(environ: Mapping[str, str], root: Path) -> dict | None:
    """The container runtime and image, from what each runtime provides inside a container.

    - Apptainer/Singularity: ``$APPTAINER_CONTAINER`` / ``$SINGULARITY_CONTAINER`` (image path),
      ``$APPTAINER_NAME`` / ``$SINGULARITY_NAME``, the ``/.singularity.d`` directory;
    - Podman: ``/run/.containerenv`` (engine, name, id, image, imageid), ``$container=podman``;
    - Docker: ``/.dockerenv``; the container id from ``/proc/self/mountinfo`` or ``cgroup``;
    - Shifter: ``$SHIFTER_IMAGEREQUEST`` (image), ``$SHIFTER_IMAGE`` (its id), ``$SHIFTER_RUNTIME``;
    - Charliecloud: ``$CH_RUNNING`` (set by ``ch-run``), the image from ``$CH_IMAGE_STORAGE``
      is not the running image, so the image is the root's ``/ch/environment`` when present.
    """
    for prefix in ("APPTAINER", "SINGULARITY"):
        image = environ.get(f"{prefix}_CONTAINER")
        if image:
            return {
                "runtime": prefix.lower(),
                "image": _clean(image),
                "name": _clean(environ.get(f"{prefix}_NAME")),
                "id": None,
            }
    if _at(root, "/.singularity.d").is_dir():
        labels = _read(root, "/.singularity.d/labels.json", 256_000)
        image = None
        try:
            lab = json.loads(labels) if labels else {}
            image = (
                lab.get("org.label-schema.usage.singularity.deffile.from")
                if isinstance(lab, dict)
                else None
            )
        except ValueError:
            pass
        return {"runtime": "apptainer", "image": _clean(image), "name": None, "id": None}
    containerenv = _read(root, "/run/.containerenv", 64_000)
    if containerenv is not None or environ.get("container") == "podman":
        kv = _kv_file(containerenv or "")
        engine = kv.get("engine", "")
        return {
            "runtime": "podman" if engine.startswith("podman") or not engine else engine,
            "image": _clean(kv.get("image")),
            "name": _clean(kv.get("name")),
            "id": _clean(kv.get("id")),
            "image_id": _clean(kv.get("imageid")),
            "engine": _clean(engine),
        }
    if _at(root, "/.dockerenv").exists():
        cid = None
        for f in ("/proc/self/mountinfo", "/proc/self/cgroup"):
            m = _DOCKER_ID.search(_read(root, f, 1 << 20) or "")
            if m:
                cid = m.group(1)
                break
        return {"runtime": "docker", "image": None, "name": None, "id": cid}
    if environ.get("SHIFTER_IMAGEREQUEST") or environ.get("SHIFTER_RUNTIME"):
        return {
            "runtime": "shifter",
            "image": _clean(environ.get("SHIFTER_IMAGEREQUEST")),
            "name": None,
            "id": _clean(environ.get("SHIFTER_IMAGE")),
        }
    if environ.get("CH_RUNNING"):
        return {"runtime": "charliecloud", "image": None, "name": None, "id": None}
    return None


# -- batch jobs ------------------------------------------------------------------------------

#: (system, field, variables in order of preference) of each batch system's own job variables.
BATCH_VARIABLES: dict[str, dict[str, tuple[str, ...]]] = {
    "slurm": {
        "id": ("SLURM_JOB_ID", "SLURM_JOBID"),
        "name": ("SLURM_JOB_NAME",),
        "queue": ("SLURM_JOB_PARTITION",),
        "account": ("SLURM_JOB_ACCOUNT",),
        "cluster": ("SLURM_CLUSTER_NAME",),
        "nodelist": ("SLURM_JOB_NODELIST", "SLURM_NODELIST"),
        "nodes": ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
        "cores": ("SLURM_CPUS_ON_NODE",),
        "tasks": ("SLURM_NTASKS",),
        "memory_mb": ("SLURM_MEM_PER_NODE",),
        "submit_dir": ("SLURM_SUBMIT_DIR",),
        "array_index": ("SLURM_ARRAY_TASK_ID",),
    },
    "pbs": {
        "id": ("PBS_JOBID",),
        "name": ("PBS_JOBNAME",),
        "queue": ("PBS_QUEUE",),
        "nodefile": ("PBS_NODEFILE",),
        "nodes": ("PBS_NUM_NODES",),
        "cores": ("NCPUS", "PBS_NUM_PPN"),
        "tasks": ("PBS_NP",),
        "submit_dir": ("PBS_O_WORKDIR",),
        "array_index": ("PBS_ARRAY_INDEX", "PBS_ARRAYID"),
    },
    "lsf": {
        "id": ("LSB_JOBID",),
        "name": ("LSB_JOBNAME",),
        "queue": ("LSB_QUEUE",),
        "nodefile": ("LSB_DJOB_HOSTFILE",),
        "hosts": ("LSB_HOSTS",),
        "tasks": ("LSB_DJOB_NUMPROC",),
        "submit_dir": ("LS_SUBCWD",),
        "array_index": ("LSB_JOBINDEX",),
    },
    "flux": {
        "id": ("FLUX_JOB_ID",),
        "nodes": ("FLUX_JOB_NNODES",),
        "tasks": ("FLUX_JOB_SIZE",),
    },
}
_INT_FIELDS = ("nodes", "cores", "tasks", "memory_mb")


def batch_job(environ: Mapping[str, str], root: Path, *, anonymous: bool = False) -> dict | None:
    """The batch job this process runs in, from the job's own variables (Slurm, PBS/Torque,
    LSF, Flux), or None when no batch system says so. Host lists come from the node list
    variable or the job's node file; ``anonymous`` leaves them (and the submit directory) out."""
    for system, fields in BATCH_VARIABLES.items():
        if not environ.get(fields["id"][0]):
            continue
        job: dict[str, Any] = {"system": system}
        for field_name, names in fields.items():
            value = next((environ[n] for n in names if environ.get(n)), None)
            if value is None:
                continue
            if field_name in _INT_FIELDS:
                m = re.match(r"\d+", value)
                job[field_name] = int(m.group(0)) if m else None
            else:
                job[field_name] = _clean(value)
        hosts: list[str] = []
        if job.get("nodelist"):
            hosts = expand_nodelist(str(job.pop("nodelist")))
        elif job.get("nodefile"):
            text = _read(root, str(job["nodefile"])) or ""
            hosts = [h.strip() for h in text.splitlines() if h.strip()]
        elif job.get("hosts"):
            hosts = str(job.pop("hosts")).split()
        job.pop("nodefile", None)
        job.pop("hosts", None)
        unique = list(dict.fromkeys(hosts))
        if unique:
            job.setdefault("nodes", len(unique))
            if not anonymous:
                job["hosts"] = unique
        if "memory_mb" in job:
            mb = job.pop("memory_mb")
            job["memory_bytes"] = None if mb is None else mb * 2**20
        if anonymous:
            job.pop("submit_dir", None)
        return job
    return None


# -- host ------------------------------------------------------------------------------------------


def host(root: Path, *, anonymous: bool = False, gpus: bool = True) -> dict[str, Any]:
    """Host name, OS, kernel, CPU model, cores, memory and GPUs of the machine.

    OS from ``/etc/os-release``; kernel from ``/proc/sys/kernel/osrelease`` (else ``uname``);
    CPU model and memory from ``/proc/cpuinfo`` and ``/proc/meminfo``; GPUs from NVML
    (``pynvml``) or ``nvidia-smi`` when present.
    """
    osr = _kv_file(_read(root, "/etc/os-release", 64_000) or "")
    kernel = (_read(root, "/proc/sys/kernel/osrelease", 4096) or "").strip() or platform.release()
    cpu = None
    for line in (_read(root, "/proc/cpuinfo", 1 << 20) or "").splitlines():
        k, sep, v = line.partition(":")
        if sep and k.strip() in ("model name", "Model", "cpu model", "Processor"):
            cpu = v.strip()
            break
    memory = None
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", _read(root, "/proc/meminfo", 64_000) or "", re.M)
    if m:
        memory = int(m.group(1)) * 1024
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {
        "hostname": None if anonymous else socket.gethostname(),
        "os": osr.get("PRETTY_NAME") or platform.system(),
        "os_id": osr.get("ID"),
        "os_version": osr.get("VERSION_ID"),
        "kernel": kernel,
        "machine": platform.machine(),
        "cpu_model": cpu or platform.processor() or None,
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "memory_bytes": memory,
        "gpus": list_gpus() if gpus else [],
    }


def list_gpus(run: Callable[..., Any] = subprocess.run) -> list[dict[str, Any]]:
    """GPUs through NVML (``pynvml``/``nvidia-ml-py``) or ``nvidia-smi``; ``[]`` without them."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        try:
            out = []
            driver = pynvml.nvmlSystemGetDriverVersion()
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(h)
                out.append(
                    {
                        "index": i,
                        "name": name.decode() if isinstance(name, bytes) else str(name),
                        "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                        "driver": driver.decode() if isinstance(driver, bytes) else str(driver),
                        "uuid": str(pynvml.nvmlDeviceGetUUID(h)),
                    }
                )
            return out
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        res = run(
            [
                exe,
                "--query-gpu=index,name,memory.total,driver_version,uuid",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    out = []
    for line in (res.stdout or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5 or not parts[0].isdigit():
            continue
        mib = parts[2]
        out.append(
            {
                "index": int(parts[0]),
                "name": parts[1],
                "memory_bytes": int(mib) * 2**20 if mib.isdigit() else None,
                "driver": parts[3],
                "uuid": parts[4],
            }
        )
    return out


# -- client script, notebook, git -------------------------------------------------------------------


def sha256_file(path: Path, limit: int = 1 << 30) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            n = 0
            while chunk := f.read(1 << 20):
                n += len(chunk)
                if n > limit:
                    return None
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def client_script(environ: Mapping[str, str], main: Any = None) -> dict | None:
    """The script this process runs (``__main__.__file__``) and its SHA-256, or the notebook
    (Jupyter's ``$JPY_SESSION_NAME``, VS Code's ``__vsc_ipynb_file__``) and the cell count."""
    main = sys.modules.get("__main__") if main is None else main
    vsc = getattr(main, "__vsc_ipynb_file__", None)
    notebook = vsc or environ.get("JPY_SESSION_NAME")
    shell = None
    try:
        get_ipython = getattr(main, "get_ipython", None)
        shell = get_ipython() if callable(get_ipython) else None
    except Exception:
        shell = None
    if notebook or shell is not None:
        cell = getattr(shell, "execution_count", None)
        path = Path(notebook) if notebook else None
        return {
            "kind": "notebook" if notebook else "interactive",
            "path": None if path is None else str(path),
            "sha256": None if path is None else sha256_file(path),
            "cell": cell if isinstance(cell, int) else None,
        }
    file = getattr(main, "__file__", None)
    if not file:
        return None
    path = Path(file).absolute()
    if not path.is_file():
        return None
    return {"kind": "script", "path": str(path), "sha256": sha256_file(path), "cell": None}


def git_state(path: Path, *, timeout: float = 10.0) -> dict | None:
    """Repository root, commit, branch and dirty flag of the git work tree holding ``path``.

    Commit and branch are read from ``.git`` itself; ``dirty`` (tracked files changed) asks
    ``git status`` when git is installed (None otherwise). The remote URL is kept without any
    credentials it may hold.
    """
    start = path if path.is_dir() else path.parent
    top = None
    for d in [start, *start.parents]:
        if (d / ".git").exists():
            top = d
            break
    if top is None:
        return None
    gitdir = top / ".git"
    if gitdir.is_file():  # a worktree or submodule: "gitdir: <path>"
        text = (_read(Path("/"), str(gitdir)) or "").strip()
        if not text.startswith("gitdir:"):
            return None
        gitdir = (top / text[7:].strip()).resolve()
    head = (_read(Path("/"), str(gitdir / "HEAD"), 4096) or "").strip()
    branch = commit = None
    if head.startswith("ref:"):
        ref = head[4:].strip()
        branch = ref.removeprefix("refs/heads/")
        common = gitdir
        cd = _read(Path("/"), str(gitdir / "commondir"), 4096)
        if cd:
            common = (gitdir / cd.strip()).resolve()
        for base in (gitdir, common):
            value = _read(Path("/"), str(base / ref), 4096)
            if value:
                commit = value.strip()
                break
        if commit is None:
            packed = _read(Path("/"), str(common / "packed-refs")) or ""
            for line in packed.splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    commit = parts[0]
    elif re.fullmatch(r"[0-9a-f]{40,64}", head):
        commit = head
    dirty = None
    exe = shutil.which("git")
    if exe:
        try:
            res = subprocess.run(
                [exe, "-C", str(top), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                env={
                    "PATH": os.environ.get("PATH", ""),
                    "GIT_OPTIONAL_LOCKS": "0",
                    "HOME": os.environ.get("HOME", "/"),
                },
            )
            if res.returncode == 0:
                dirty = bool(res.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    return {"root": str(top), "commit": commit, "branch": branch, "dirty": dirty}


# -- one process -----------------------------------------------------------------------------------


def _anonymise(obj: Any, home: str | None, user: str | None) -> Any:
    if isinstance(obj, dict):
        return {k: _anonymise(v, home, user) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_anonymise(v, home, user) for v in obj]
    if isinstance(obj, str):
        if home and len(home) > 1 and (obj == home or obj.startswith(home.rstrip("/") + "/")):
            obj = "~" + obj[len(home.rstrip("/")) :]
        if user and len(user) > 2:
            obj = re.sub(rf"(?<![A-Za-z0-9]){re.escape(user)}(?![A-Za-z0-9])", "<user>", obj)
    return obj


def collect(
    role: str,
    *,
    root: str | os.PathLike[str] = "/",
    environ: Mapping[str, str] | None = None,
    anonymous: bool = False,
    script: bool | None = None,
    process: dict[str, Any] | None = None,
    gpus: bool = True,
) -> dict[str, Any]:
    """The environment record of this process (see ``docs/capture.md``, *Environment*).

    Args:
        role: ``client``, ``scheduler`` or ``worker``.
        root: where the runtimes' files are read (``/``; a temporary tree in tests).
        environ: the variables read (``os.environ``); only named ones are ever looked at.
        anonymous: leave out host names and user names.
        script: record the ``__main__`` script (or notebook) and its git state (default: for
            a client).
        process: facts the caller knows (pid, address, name).
        gpus: look for GPUs.

    Returns:
        A JSON-safe dict; ``errors`` lists the parts that could not be read.
    """
    env = os.environ if environ is None else environ
    base = Path(root)
    errors: list[str] = []

    def part(name: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # a fact we cannot read is reported, never raised into Dask
            errors.append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
            return None

    py = interpreter()
    record: dict[str, Any] = {
        "layout": ENV_LAYOUT,
        "role": role,
        "recorded": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
        "process": {"pid": os.getpid(), **(process or {})},
        "python": py,
        "packages": part("packages", distributions) or [],
        "venv": part("venv", lambda: virtualenv(env, py["prefix"], py["base_prefix"], base)),
        "conda": part("conda", lambda: conda(env, py["prefix"], base)),
        "container": part("container", lambda: container(env, base)),
        "job": part("job", lambda: batch_job(env, base, anonymous=anonymous)),
        "host": part("host", lambda: host(base, anonymous=anonymous, gpus=gpus)),
        "script": None,
        "git": None,
        "anonymous": bool(anonymous),
        "errors": errors,
    }
    if script if script is not None else role == "client":
        s = part("script", lambda: client_script(env))
        record["script"] = s
        if s and s.get("path"):
            g = part("git", lambda: git_state(Path(s["path"])))
            record["git"] = g
    if anonymous:
        home = env.get("HOME") or os.path.expanduser("~")
        user = env.get("USER") or env.get("LOGNAME")
        if not user:
            try:
                import getpass

                user = getpass.getuser()
            except Exception:
                user = None
        record = _anonymise(record, home, user)
        if _has_host(record["process"]):
            record["process"].pop("address", None)
    # every string, wherever it came from (a git branch, a path, a package location), passes
    # the secret filter; what was withheld is named (never shown) in ``errors``
    record, withheld = scrub(record)
    record["errors"] = [
        *(record["errors"] or []),
        *(f"{w}: withheld (looks like a secret)" for w in withheld),
    ]
    return record


def _has_host(process: dict[str, Any]) -> bool:
    addr = str(process.get("address") or "")
    return bool(re.match(r"^[a-z]+://[A-Za-z]", addr))  # a host name, not an IP address


def file_name(role: str) -> str:
    """``<role>-<pid>-<token>.json``: unique per process (a pid can be reused)."""
    return f"{role}-{os.getpid()}-{secrets.token_hex(4)}.json"


def write_record(run_dir: Path, record: dict[str, Any], name: str | None = None) -> Path:
    """Write one process's record under ``<run_dir>/environment/`` (atomically)."""
    out = Path(run_dir) / ENV_DIR
    out.mkdir(parents=True, exist_ok=True)
    path = out / (name or file_name(str(record.get("role", "process"))))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, sort_keys=True, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)
    return path


class Background:
    """Collect and write a process's environment on a daemon thread: off the start-up and task
    paths (listing the installed distributions takes tens of milliseconds)."""

    def __init__(self, run_dir: Path, role: str, **kwargs: Any) -> None:
        self.path: Path | None = None
        self.error: str | None = None
        self._thread = threading.Thread(
            target=self._run,
            args=(run_dir, role, kwargs),
            name="metaprov-environment",
            daemon=True,
        )
        self._thread.start()

    def _run(self, run_dir: Path, role: str, kwargs: dict[str, Any]) -> None:
        try:
            self.path = write_record(run_dir, collect(role, **kwargs))
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def join(self, timeout: float = 30.0) -> None:
        self._thread.join(timeout)
