"""Namespaces and instance IRIs: the only place metaprov mints IRIs.

Input: vocabulary names (checked against ``ontology/metaprov.ttl`` by a test) and columns of
record values (keys, addresses, ids). Output: IRI strings, one at a time or as pyarrow string
arrays built without per-row Python.

Instance IRIs live under a configurable base and are scoped by run::

    <base>/run/<run-id>                          the run (mp:Run)
    <base>/run/<run-id>/graph                    the named graph holding the run (N-Quads, TriG)
    <base>/run/<run-id>/task/<key>               a task (mp:Task)
    <base>/run/<run-id>/task/<key>/execution/<n> its n-th execution (mp:TaskExecution)
    <base>/run/<run-id>/task/<key>/chunk         its result (mp:DataChunk)
    <base>/run/<run-id>/worker/<address>/thread/<id>   a thread, and so on (see docs/model.md)

Every free-text segment (keys, addresses, names) is percent-encoded exactly like
``urllib.parse.quote(value, safe='')``, so ``/`` in a key never becomes a path segment and any
Dask key (tuples, spaces, quotes, unicode) yields a valid IRI.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from metaprov.records import RunRecords

# ---------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------

VOCAB = "https://w3id.org/metaprov/ns#"
ONTOLOGY_IRI = "https://w3id.org/metaprov/ns"
ONTOLOGY_VERSION = "0.1.0"
ONTOLOGY_VERSION_IRI = f"{ONTOLOGY_IRI}/{ONTOLOGY_VERSION}"
DEFAULT_BASE = "https://w3id.org/metaprov/id"

PROV_NS = "http://www.w3.org/ns/prov#"
RDF_NS = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
RDFS_NS = "http://www.w3.org/2000/01/rdf-schema#"
XSD_NS = "http://www.w3.org/2001/XMLSchema#"
OWL_NS = "http://www.w3.org/2002/07/owl#"

#: Prefixes used by Turtle, TriG and JSON-LD output (vocabulary only; instances stay full IRIs).
PREFIXES: dict[str, str] = {
    "mp": VOCAB,
    "prov": PROV_NS,
    "rdf": RDF_NS,
    "rdfs": RDFS_NS,
    "xsd": XSD_NS,
}

#: Every class, property and individual of ontology/metaprov.ttl (a test keeps them equal).
MP_TERMS: frozenset[str] = frozenset(
    """
    level step category stepNumber Level Category Step
    JobCategory WorkflowSystemCategory SystemCategory
    JobLevel ConfigurationLevel ClientLevel SchedulerLevel WorkerLevel WorkerProcessLevel
    ThreadLevel CoroutineLevel
    ClusterLaunchStep GraphSubmissionStep SchedulingStep ExecutionStep SystemRecordStep
    Job Run User Node RunFile JobOutput LogFile
    Configuration DaskConfiguration DarshanConfiguration ServiceConfiguration JobScript NodeList
    Client Scheduler Worker WorkerProcess Thread
    TaskGraph TaskPrefix TaskGroup Task TaskExecution
    DataChunk ChunkReplica Transfer Transition
    File FileVersion IOUsage IOGeneration
    run partOfJob node task taskGroup taskPrefix inGraph dependsOn source destination
    observedBy execution file usedReplica inputTransferCount inputTransferSeconds inputTransferBytes
    prefix partOfRun process fileScope fileSystem candidateWorker unmatchedReason
    runId runName missingInput liveState liveUpdated liveLag software exporter jobId jobProperty userName hostname role
    fileName fileKind sha256 byteSize content
    address clientId workerName nannyAddress nthreads memoryLimit localDirectory addedAt removedAt
    pid threadId taskCount busyExecutionCount busySeconds
    executionCount totalDuration meanDuration minDuration maxDuration slowestExecution
    fileReadCount fileWriteCount
    graphIndex wantedCount edgeCount name key state wanted erred retried neverRan
    attempt outcome incomplete timeSource duration startEpoch endEpoch epoch nbytes
    transferId totalBytes compressedBytes bandwidth keyCount loggedBy
    fromState toState stimulusId observer sourceLine
    path bytesRead bytesWritten readCount writeCount firstTime lastTime
    Process ProcessActivity IOActivity IOSegment DarshanRecord DarshanCounter
    darshanRecord counter aggregatedBy processRole darshanLog commandLine clockOffset module rank
    counterName counterValue minOffset endOffset ioTime linkStatus linkRule linkReason linkClock linkOffset
    linkOffsetUncertainty linkCandidates operation
    offset length callingThread
    recordLost lost lossReason lostTaskCount lostWorkerCount unrecordedExecutionCount
    """.split()
)

#: Task facts (function, arguments, result, exception, call site): metaprov.mapping.facts.
FACT_TERMS: frozenset[str] = frozenset(
    """
    Function Argument FusedOperation CallSite
    implementation fusedOperation operationInput
    functionModule qualifiedName callableKind operationCount position
    exceptionType exceptionMessage traceback valueType valueSize valueStatus argumentPosition
    sourceFile lineNumber notebookCell cellSource sourceSha256
    """.split()
)
MP_TERMS = MP_TERMS | FACT_TERMS

#: What produced a run (environments, packages, containers, hosts, scripts): mapping.environment.
ENV_TERMS: frozenset[str] = frozenset(
    """
    SoftwareEnvironment SoftwarePackage ContainerImage ClientScript
    environment package containerImage script
    packageName packageVersion packageManager environmentId packageCount pythonVersion
    pythonExecutable virtualEnvironment condaEnvironment condaPrefix spackEnvironment
    containerRuntime imageReference containerId
    operatingSystem kernelRelease cpuModel cpuCount memoryBytes gpuModel
    scriptPath scriptKind scriptSha256 gitRepository gitCommit gitBranch gitDirty
    """.split()
)
MP_TERMS = MP_TERMS | ENV_TERMS

#: Batch jobs with their queue facts (dask-jobqueue: a job per worker): mapping.job.
JOB_TERMS: frozenset[str] = frozenset(
    "jobName partition jobState submittedAt queueWait usedJob jobScript".split()
)
MP_TERMS = MP_TERMS | JOB_TERMS
#: Where the workers' time went (Dask's fine performance metrics) and their memory over time:
#: metaprov.mapping.activity.
ACTIVITY_TERMS: frozenset[str] = frozenset(
    """
    ActivityShare MemorySample
    measuredOn sharePrefix
    metricContext activityName metricUnit metricValue measurementCount prefixName spanName spanId
    processBytes managedBytes unmanagedBytes unmanagedOldBytes spilledBytes workerStatus paused
    """.split()
)
MP_TERMS = MP_TERMS | ACTIVITY_TERMS

PROV_TERMS: frozenset[str] = frozenset(
    """
    Activity Entity Agent SoftwareAgent Person Plan Location Association Usage Generation
    InstantaneousEvent
    used wasGeneratedBy wasAssociatedWith actedOnBehalfOf wasAttributedTo wasDerivedFrom
    wasInformedBy wasStartedBy wasEndedBy specializationOf atLocation wasRevisionOf generated
    qualifiedAssociation qualifiedUsage qualifiedGeneration agent entity activity hadPlan
    Delegation qualifiedDelegation hadActivity
    startedAtTime endedAtTime atTime generatedAtTime invalidatedAtTime value
    """.split()
)


class Namespace:
    """Attribute access to the IRIs of a vocabulary; unknown names raise (typos fail early)."""

    def __init__(self, iri: str, names: Iterable[str] | None = None) -> None:
        self._iri = iri
        self._names = None if names is None else frozenset(names)

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)
        if self._names is not None and name not in self._names:
            raise AttributeError(f"{name!r} is not a term of <{self._iri}>")
        return self._iri + name

    def __getitem__(self, name: str) -> str:
        return self.__getattr__(name)

    def __str__(self) -> str:
        return self._iri


MP = Namespace(VOCAB, MP_TERMS)
PROV = Namespace(PROV_NS, PROV_TERMS)
RDF = Namespace(RDF_NS, ["type", "Property"])
RDFS = Namespace(RDFS_NS, ["label", "comment", "subClassOf", "subPropertyOf", "isDefinedBy"])
XSD = Namespace(
    XSD_NS,
    [
        "string",
        "integer",
        "long",
        "double",
        "boolean",
        "dateTime",
        "unsignedLong",
        "decimal",
        "anyURI",
    ],
)

#: PROV classes asserted on instances besides their metaprov class (decision 22), each with the
#: PROV classes it implies in PROV-O (asserted too: ``?x a prov:Agent`` needs no reasoner).
PROV_BASE: dict[str, tuple[str, ...]] = {
    PROV_NS + "Entity": (),
    PROV_NS + "Activity": (),
    PROV_NS + "Agent": (),
    PROV_NS + "Plan": (PROV_NS + "Entity",),
    PROV_NS + "SoftwareAgent": (PROV_NS + "Agent",),
    PROV_NS + "Person": (PROV_NS + "Agent",),
    PROV_NS + "Location": (),
    PROV_NS + "Usage": (),
    PROV_NS + "Generation": (),
    PROV_NS + "Association": (),
    PROV_NS + "Delegation": (),
    PROV_NS + "InstantaneousEvent": (),
}


def base_types(cls: str) -> tuple[str, ...]:
    """The PROV classes an instance of the metaprov class ``cls`` is also typed with (sorted).

    Read once from ``ontology/metaprov.ttl`` (the ``rdfs:subClassOf`` closure of ``cls``, kept to
    :data:`PROV_BASE` and what those imply), so a class added to the ontology is covered too.
    Empty for classes outside the vocabulary and for PROV classes themselves.
    """
    return _base_types().get(cls, ())


_BASE_CACHE: dict[str, tuple[str, ...]] = {}


def _base_types() -> dict[str, tuple[str, ...]]:
    if _BASE_CACHE:
        return _BASE_CACHE
    from importlib import resources

    import pyoxigraph as ox

    text = resources.files("metaprov").joinpath("ontology").joinpath("metaprov.ttl").read_bytes()
    sub = RDFS_NS + "subClassOf"
    parents: dict[str, set[str]] = {}
    for t in ox.parse(text, format=ox.RdfFormat.TURTLE):
        if t.predicate.value == sub and isinstance(t.object, ox.NamedNode):
            parents.setdefault(t.subject.value, set()).add(t.object.value)
    for cls in parents:
        if not cls.startswith(VOCAB):
            continue
        seen: set[str] = set()
        todo = [cls]
        while todo:
            for p in parents.get(todo.pop(), ()):
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        found = {p for p in seen if p in PROV_BASE}
        found |= {q for p in found for q in PROV_BASE[p]}
        _BASE_CACHE[cls] = tuple(sorted(found))
    _BASE_CACHE.setdefault("", ())
    return _BASE_CACHE


#: Run-file kinds (``records.configs.kind``) -> class. Unknown kinds become mp:RunFile.
FILE_KIND_CLASS: dict[str, str] = {
    "dask": MP.DaskConfiguration,
    "darshan": MP.DarshanConfiguration,
    "darshan-config": MP.DarshanConfiguration,
    "mofka-bedrock": MP.ServiceConfiguration,
    "service": MP.ServiceConfiguration,
    "job-script": MP.JobScript,
    "node-list": MP.NodeList,
    "nodes": MP.NodeList,
    "job-output": MP.JobOutput,
    "log": MP.LogFile,
}

# ---------------------------------------------------------------------------------------------
# Vectorised percent-encoding
# ---------------------------------------------------------------------------------------------

# urllib.parse.quote(safe='') leaves exactly these bytes unencoded (RFC 3986 unreserved).
_UNRESERVED = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~"
_SAFE = np.zeros(256, dtype=bool)
_SAFE[np.frombuffer(_UNRESERVED, dtype=np.uint8)] = True
_SURROGATE = re.compile("[\ud800-\udfff]")
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


def as_text_array(values: Any) -> pa.Array:
    """Any column of text (pandas, numpy, list, pyarrow) as a pyarrow ``large_string`` array.

    Values that are not valid UTF-8 (lone surrogates from a broken decode) get U+FFFD, so every
    output is valid UTF-8; nulls stay null.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values if values.type == pa.large_string() else pc.cast(values, pa.large_string())
    if isinstance(values, pd.Series):
        try:
            # Fast path: Arrow-backed or plain string columns convert without Python objects.
            arr = pa.Array.from_pandas(values)
            if isinstance(arr, pa.ChunkedArray):
                arr = arr.combine_chunks()
            if pa.types.is_dictionary(arr.type):
                arr = arr.cast(arr.type.value_type)
            if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
                return pc.cast(arr, pa.large_string())
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError):
            pass
        values = values.to_numpy(dtype=object, na_value=None)
    try:
        return pa.array(values, type=pa.large_string(), from_pandas=True)
    except (pa.ArrowInvalid, UnicodeEncodeError):
        # Rare path (a lone surrogate somewhere): repair per value, only here.
        fixed = [
            None
            if v is None or (isinstance(v, float) and np.isnan(v))
            else _SURROGATE.sub("\ufffd", str(v))
            for v in values
        ]
        return pa.array(fixed, type=pa.large_string())


def _view(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets starting at 0, uint8 data) of a large_string array, honouring its slice offset."""
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = (
        np.frombuffer(bufs[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
        if bufs[2] is not None and len(arr)
        else np.zeros(0, dtype=np.uint8)
    )
    return offsets - offsets[0], data


#: Bytes of text encoded per pass: the per-byte index arrays (8 bytes each) stay ~100 MB.
QUOTE_CHUNK_BYTES = 1_000_000


def quote_array(values: Any) -> pa.Array:
    """Percent-encode every value like ``urllib.parse.quote(v, safe='')``, vectorised.

    Works on the UTF-8 bytes of the column: unreserved bytes are copied, every other byte becomes
    ``%XX`` (upper-case hex). Nulls stay null. Long columns are encoded in slices of about
    :data:`QUOTE_CHUNK_BYTES` bytes, so memory stays bounded whatever the column size.

    Args:
        values: a column of text (pandas Series, numpy array, list or pyarrow array).

    Returns:
        A pyarrow ``large_string`` array of the encoded values.
    """
    arr = as_text_array(values)
    n = len(arr)
    if n == 0:
        return pa.array([], type=pa.large_string())
    offsets, _ = _view(arr)
    total = int(offsets[-1])
    if total <= QUOTE_CHUNK_BYTES:
        return _quote_slice(arr)
    # Row boundaries that split the bytes into slices of about QUOTE_CHUNK_BYTES.
    cuts = np.searchsorted(
        offsets, np.arange(QUOTE_CHUNK_BYTES, total, QUOTE_CHUNK_BYTES), side="left"
    )
    bounds = np.unique(np.concatenate(([0], cuts, [n])))
    parts = [
        _quote_slice(arr.slice(int(a), int(b - a)))
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        if b > a
    ]
    return pa.concat_arrays(parts)


def _quote_slice(arr: pa.Array) -> pa.Array:
    # Each unsafe byte becomes three (``%XX``): the bytes are repeated by their width, then the
    # unsafe ones (few: a tuple key's brackets, quotes, comma, space) overwritten; positions come
    # from the unsafe bytes' indexes alone (no running sum over every byte).
    n = len(arr)
    offsets, data = _view(arr)
    unsafe = ~_SAFE[data]
    u = np.flatnonzero(unsafe)
    if not len(u):
        return arr
    out = np.repeat(data, unsafe.astype(np.uint8) * 2 + 1)
    del unsafe
    p = u + 2 * np.arange(len(u))
    b = data[u]
    out[p] = ord("%")
    out[p + 1] = _HEX[b >> 4]
    out[p + 2] = _HEX[b & 15]
    new_offsets = offsets + 2 * np.searchsorted(u, offsets, side="left")
    validity = None
    if arr.null_count:
        # A fresh bitmap at offset 0 (the input may be a slice).
        validity = pc.is_valid(arr).buffers()[1]
    return pa.Array.from_buffers(
        pa.large_string(),
        n,
        [validity, pa.py_buffer(new_offsets.astype(np.int64)), pa.py_buffer(out)],
        null_count=arr.null_count,
    )


def quote(value: str) -> str:
    """One value percent-encoded (same result as :func:`quote_array`)."""
    return str(quote_array([value])[0].as_py())


def concat(*parts: Any) -> pa.Array:
    """Element-wise concatenation of string arrays and ``str`` constants (null in, null out)."""
    cols: list[Any] = []
    for p in parts:
        if isinstance(p, pa.ChunkedArray):
            p = p.combine_chunks()
        if isinstance(p, pa.Array):
            cols.append(p if p.type == pa.large_string() else pc.cast(p, pa.large_string()))
        else:
            cols.append(pa.scalar(str(p), pa.large_string()))
    return pc.binary_join_element_wise(*cols, pa.scalar("", pa.large_string()))


def _ints(values: Any) -> pa.Array:
    """Integer ids as decimal text (exact for uint64 thread ids)."""
    if isinstance(values, pd.Series):
        values = pa.Array.from_pandas(values)
    elif not isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = pa.array(values)
    return pc.cast(values, pa.large_string())


# ---------------------------------------------------------------------------------------------
# Instance IRIs
# ---------------------------------------------------------------------------------------------


class RunIris:
    """Mints the instance IRIs of one run (scalars as ``str``, columns as pyarrow arrays).

    Args:
        base: base IRI for instances (no trailing slash needed), e.g. ``https://example.org/prov``.
        run_id: the run's identifier (see :func:`run_id_of`); percent-encoded here.
    """

    def __init__(self, base: str, run_id: str) -> None:
        self.base = base.rstrip("/")
        self.run_id = run_id
        self.run = f"{self.base}/run/{quote(run_id)}"
        self.graph = f"{self.run}/graph"
        self.scheduler = f"{self.run}/scheduler"
        self.user_local = f"{self.run}/user"
        self.job_local = f"{self.run}/job"

    # --- scalars ---------------------------------------------------------------------------
    def job(self, job_id: str | None) -> str:
        """The batch job: global (``<base>/job/<id>``) when its id is known, else run-scoped."""
        return f"{self.base}/job/{quote(job_id)}" if job_id else self.job_local

    def user(self, name: str | None) -> str:
        """The person: run-scoped (an account name is not unique across machines)."""
        return f"{self.run}/user/{quote(name)}" if name else self.user_local

    # --- columns ---------------------------------------------------------------------------
    def _seg(self, kind: str, values: Any, encode: bool = True) -> pa.Array:
        vals = quote_array(values) if encode else _ints(values)
        return concat(f"{self.run}/{kind}/", vals)

    def tasks(self, keys: Any) -> pa.Array:
        """``<run>/task/<key>`` for each key."""
        return self._seg("task", keys)

    def executions(self, task_iris: pa.Array, attempts: Any) -> pa.Array:
        """``<task>/execution/<attempt>`` from task IRIs (see :meth:`tasks`)."""
        return concat(task_iris, "/execution/", _ints(attempts))

    def associations(self, execution_iris: pa.Array) -> pa.Array:
        """``<execution>/association``: the qualified association of an execution."""
        return concat(execution_iris, "/association")

    def chunks(self, task_iris: pa.Array) -> pa.Array:
        """``<task>/chunk``: the data chunk holding a task's result."""
        return concat(task_iris, "/chunk")

    def workers(self, addresses: Any) -> pa.Array:
        """``<run>/worker/<address>``."""
        return self._seg("worker", addresses)

    def processes(self, worker_iris: pa.Array) -> pa.Array:
        """``<worker>/process``: the worker's operating-system process."""
        return concat(worker_iris, "/process")

    def threads(self, worker_iris: pa.Array, thread_ids: Any) -> pa.Array:
        """``<worker>/thread/<thread id>``."""
        return concat(worker_iris, "/thread/", _ints(thread_ids))

    def clients(self, client_ids: Any) -> pa.Array:
        """``<run>/client/<client id>``."""
        return self._seg("client", client_ids)

    def nodes(self, hostnames: Any) -> pa.Array:
        """``<run>/node/<hostname>``."""
        return self._seg("node", hostnames)

    def task_graphs(self, indices: Any) -> pa.Array:
        """``<run>/taskgraph/<index>``."""
        return self._seg("taskgraph", indices, encode=False)

    def prefixes(self, names: Any) -> pa.Array:
        """``<run>/prefix/<name>``."""
        return self._seg("prefix", names)

    def groups(self, names: Any) -> pa.Array:
        """``<run>/group/<name>``."""
        return self._seg("group", names)

    def transfers(self, ids: Any) -> pa.Array:
        """``<run>/transfer/<id>``."""
        return self._seg("transfer", ids, encode=False)

    def replicas(self, transfer_iris: pa.Array, keys: Any) -> pa.Array:
        """``<transfer>/replica/<key>``: the copy of a key made by a transfer."""
        return concat(transfer_iris, "/replica/", quote_array(keys))

    def transitions(self, observers: Any, lines: Any) -> pa.Array:
        """``<run>/transition/<observer>/<line>`` (line in the observer's transition file)."""
        return concat(f"{self.run}/transition/", quote_array(observers), "/", _ints(lines))

    def run_files(self, names: Any) -> pa.Array:
        """``<run>/input/<file name>``: files of the run directory (configurations, logs)."""
        return self._seg("input", names)

    def files(self, paths: Any) -> pa.Array:
        """``<run>/file/<path>``: a file on a shared file system, touched by I/O (decision 16)."""
        return self._seg("file", paths)

    def node_files(self, node_iris: pa.Array, paths: Any) -> pa.Array:
        """``<run>/node/<host>/file/<path>``: a file on a node's own file system."""
        return concat(node_iris, "/file/", quote_array(paths))

    def process_files(self, process_iris: pa.Array, paths: Any) -> pa.Array:
        """``<process>/file/<path>``: a per-process file (``<STDERR>``, ...), or a node-local
        file of a process whose host Darshan did not record."""
        return concat(process_iris, "/file/", quote_array(paths))

    def file_versions(self, file_iris: pa.Array, versions: Any) -> pa.Array:
        """``<file>/version/<n>``."""
        return concat(file_iris, "/version/", _ints(versions))

    # --- Darshan file I/O (metaprov/mapping/fileio.py) ---------------------------------------
    def os_processes(self, log_names: Any) -> pa.Array:
        """``<run>/process/<log file name>``: a traced process not mapped to a worker.

        A worker's own process is ``<worker>/process`` (:meth:`processes`), the same agent the
        agents step describes; any other process (nanny, launcher, ...) is named by its Darshan
        log, which is unique in a run and holds the pid.
        """
        return self._seg("process", log_names)

    def process_activities(self, process_iris: pa.Array) -> pa.Array:
        """``<process>/activity``: the activity a process's I/O outside tasks belongs to."""
        return concat(process_iris, "/activity")

    def io_qualifiers(self, activity_iris: pa.Array, kinds: Any, paths: Any) -> pa.Array:
        """``<activity>/<kind>/<path>``: a qualified usage (``kind`` read, read-ambiguous, ...)."""
        # Paths repeat over activities: encode each distinct path once.
        enc = pc.dictionary_encode(as_text_array(paths))
        quoted = quote_array(enc.dictionary).take(enc.indices)
        return concat(activity_iris, "/", as_text_array(kinds), "/", quoted)

    def generations(self, version_iris: pa.Array) -> pa.Array:
        """``<file version or task graph>/generation``: its qualified generation."""
        return concat(version_iris, "/generation")

    def io_segments(self, aggregate_iris: pa.Array, ordinals: Any) -> pa.Array:
        """``<usage or generation>/segment/<n>``: one traced call (``--io-detail segments``)."""
        return concat(aggregate_iris, "/segment/", _ints(ordinals))

    def process_counters(self, process_iris: pa.Array, names: Any) -> pa.Array:
        """``<process>/counter/<counter name>``: a Darshan counter summed over a process's files."""
        return concat(process_iris, "/counter/", quote_array(names))

    def darshan_records(
        self, process_iris: pa.Array, modules: Any, ranks: Any, record_ids: Any
    ) -> pa.Array:
        """``<process>/darshan/<module>/<rank>/<record id>``: a Darshan counter record."""
        return concat(
            process_iris,
            "/darshan/",
            quote_array(modules),
            "/",
            _ints(ranks),
            "/",
            _ints(record_ids),
        )

    def darshan_counters(self, record_iris: pa.Array, names: Any) -> pa.Array:
        """``<record>/<counter name>``: one counter of a Darshan record."""
        return concat(record_iris, "/", quote_array(names))

    def io_records(self, kind: str, ids: Any) -> pa.Array:
        """``<run>/<kind>/<id>`` for qualified I/O usages/generations (``kind`` e.g. 'io-usage')."""
        return self._seg(quote(kind), ids, encode=False)


class FactIris:
    """IRIs of the task facts (see :mod:`metaprov.mapping.facts`), beside :class:`RunIris`."""

    def __init__(self, iris: RunIris) -> None:
        self.run = iris.run

    def functions(self, kinds: Any, modules: Any, qualnames: Any) -> pa.Array:
        """``<run>/function/<kind>/<module>/<qualname>``: a callable tasks ran."""
        return concat(
            f"{self.run}/function/",
            quote_array(kinds),
            "/",
            quote_array(modules),
            "/",
            quote_array(qualnames),
        )

    def arguments(self, task_iris: pa.Array, positions: Any) -> pa.Array:
        """``<task>/argument/<position>``: a literal argument of a task."""
        return concat(task_iris, "/argument/", quote_array(positions))

    def operations(self, group_iris: pa.Array, positions: Any) -> pa.Array:
        """``<group>/operation/<n>``: the n-th operation fused into the tasks of a group."""
        return concat(group_iris, "/operation/", _ints(positions))

    def generations(self, graph_iris: pa.Array) -> pa.Array:
        """``<taskgraph>/generation``: the submission of a task graph by its client."""
        return concat(graph_iris, "/generation")

    def call_sites(self, graph_iris: pa.Array) -> pa.Array:
        """``<taskgraph>/call-site``: where in the client code the graph was submitted."""
        return concat(graph_iris, "/call-site")


def run_id_of(records: RunRecords) -> str:
    """The run's content-derived id: ``records.run_id`` when set, else derived here.

    Derived from the scheduler address, the first event time, the client ids and the table sizes,
    hashed to 16 hex digits: the same input gives the same id wherever the directory lives.
    """
    if records.run_id:
        return str(records.run_id)
    from metaprov.timeutil import format_utc

    first, _ = records.span
    parts = [
        str(records.scheduler.get("address", "")),
        format_utc(first) or "",
        ",".join(sorted(str(c) for c in records.clients["client"].dropna().unique())),
        ",".join(
            f"{name}={len(getattr(records, name))}"
            for name in (
                "tasks",
                "executions",
                "transitions",
                "transfers",
                "dependencies",
                "graphs",
                "workers",
            )
        ),
    ]
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:16]
