"""The ``metaprov`` command line: options in, one library call, output out.

Errors are translated in one place (:func:`main`): ``Error: ...`` on stderr and the error's exit
code; a traceback only for bugs, or with ``--debug``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from metaprov._version import __version__, docs_url
from metaprov.errors import MetaprovError, terminal_safe


class Context:
    """Options shared by every command."""

    def __init__(self, quiet: bool, debug: bool, verbose: int) -> None:
        self.quiet = quiet
        self.debug = debug
        self.verbose = verbose


def progress_enabled(ctx: click.Context) -> bool:
    """Progress bars show unless ``--quiet`` was given or stderr is not a terminal."""
    obj = ctx.find_object(Context)
    return not (obj and obj.quiet) and sys.stderr.isatty()


class _Group(click.Group):
    """Translates metaprov errors into ``Error: ...`` and the error's exit code, in one place."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MetaprovError as exc:
            obj = ctx.find_object(Context)
            if obj is not None and obj.debug:
                raise
            click.echo(f"Error: {terminal_safe(str(exc))}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)


@click.group(
    cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(__version__, prog_name="metaprov")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars and no informational messages.")
@click.option("-v", "--verbose", count=True, help="More log messages (-vv for debug logging).")
@click.option("--debug", is_flag=True, help="Show a full traceback on errors.")
@click.pass_context
def cli(ctx: click.Context, quiet: bool, verbose: int, debug: bool) -> None:
    """metaprov turns the records of a Dask run into W3C PROV provenance.

    \b
    A run directory holds the Mofka-Dask CSV files (scheduler_transition.csv,
    worker_transition.csv, worker_transfer.csv, graph.csv, worker.csv, client.csv),
    optional Darshan logs and the batch job's files.

    \b
    Example:
      metaprov inspect RUN_DIR

    Documentation: https://metaprov.github.io/metaprov/
    """
    level = logging.WARNING
    if quiet:
        level = logging.ERROR
    elif verbose == 1:
        level = logging.INFO
    elif verbose >= 2:
        level = logging.DEBUG
    root = logging.getLogger()
    before = list(root.handlers)
    logging.basicConfig(level=level, format="%(levelname)s: %(message)s", stream=sys.stderr)
    # The handler itself filters too: records that other libraries' loggers pass up to it
    # (distributed logs INFO lines on its own loggers' levels) are held back as metaprov's are.
    for handler in root.handlers:
        if handler not in before:
            handler.setLevel(level)
            # messages name files of runs, crates, stores: their names may hold escapes
            handler.setFormatter(_SafeFormatter("%(levelname)s: %(message)s"))
            _OWN_HANDLERS.append(handler)
    logging.getLogger("metaprov").setLevel(level)
    ctx.obj = Context(quiet=quiet, debug=debug, verbose=verbose)


class _SafeFormatter(logging.Formatter):
    """Log lines with control characters escaped (:func:`~metaprov.errors.terminal_safe`)."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal_safe(super().format(record))


#: The stderr handler(s) this process's CLI installed (``-q`` after a command raises their level).
_OWN_HANDLERS: list[logging.Handler] = []


def _quiet_here(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    """``--quiet`` after a command name means what ``metaprov --quiet`` means."""
    if value:
        obj = ctx.find_object(Context)
        if obj is not None:
            obj.quiet = True
        logging.getLogger("metaprov").setLevel(logging.ERROR)
        for handler in _OWN_HANDLERS:
            handler.setLevel(logging.ERROR)
    return value


#: Every command also takes ``-q/--quiet`` after its name (``metaprov export RUN -o x.ttl -q``).
quiet_option = click.option(
    "-q",
    "--quiet",
    is_flag=True,
    expose_value=False,
    callback=_quiet_here,
    help="No progress bars and no informational messages (as metaprov -q).",
)


def _set_endpoint_timeout(ctx: click.Context, _param: click.Parameter, value: float | None) -> None:
    if value is None:
        return
    if not value > 0 or value == float("inf"):
        raise click.BadParameter("give a positive number of seconds")
    from metaprov.store.http import TIMEOUT_OVERRIDE

    token = TIMEOUT_OVERRIDE.set(value)
    ctx.call_on_close(lambda: TIMEOUT_OVERRIDE.reset(token))


timeout_option = click.option(
    "--timeout",
    type=float,
    default=None,
    metavar="SECONDS",
    expose_value=False,
    callback=_set_endpoint_timeout,
    help="With --endpoint: the longest one request to the server may take, whatever it does "
    "[default: $METAPROV_ENDPOINT_TIMEOUT or 600]. With an embedded store: the longest a query "
    "may run [default: no limit].",
)


#: ``--force`` of every command that writes an output: the one overwrite rule (docs/reliability.md).
FORCE_HELP = (
    "Replace an existing output (else refused). Never lets an output be, hold or sit inside an "
    "input or store of the command."
)
force_option = click.option("--force", is_flag=True, help=FORCE_HELP)


#: ``-f table|csv|json`` of the commands that print an answer (query, runs).
answer_format_option = click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def _summary_out(ctx: click.Context, result: Any, as_json: bool) -> None:
    """What a command wrote: ``result.to_dict()`` as JSON on stdout with ``--json``, else
    ``result.summary()`` on stderr unless ``--quiet``."""
    if as_json:
        _echo_json(result.to_dict())
        return
    obj = ctx.find_object(Context)
    if not (obj and obj.quiet):
        click.echo(result.summary(), err=True)


class _NotReported(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "metaprov_reported", False)


@contextlib.contextmanager
def _reported_here() -> Any:
    """Hold back the log messages a command reports itself (``inspect``: every finding is in
    its summary), so each is printed once."""
    handlers = list(logging.getLogger().handlers)
    flt = _NotReported()
    for h in handlers:
        h.addFilter(flt)
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(flt)


@cli.command("inspect")
@quiet_option
@click.argument("run", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (for scripts).")
@click.option("--no-darshan", is_flag=True, help="Do not read Darshan logs.")
@click.pass_context
def inspect_cmd(ctx: click.Context, run: Path, as_json: bool, no_darshan: bool) -> None:
    """Summarise a run: tasks, workers, threads, transfers, I/O, missing files, row accounting.

    To see the run (task stream, durations, transfers, I/O, task graph) rather than read it:
    metaprov report RUN -o report.html.

    \b
    Example:
      metaprov inspect examples/run --json > summary.json
    """
    from metaprov.analysis.summary import format_summary, summarize
    from metaprov.ingest import read_run
    from metaprov.live.partial import readable

    # a run being written (a capture mid-run, Mofka-Dask writers): its whole rows only
    with readable(run) as rd, _reported_here():
        records = read_run(rd.path, darshan=not no_darshan, progress=progress_enabled(ctx))
        if rd.in_progress:
            records.path = str(run)
    summary = summarize(records)
    if rd.in_progress:
        summary["run"].update(
            in_progress=True, in_progress_note=rd.note(), rows_being_written=rd.cut
        )
    if as_json:
        _echo_json(summary)
    else:
        click.echo(terminal_safe(format_summary(summary)))
        click.echo(f"see it     metaprov report {run} -o report.html  (an HTML page of the run)")


# --- further commands are registered below this line (one block per command) ---


# --- report (issue 14) ---
@cli.command("report")
@quiet_option
@click.argument("runs", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="HTML file to write (written atomically).",
)
@click.option("--title", default=None, help="Page title [default: the run, or 'N runs compared'].")
@click.option("--no-darshan", is_flag=True, help="Do not read Darshan logs.")
@click.option(
    "--store",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Compare the runs of this embedded store (instead of RUNS).",
)
@click.option(
    "--endpoint",
    metavar="URL",
    default=None,
    help="Compare the runs of this SPARQL query endpoint (instead of RUNS).",
)
@timeout_option
@click.option(
    "--run",
    "run_ids",
    multiple=True,
    metavar="ID",
    help="With --store/--endpoint or a campaign: only this run (id or name); repeatable.",
)
@force_option
@click.pass_context
def report_cmd(
    ctx: click.Context,
    runs: tuple[Path, ...],
    output: Path,
    title: str | None,
    no_darshan: bool,
    store: Path | None,
    endpoint: str | None,
    run_ids: tuple[str, ...],
    force: bool,
) -> None:
    """Write a self-contained HTML report of RUNS: one run, or several runs compared.

    Summary, task stream (one lane per worker thread, transfers and Darshan I/O on
    the same time axis) with worker occupancy, durations per prefix, the transfer
    matrix, I/O per file and prefix, the task graphs with the critical path.
    With --store or --endpoint, or a campaign export (the OUTDIR or manifest.json
    of 'metaprov export') as RUNS: a comparison page of the runs it holds (spans,
    task counts, the same prefix across runs). Everything is inside the file (it
    opens offline). Needs the report extra: pip install 'metaprov[report]'.

    \b
    Example:
      metaprov report examples/run -o report.html
      metaprov report runs/R1 runs/R2 runs/R3 -o compare.html
      metaprov report --store prov-store -o campaign.html
      metaprov report campaign-out/manifest.json -o campaign.html
    """
    from metaprov.errors import UsageError
    from metaprov.report import is_campaign, write_report, write_store_report

    if store is not None or endpoint is not None:
        if runs:
            raise UsageError(
                "give either RUNS or --store/--endpoint, not both",
                hint="load the runs into the store first (metaprov load RUN --store DIR)",
            )
        result = write_store_report(
            output,
            store=store,
            endpoint=endpoint,
            runs=list(run_ids) or None,
            title=title,
            progress=progress_enabled(ctx),
            overwrite=force,
        )
    elif not runs:
        raise UsageError(
            "no run to report on",
            hint="give run directories, a campaign export, or --store DIR / --endpoint URL",
        )
    elif run_ids and all(is_campaign(r) for r in runs):
        result = write_store_report(
            output,
            campaigns=list(runs),
            runs=list(run_ids),
            title=title,
            progress=progress_enabled(ctx),
            overwrite=force,
        )
    elif run_ids:
        raise UsageError("--run selects runs of a store or campaign", hint="give RUNS instead")
    else:
        result = write_report(
            list(runs),
            output,
            darshan=not no_darshan,
            title=title,
            progress=progress_enabled(ctx),
            overwrite=force,
        )
    obj = ctx.find_object(Context)
    if not (obj and obj.quiet):
        click.echo(result.summary(), err=True)


# --- compare (issue 27) ---
@cli.command("compare")
@quiet_option
@click.argument("runs", nargs=-1, required=True)
@click.option(
    "--baseline",
    default=None,
    metavar="RUN|median",
    help="The run the others are compared with: 'median' (the run of median makespan), a run's "
    "directory name or id, or its 0-based number [default: the first run].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON (for scripts).")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also write an offline HTML page of the comparison (needs the report extra), or, for a "
    "name ending in .trace.json, the runs on one time axis in the Trace Event Format "
    "(Perfetto, chrome://tracing, speedscope).",
)
@click.option(
    "--store",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="RUNS are run ids (or names) in this embedded store.",
)
@click.option(
    "--endpoint", metavar="URL", default=None, help="RUNS are run ids in this SPARQL endpoint."
)
@timeout_option
@click.option("--no-darshan", is_flag=True, help="Do not read Darshan logs.")
@click.option("--rows", default=12, show_default=True, help="Cause rows shown in the text answer.")
@force_option
@click.pass_context
def compare_cmd(
    ctx: click.Context,
    runs: tuple[str, ...],
    baseline: str | None,
    as_json: bool,
    output: Path | None,
    store: Path | None,
    endpoint: str | None,
    no_darshan: bool,
    rows: int,
    force: bool,
) -> None:
    """Why was one run slower? Compare RUNS of one workflow and explain the difference.

    The first run is the baseline (or --baseline). Tasks are matched by key, else by
    prefix and tuple index, else by prefix; the difference in makespan is cut into
    named causes (compute, parallelism, waiting, transfers, serialisation, spill,
    scheduler, lost-workers, io, retries, worker, startup, tail, unexplained) whose
    seconds add up to it exactly, each with its noise and evidence. With more than two runs: one row per run against the
    baseline, outliers flagged. RUNS are run directories, or run ids with --store
    or --endpoint. See https://metaprov.github.io/metaprov/compare/

    \b
    Example:
      metaprov compare runs/R3 runs/R7
      metaprov compare runs/R3 runs/R7 --json > why.json
      metaprov compare runs/R* --baseline median -o campaign.html
      metaprov compare runs/R3 runs/R7 -o r3-r7.trace.json
      metaprov compare --store prov-store 9f2c41d07a3e5b68 a5ff956e623079dc
    """
    from metaprov.compare import compare
    from metaprov.errors import UsageError

    if store is not None and endpoint is not None:
        raise UsageError("give --store or --endpoint, not both")
    # the page never replaces a compared run's file (nor sits in a run or the store): checked
    # before the runs are read
    inputs = [] if store is not None or endpoint is not None else [Path(r) for r in runs]
    stores = [store] if store is not None else []
    if output is not None:
        from metaprov.write.output import check_output

        check_output(output, inputs=inputs, stores=stores, overwrite=force)
    result = compare(
        list(runs),
        baseline=baseline,
        store=store,
        endpoint=endpoint,
        darshan=not no_darshan,
        progress=progress_enabled(ctx),
    )
    if output is not None and output.name.lower().endswith((".trace.json", ".trace")):
        from metaprov.compare import write_trace

        if store is not None or endpoint is not None:
            raise UsageError(
                "a comparison trace is drawn from run directories",
                hint="give the runs' directories, without --store/--endpoint",
            )
        written = write_trace(list(runs), output, darshan=not no_darshan, overwrite=force)
        obj = ctx.find_object(Context)
        if not (obj and obj.quiet):
            click.echo(f"wrote {written}", err=True)
    elif output is not None:
        from metaprov.compare.page import write_page

        written = write_page(result, output, inputs=inputs, stores=stores, overwrite=force)
        obj = ctx.find_object(Context)
        if not (obj and obj.quiet):
            click.echo(f"wrote {written}", err=True)
    if as_json:
        _echo_json(result.to_dict())
    else:
        click.echo(result.text(limit=rows))


# --- load and query (issue 4) ---
_STORE_HELP = "Embedded store directory [default: $METAPROV_STORE or ./metaprov-store]."
_ENDPOINT_HELP = (
    "SPARQL query endpoint of a server instead of the embedded store [default: $METAPROV_ENDPOINT]."
    " Credentials: $METAPROV_ENDPOINT_USER/$METAPROV_ENDPOINT_PASSWORD, $METAPROV_ENDPOINT_TOKEN or ~/.netrc."
)
_GSP_HELP = "The server's Graph Store endpoint [default: $METAPROV_GSP or derived from --endpoint]."


@cli.command("load")
@quiet_option
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--store", type=click.Path(path_type=Path, file_okay=False), default=None, help=_STORE_HELP
)
@click.option("--endpoint", metavar="URL", default=None, help=_ENDPOINT_HELP)
@timeout_option
@click.option("--gsp", metavar="URL", default=None, help=_GSP_HELP)
@click.option(
    "--base",
    default=None,
    metavar="IRI",
    help="Base IRI of the runs' instances [default: https://w3id.org/metaprov/id].",
)
@click.option(
    "--detail",
    type=click.Choice(["tasks", "transitions"]),
    default="tasks",
    show_default=True,
    help="'transitions' also loads every state transition.",
)
@click.option("--no-darshan", is_flag=True, help="Do not read Darshan logs.")
@click.option(
    "--force",
    is_flag=True,
    help="Replace a run's graph even when the same files were loaded before, unchanged.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the load reports as JSON.")
@click.pass_context
def load_cmd(
    ctx: click.Context,
    runs: tuple[Path, ...],
    store: Path | None,
    endpoint: str | None,
    gsp: str | None,
    base: str | None,
    detail: str,
    no_darshan: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Load RUNS (run directories or RDF export files) into a triple store, one named graph each.

    Loading a run again replaces its graph (a run whose files did not change is
    recognised and kept, see --force). The default store is an embedded
    Oxigraph directory (no server); --endpoint loads into any SPARQL 1.1 server
    through the Graph Store HTTP Protocol.

    \b
    Example:
      metaprov load runs/D2024-04-19_* --store prov-store
      metaprov load run.nq --endpoint http://127.0.0.1:7878/query
    """
    from metaprov.store import LoadInterrupted, load

    try:
        reports = load(
            list(runs),
            store=store,
            endpoint=endpoint,
            gsp=gsp,
            base=base,
            detail=detail,
            darshan=not no_darshan,
            force=force,
            progress=progress_enabled(ctx),
        )
    except LoadInterrupted as stop:
        _say_interrupted_load(stop)
        raise
    if as_json:
        _echo_json([r.to_dict() for r in reports])
        return
    obj = ctx.find_object(Context)
    if obj and obj.quiet:
        return  # the loads' lines are informational: errors still say what failed
    for r in reports:
        click.echo(_load_line(r))


def _load_line(r: Any) -> str:
    verb = "unchanged" if r.unchanged else "replaced" if r.replaced else "loaded"
    return f"{verb} {r.source}: {r.triples:,} triples in <{r.graph}> ({r.seconds:.1f} s)"


def _shown(text: str) -> str:
    """A name as printed on a terminal: as it is when printable, else its repr (no escapes)."""
    return text if text.isprintable() else repr(text)


def _say_interrupted_load(stop: Any) -> None:
    """On stderr, whatever ``--quiet`` says: which runs a stopped load committed, and which not."""
    for r in stop.reports:
        click.echo(f"committed: {_load_line(r)}", err=True)
    if not stop.reports:
        click.echo("committed: nothing", err=True)
    if stop.interrupted:
        click.echo(
            f"not committed: {_shown(stop.interrupted)} (stopped while loading; its graph may "
            "be incomplete: load it again)",
            err=True,
        )
    for name in stop.not_started:
        click.echo(f"not loaded: {_shown(name)}", err=True)


def _complete_question(_ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of QUESTION: the packaged questions' names, then .rq files."""
    from click.shell_completion import CompletionItem

    from metaprov.queries import questions

    names = [
        CompletionItem(q.name, help=q.title) for q in questions() if q.name.startswith(incomplete)
    ]
    return names or [CompletionItem(incomplete, type="file")]


@cli.command("query")
@quiet_option
@click.argument("question", required=False, shell_complete=_complete_question)
@click.argument("runs", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "-p",
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="A parameter value (repeatable).",
)
@click.option(
    "--store", type=click.Path(path_type=Path, file_okay=False), default=None, help=_STORE_HELP
)
@click.option("--endpoint", metavar="URL", default=None, help=_ENDPOINT_HELP)
@timeout_option
@click.option(
    "--file",
    "files",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Query export file(s) instead of a store (loaded in memory; repeatable).",
)
@answer_format_option
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write the answer to this file (atomically; .gz: compressed) instead of stdout.",
)
@click.option(
    "--allow-service",
    is_flag=True,
    help="Let the query call other SPARQL services (SERVICE <URL>); refused otherwise.",
)
@force_option
@click.option(
    "--list",
    "list_questions",
    is_flag=True,
    help="List the packaged questions and their parameters.",
)
@click.option(
    "--no-cache",
    is_flag=True,
    help="With RUNS: read the runs again instead of what an earlier question kept of them.",
)
@click.option(
    "--engine",
    type=click.Choice(["auto", "store", "direct"]),
    default="auto",
    show_default=True,
    help="With RUNS: 'store' answers in an in-memory store holding what the question needs "
    "(the reference); 'direct' with the question's direct form; 'auto' the direct form when "
    "there is one.",
)
@click.pass_context
def query_cmd(
    ctx: click.Context,
    question: str | None,
    runs: tuple[Path, ...],
    params: tuple[str, ...],
    store: Path | None,
    endpoint: str | None,
    files: tuple[Path, ...],
    fmt: str,
    output: Path | None,
    allow_service: bool,
    force: bool,
    list_questions: bool,
    no_cache: bool,
    engine: str,
) -> None:
    """Answer QUESTION: a packaged question's name, a .rq file, or SPARQL text.

    Asked of a store (--store, --endpoint), of export files (--file), or straight of
    RUNS (run directories, no store: the same answer as a store holding them; what was
    read is kept for the next question on the same runs). Parameters are bound as RDF
    terms (never pasted into the query text).

    \b
    Example:
      metaprov query --list
      metaprov query critical-path runs/R1
      metaprov query slowest-tasks --param prefix=save_file --store prov-store
      metaprov query lineage --param "key=list-8606d556-c6f4-465b-933b-4f2338e69364" -f json
      metaprov query my-question.rq --file run.nq -f csv
    """
    from metaprov.errors import UsageError
    from metaprov.queries import format_list, format_result, query

    if list_questions:
        click.echo(format_list("json" if fmt == "json" else "text"))
        return
    if not question:
        raise UsageError(
            "no question given", hint="name one (see metaprov query --list), or give a .rq file"
        )
    values: dict[str, str] = {}
    for item in params:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(
                f"--param {item!r} is not NAME=VALUE", hint="e.g. --param prefix=save_file"
            )
        values[name.strip()] = value
    if runs and (store is not None or endpoint is not None or files):
        raise UsageError(
            "give run directories or a store, endpoint or export files, not both",
            hint="metaprov query QUESTION RUN_DIR... answers without a store",
        )
    # the answer never replaces a run or file queried, the .rq file, or a file of the store
    inputs = [*runs, *files, *([Path(question)] if _is_file(question) else [])]
    stores = _query_stores(store, endpoint, files)
    if output is not None:
        from metaprov.write.output import check_output

        check_output(output, inputs=inputs, stores=stores, overwrite=force)  # before the query

    def emit(result: Any) -> None:
        text = format_result(result, fmt)
        if fmt != "table" and not isinstance(result, bool):
            for note in result.attrs.get("notes", []):
                click.echo(f"note: {note}", err=True)
        if output is not None:
            from metaprov.write.output import open_output

            with open_output(
                output, inputs=inputs, stores=stores, overwrite=force, background=False
            ) as out:
                out.write((text if text.endswith("\n") else text + "\n").encode("utf-8"))
        else:
            click.echo(text.rstrip("\n"))

    if runs:
        from metaprov.queries.fromruns import query_runs

        # the answer is printed as soon as it is made; the runs read are kept after it
        query_runs(
            question,
            list(runs),
            values,
            cache=not no_cache,
            engine=engine,
            progress=progress_enabled(ctx),
            on_answer=emit,
        )
    else:
        emit(
            query(
                question,
                values,
                store=store,
                endpoint=endpoint,
                file=list(files) or None,
                allow_service=allow_service,
            )
        )


def _is_file(text: str) -> bool:
    """Does ``text`` name an existing file (SPARQL text given inline never raises here)?"""
    import os

    try:
        return os.path.isfile(text)
    except (OSError, ValueError):
        return False


def _query_stores(store: Path | None, endpoint: str | None, files: tuple[Path, ...]) -> list[Path]:
    """The embedded store a query reads (given, or the default one), if any."""
    if endpoint is not None or files:
        return []
    if store is not None:
        return [store]
    import os

    from metaprov.store import DEFAULT_STORE, ENV_ENDPOINT, ENV_STORE

    if os.environ.get(ENV_ENDPOINT):
        return []
    return [Path(os.environ.get(ENV_STORE) or DEFAULT_STORE)]


# --- capture (issue 5) ---
@cli.command(
    "capture", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@quiet_option
@click.argument("script", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="Run directory to write (a second cluster of the script writes OUTPUT-2, ...).",
)
@click.option(
    "--force",
    "--overwrite",
    "overwrite",
    is_flag=True,
    help="Replace an earlier capture in OUTPUT (--overwrite: the same).",
)
@click.option(
    "--anonymous",
    is_flag=True,
    help="Leave host names and user names out of the records (environment/, metaprov-run.json, "
    "workers_info.csv).",
)
@click.pass_context
def capture_cmd(
    ctx: click.Context,
    script: Path,
    script_args: tuple[str, ...],
    output: Path,
    overwrite: bool,
    anonymous: bool,
) -> None:
    """Run SCRIPT with metaprov's capture on every Dask cluster it starts.

    The script runs unchanged; each LocalCluster/scheduler and worker it starts is
    recorded into OUTPUT (Mofka-Dask CSV schema plus pid/host/thread/config files, and
    what each process ran in: packages, venv/conda, container, batch job, host, the script
    and its git commit). Everything after SCRIPT is passed to the script, untouched.

    \b
    Example:
      metaprov capture -o runs/my-run my_pipeline.py --input data/ --chunks 100
      metaprov capture --anonymous -o runs/shared-run my_pipeline.py
    """
    from metaprov.errors import MetaprovError, ScriptFailed, require

    require("distributed", extra="capture", feature="metaprov capture")
    from metaprov.capture.script import run_script

    result = run_script(script, output, args=script_args, overwrite=overwrite, anonymous=anonymous)
    obj = ctx.find_object(Context)
    if not (obj and obj.quiet):
        for d, meta in zip(result.directories, result.summaries, strict=True):
            rows = sum(meta.get("files", {}).values())
            click.echo(f"{d}: {rows:,} rows in {len(meta.get('files', {}))} files", err=True)
    if result.returncode != 0:
        raise ScriptFailed(
            f"{script} exited with code {result.returncode}"
            + (f"; what ran is recorded in {result.directory}" if result.directories else ""),
            returncode=result.returncode,
            hint="fix the script's error (its traceback is above); metaprov exits with its code",
        )
    if not result.directories:
        raise MetaprovError(
            f"{script} started no Dask scheduler, so nothing was recorded",
            hint="the script must start its own cluster (e.g. LocalCluster()); for a running "
            f"cluster use 'dask scheduler --preload metaprov.capture' ({docs_url('capture')})",
        )


# --- export (issue 3) ---
def _format_help() -> str:
    from metaprov.write import FORMATS

    names = ", ".join(f.name + (f" ({'/'.join(f.aliases)})" if f.aliases else "") for f in FORMATS)
    return (
        f"Output format: {names}. Default: from the file suffix (.trace.json: trace, for "
        "Perfetto, chrome://tracing and speedscope)."
    )


@cli.command("export")
@quiet_option
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    required=True,
    help="File to write: written atomically; '-' streams to stdout (give -f); a name ending in "
    ".gz is gzip-compressed; a pipe or device is written through. For a campaign: the output "
    "directory.",
)
@click.option("-f", "--format", "fmt", default=None, metavar="FORMAT", help=_format_help())
@click.option(
    "--base",
    default=None,
    metavar="IRI",
    help="Base IRI of the run's instances [default: https://w3id.org/metaprov/id].",
)
@click.option(
    "--detail",
    type=click.Choice(["tasks", "transitions"]),
    default="tasks",
    show_default=True,
    help="'transitions' also exports every state transition.",
)
@click.option(
    "--io-detail",
    type=click.Choice(["aggregate", "segments"]),
    default="aggregate",
    show_default=True,
    help="Darshan I/O per task/process, file and operation; 'segments' also every traced call.",
)
@click.option("--no-darshan", is_flag=True, help="Do not read Darshan logs.")
@click.option(
    "--force",
    is_flag=True,
    help="Replace an existing OUTPUT file (else refused; never an input's). (PROV-N, PROV-JSON "
    "and PROV-XML had a size limit that --force lifted: they stream now, with none.)",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout (for scripts)."
)
@click.option(
    "--scheduler",
    metavar="ADDRESS",
    default=None,
    help="Campaign: run on this Dask scheduler (tcp://host:8786; dask-jobqueue or any cluster).",
)
@click.option(
    "--local-workers",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Campaign: a LocalCluster of N workers [default: sized to the cores and memory].",
)
@click.option(
    "--backend",
    type=click.Choice(["in-process", "local", "scheduler"]),
    default=None,
    help="Campaign: where to run [default: chosen by size and hardware; the choice is printed].",
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="Campaign: split each run into N partitions of its keys (a run too large for one worker).",
)
@click.pass_context
def export_cmd(
    ctx: click.Context,
    runs: tuple[Path, ...],
    output: Path,
    fmt: str | None,
    base: str | None,
    detail: str,
    io_detail: str,
    no_darshan: bool,
    force: bool,
    as_json: bool,
    scheduler: str | None,
    local_workers: int | None,
    backend: str | None,
    partitions: int,
) -> None:
    """Export RUN as W3C PROV (Turtle, N-Triples, N-Quads, TriG, JSON-LD, RDF/XML, PROV-N/JSON/XML).

    Every format streams and handles runs of millions of tasks (provn, provjson and
    provxml in two passes). '-f trace' (or a name ending in .trace.json) writes the
    run's timeline instead, in the Trace Event Format: open it in ui.perfetto.dev,
    chrome://tracing or speedscope (a process per worker, a track per thread, a slice
    per execution, transfers as flows, Darshan I/O, the run's phases).

    Several runs, or a directory holding run directories, make a campaign: each
    run becomes its own N-Quads shard (its own named graph) in the directory
    OUTPUT, with a manifest.json; runs are converted in parallel on Dask (the
    backend chosen, and why, is printed). A run that fails does not stop the
    others (exit code 10); running the same command again skips the shards whose
    inputs did not change. See https://metaprov.github.io/metaprov/scaling/

    \b
    Example:
      metaprov export examples/run -o run.ttl
      metaprov export examples/run -o run.nq --base https://example.org/prov --detail transitions
      metaprov export runs/R1 -o r1.ttl --io-detail segments
      metaprov export examples/run -f nt -o - | gzip > run.nt.gz
      metaprov export examples/run -o run.nq.gz
      metaprov export examples/run -o run.provn
      metaprov export examples/run -o run.trace.json
      metaprov export campaign/ -o shards/ -f nq --local-workers 4
      metaprov export huge-run/ -o out/ -f nq --partitions 8 --scheduler tcp://10.0.0.1:8786
    """
    from metaprov.export import export
    from metaprov.export.campaign import is_campaign
    from metaprov.mapping.terms import DEFAULT_BASE

    obj = ctx.find_object(Context)
    quiet = bool(obj and obj.quiet)
    if is_campaign(runs, output, scheduler, local_workers, backend, partitions):
        from metaprov.export.campaign import export_campaign

        result = export_campaign(
            list(runs),
            output,
            format=fmt,
            base=base,
            detail=detail,
            io_detail=io_detail,
            darshan=not no_darshan,
            backend=backend,
            scheduler=scheduler,
            local_workers=local_workers,
            partitions=partitions,
            progress=progress_enabled(ctx),
            announce=None if quiet else (lambda line: click.echo(line, err=True)),
        )
        if as_json:
            _echo_json(result.manifest)
        elif not quiet:
            click.echo(result.summary(), err=True)
        return
    run = runs[0]
    result = export(
        run,
        output,
        format=fmt,
        base=base or DEFAULT_BASE,
        detail=detail,
        io_detail=io_detail,
        darshan=not no_darshan,
        force=force,
        progress=progress_enabled(ctx),
        overwrite=force,
    )
    _summary_out(ctx, result, as_json)


# --- validate (issue 3) ---
@cli.command("validate")
@quiet_option
@click.argument("source", type=click.Path(path_type=Path))
@click.option(
    "-f",
    "--format",
    "fmt",
    default=None,
    metavar="FORMAT",
    help="Format of SOURCE when its suffix does not tell.",
)
@click.option(
    "--engine",
    type=click.Choice(["auto", "shacl", "sparql", "columnar"]),
    default="auto",
    show_default=True,
    help="pyshacl, columnar joins over the triples (any size, the cheapest) or SPARQL "
    "queries in Oxigraph (any size, the reference); auto: columnar (chosen by measured cost).",
)
@click.option(
    "--twin",
    type=click.Path(path_type=Path),
    default=None,
    metavar="RDF_OR_RUN",
    help="For a PROV-N/JSON/XML SOURCE: the RDF export (or run directory, exported with the "
    "default options) it must state the same relations as. Default: an RDF export beside "
    "SOURCE with the same stem (run.ttl for run.provn), if any.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def validate_cmd(
    ctx: click.Context,
    source: Path,
    fmt: str | None,
    engine: str,
    twin: Path | None,
    as_json: bool,
) -> None:
    """Check an export FILE (or a RUN directory, exported in memory) against the shipped SHACL shapes.

    The ontology's class hierarchy is applied first (RDFS inference). Also checks the W3C
    PROV-CONSTRAINTS that apply across nodes (generation precedes usage, unique generation,
    start precedes end, entities are not activities, times in UTC, ...). Prints a report
    naming each rule and example nodes, and which engine ran and why; exits with code 5 when
    anything is violated. A progress bar shows on a terminal (-q hides it).

    By default the columnar engine runs the checks as table joins over the triples, read
    straight from N-Triples/N-Quads (other syntaxes are converted first; .gz is decompressed):
    an export of 10^6 tasks (35 M triples) in about a minute on 2 cores, within 2.7 GB.

    \b
    A PROV-N/JSON/XML file is parsed back through prov, checked with the PROV sanity rules and
    compared relation by relation with its RDF twin (--twin, or run.ttl beside run.provn).

    \b
    Example:
      metaprov validate run.ttl
      metaprov validate big.nt --engine columnar
      metaprov validate run.provn --twin run.ttl
    """
    from metaprov.errors import ValidationError
    from metaprov.validate import validate

    report = validate(source, format=fmt, engine=engine, progress=progress_enabled(ctx), twin=twin)
    if as_json:
        _echo_json(report.to_dict())
    else:
        click.echo(report.text())
    if not report.conforms:
        raise ValidationError(
            f"{source} does not conform: {len(report.violations)} violation(s)",
            report=report.text(),
            hint="see the report above",
        )


# --- records, serve, drop, runs (issue 17) ---
@cli.command("records")
@quiet_option
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="Directory to create (new or empty); written beside and renamed into place at the end.",
)
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(["parquet", "csv"]),
    default="parquet",
    show_default=True,
    help="parquet keeps every dtype exactly; csv has ISO 8601 times and shortest floats.",
)
@click.option("--no-darshan", is_flag=True, help="Do not read Darshan logs.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@force_option
@click.pass_context
def records_cmd(
    ctx: click.Context,
    runs: tuple[Path, ...],
    output: Path,
    fmt: str,
    no_darshan: bool,
    as_json: bool,
    force: bool,
) -> None:
    """Write the consolidated record tables of RUNS for pandas, polars, DuckDB.

    The tables and their columns: https://metaprov.github.io/metaprov/records/

    One run: OUTPUT/<table>.parquet per table (tasks, executions, transitions,
    transfers, ..., darshan_links) and OUTPUT/run.json (job, software, missing
    inputs, row accounting). Several runs, or a folder of runs: one dataset per
    table partitioned by run, OUTPUT/<table>/run_id=<id>/part-0.parquet, and
    OUTPUT/runs.json.

    \b
    Example:
      metaprov records examples/run -o example-records
      metaprov records runs/PMDA -o pmda-records      # a folder of runs
      python -c "import pandas as pd; print(pd.read_parquet('pmda-records/tasks'))"
    """
    from metaprov.export.records import write_records

    result = write_records(
        list(runs),
        output,
        format=fmt,
        darshan=not no_darshan,
        progress=progress_enabled(ctx),
        overwrite=force,
    )
    _summary_out(ctx, result, as_json)


@cli.command("serve")
@quiet_option
@click.argument("runs", nargs=-1, type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--store",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help=_STORE_HELP,
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (127.0.0.1: this machine only).",
)
@click.option(
    "--port",
    type=int,
    default=7878,
    show_default=True,
    help="TCP port (0: any free port).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds a query may run; a longer one is refused (HTTP 503) while the server goes on "
    "answering others (0: no limit).",
)
@click.option("--cors", is_flag=True, help="Allow cross-origin requests (a web page elsewhere).")
@click.option(
    "--follow",
    "follow_run",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    metavar="RUN_DIR",
    help="Also follow RUN_DIR while it is written (see metaprov follow): this process owns "
    "the store, updates the run's graph at every interval and answers queries meanwhile.",
)
@click.option(
    "--interval",
    type=float,
    default=2.0,
    show_default=True,
    help="With --follow: seconds between refreshes.",
)
@click.option(
    "--quiet-period",
    "quiet_period",
    type=float,
    default=120.0,
    show_default=True,
    help="With --follow: a run without a completion signal is complete after this many "
    "seconds without change (0: never).",
)
@click.pass_context
def serve_cmd(
    ctx: click.Context,
    runs: tuple[Path, ...],
    store: Path | None,
    host: str,
    port: int,
    timeout: float | None,
    cors: bool,
    follow_run: Path | None,
    interval: float,
    quiet_period: float,
) -> None:
    """Browse a store, or RUNS: a read-only SPARQL server with its query page.

    Runs until Ctrl-C. Prints the query page's URL (open it in a web browser) and
    the SPARQL endpoint for metaprov query --endpoint, Jupyter (SPARQLWrapper,
    rdflib), YASGUI or any SPARQL client. The default graph is the union of all
    runs. Needs the 'oxigraph' command: pip install 'metaprov[serve]'. Stop the
    server before loading into the store.

    \b
    With --follow RUN_DIR the store is served by this process itself (a
    read-only SPARQL endpoint at /query and a query page at /) while it follows
    the run into it: queries answer from the last refresh, during the run and
    after it (https://metaprov.github.io/metaprov/live/). While a store is served, metaprov load and drop
    refuse to write it, naming the server.

    \b
    With RUNS (finished run directories) the packaged questions are answered
    at once, straight from the runs (/questions/NAME, as metaprov query NAME
    RUNS), while the runs load into a store in the background (--store, kept;
    else a temporary folder, removed on exit); SPARQL at /query is answered
    once the load has finished (until then: 503, with its progress at /status).

    \b
    Example:
      metaprov serve --store example-store
      metaprov serve --store prov-store --port 0      # any free port
      metaprov serve --store live-store --follow runs/now --port 0
      metaprov serve examples/run --port 0            # questions now, SPARQL once loaded
      curl 'http://127.0.0.1:7878/questions/failures?format=csv'
    """
    import os
    import signal

    from metaprov.store import DEFAULT_STORE, ENV_STORE
    from metaprov.store.serve import client_hints, serve

    if runs:
        from metaprov.errors import UsageError

        if follow_run is not None or cors:
            raise UsageError(
                "--follow and --cors are not for RUNS",
                hint="serve finished runs (metaprov serve RUN_DIR...), or follow one being "
                "written (metaprov serve --follow RUN_DIR)",
            )
        _serve_runs(ctx, list(runs), store, host, port, timeout)
        return
    path = store if store is not None else Path(os.environ.get(ENV_STORE) or DEFAULT_STORE)
    if follow_run is not None:
        _serve_follow(ctx, follow_run, path, host, port, interval, quiet_period, timeout=timeout)
        return
    server = serve(path, host=host, port=port, timeout=timeout or None, cors=cors)
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(
            f"warning: listening on {host}: anyone who reaches this address can read the store "
            "(the server has no authentication; an SSH tunnel to 127.0.0.1 is safer)",
            err=True,
        )
    click.echo(f"Serving {path} read-only at {server.url}/ (Ctrl-C stops it)")
    for line in client_hints(server):
        click.echo(f"  {line}")
    sys.stdout.flush()

    def _stop(*_: Any) -> None:
        raise KeyboardInterrupt  # SIGTERM stops the server as Ctrl-C does

    signal.signal(signal.SIGTERM, _stop)
    try:
        code = server.process.wait()
    except KeyboardInterrupt:
        server.stop()
        click.echo("stopped", err=True)
        return
    if code not in (0, -signal.SIGTERM):
        from metaprov.errors import StoreError

        raise StoreError(f"Oxigraph's server ended with exit code {code}")


def _stop_on_signals() -> Any:
    """An event set by SIGTERM or SIGINT (Ctrl-C): the servers stop when it is set."""
    import signal
    import threading

    stop = threading.Event()

    def _stop(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return stop


def _serve_runs(
    ctx: click.Context,
    runs: list[Path],
    store: Path | None,
    host: str,
    port: int,
    timeout: float | None,
) -> None:

    from metaprov.live.runserve import serve_runs

    stop = _stop_on_signals()
    talk = not (ctx.obj and ctx.obj.quiet)
    where = store if store is not None else "a temporary store (removed on exit)"
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(
            f"warning: listening on {host}: anyone who reaches this address can read the runs "
            "(the server has no authentication; an SSH tunnel to 127.0.0.1 is safer)",
            err=True,
        )

    def listening(server: Any) -> None:
        click.echo(f"Serving {len(runs)} run(s) at {server.url}/ (Ctrl-C stops it)")
        click.echo(f"  questions, now:   {server.url}/questions/NAME?format=csv")
        click.echo(f"  SPARQL endpoint:  {server.query_url} (once {where} has loaded)")
        click.echo(f"  load progress:    {server.url}/status")
        sys.stdout.flush()

    def loaded(report: Any) -> None:
        if talk:
            click.echo(_load_line(report), err=True)

    def complete(status: Any) -> None:
        if status.state == "loaded":
            click.echo(f"{status.describe()}: SPARQL answered at /query")
        else:
            click.echo(status.describe(), err=True)
        sys.stdout.flush()

    serve_runs(
        runs,
        store,
        host=host,
        port=port,
        timeout=timeout,
        on_listen=listening,
        on_loaded=loaded,
        on_complete=complete,
        stop=stop,
    )
    click.echo("stopped", err=True)


def _serve_follow(
    ctx: click.Context,
    run: Path,
    path: Path,
    host: str,
    port: int,
    interval: float,
    quiet_period: float,
    base: str | None = None,
    detail: str = "tasks",
    darshan: bool = True,
    timeout: float | None = None,
) -> None:

    from metaprov.live.server import DEFAULT_QUERY_TIMEOUT, describe_refresh, serve_follow

    stop = _stop_on_signals()
    talk = not (ctx.obj and ctx.obj.quiet)

    def listening(server: Any) -> None:
        q = server.query_url
        click.echo(f"Serving {path} at {server.url}/ while following {run} (Ctrl-C stops it)")
        click.echo(f"  query page:       {server.url}/")
        click.echo(f"  SPARQL endpoint:  {q}")
        click.echo(f"  metaprov:         metaprov query runs --endpoint {q}")
        sys.stdout.flush()

    def refreshed(r: Any) -> None:
        if talk:
            click.echo(describe_refresh(r), err=True)

    def complete(result: Any) -> None:
        if result.complete:
            click.echo(f"run complete: <{result.graph}> (still serving; Ctrl-C stops)")
            sys.stdout.flush()

    serve_follow(
        run,
        path,
        host=host,
        port=port,
        interval=interval,
        quiet=quiet_period,
        base=base,
        detail=detail,
        darshan=darshan,
        on_listen=listening,
        on_refresh=refreshed,
        timeout=DEFAULT_QUERY_TIMEOUT if timeout is None else timeout or None,
        on_complete=complete,
        stop=stop,
    )
    click.echo("stopped", err=True)


@cli.command("follow")
@quiet_option
@click.argument("run", type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--store", type=click.Path(path_type=Path, file_okay=False), default=None, help=_STORE_HELP
)
@click.option("--endpoint", metavar="URL", default=None, help=_ENDPOINT_HELP)
@click.option("--gsp", metavar="URL", default=None, help=_GSP_HELP)
@click.option(
    "--update",
    "update_url",
    metavar="URL",
    default=None,
    help="The server's SPARQL Update endpoint [default: derived from --endpoint].",
)
@click.option(
    "--interval",
    type=float,
    default=2.0,
    show_default=True,
    help="Seconds between refreshes (a slow refresh delays the next; they never overlap).",
)
@click.option(
    "--quiet-period",
    "quiet_period",
    type=float,
    default=120.0,
    show_default=True,
    help="A run without a completion signal (no metaprov-run.json) is complete after this "
    "many seconds without change (0: never; follow until Ctrl-C).",
)
@click.option(
    "--base",
    default=None,
    metavar="IRI",
    help="Base IRI of the run's instances [default: https://w3id.org/metaprov/id].",
)
@click.option(
    "--detail",
    type=click.Choice(["tasks", "transitions"]),
    default="tasks",
    show_default=True,
    help="'transitions' also maps every state transition.",
)
@click.option("--no-darshan", is_flag=True, help="Do not read Darshan logs.")
@click.option(
    "--max-request",
    type=click.IntRange(min=1024),
    default=32 << 20,
    show_default=True,
    help="Largest SPARQL Update request sent to a server, in bytes (a larger change is split).",
)
@click.option(
    "--serve",
    "serve_too",
    is_flag=True,
    help="Also serve the embedded store while following (as metaprov serve --follow).",
)
@click.option(
    "--port", type=int, default=7878, show_default=True, help="With --serve: TCP port (0: any)."
)
@click.option("--json", "as_json", is_flag=True, help="Print each refresh as a JSON line.")
@click.pass_context
def follow_cmd(
    ctx: click.Context,
    run: Path,
    store: Path | None,
    endpoint: str | None,
    gsp: str | None,
    update_url: str | None,
    interval: float,
    quiet_period: float,
    base: str | None,
    detail: str,
    no_darshan: bool,
    max_request: int,
    serve_too: bool,
    port: int,
    as_json: bool,
) -> None:
    """Keep a store's graph of RUN current while RUN is being written.

    At every interval: read the whole rows written so far, map them, and update
    the run's graph in one transaction (readers see the previous or the new
    refresh). While in progress the graph says so (mp:liveState "in progress",
    mp:liveUpdated, mp:liveLag) under a provisional run id; when the capture
    writes 'complete' in metaprov-run.json (or nothing changed for
    --quiet-period), the graph becomes exactly what metaprov export writes and
    follow exits. Stopping it (Ctrl-C, kill) and starting it again resumes.
    To query while following an embedded store, use metaprov serve --follow.

    \b
    Example:
      metaprov follow runs/now --endpoint http://127.0.0.1:7878/query
      metaprov follow runs/now --store live-store --interval 5
      metaprov follow runs/now --store live-store --serve --port 0
    """
    import signal
    import threading

    from metaprov.live.follow import follow
    from metaprov.live.server import describe_refresh

    if serve_too:
        from metaprov.errors import UsageError

        if endpoint is not None:
            raise UsageError(
                "--serve serves an embedded store: give --store DIR, not --endpoint",
                hint="a server you run already serves what follow --endpoint writes",
            )
        import os

        from metaprov.store import DEFAULT_STORE, ENV_STORE

        path = store if store is not None else Path(os.environ.get(ENV_STORE) or DEFAULT_STORE)
        _serve_follow(
            ctx, run, path, "127.0.0.1", port, interval, quiet_period, base, detail, not no_darshan
        )
        return
    stop = threading.Event()

    def _stop(*_: Any) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    talk = not (ctx.obj and ctx.obj.quiet)

    def refreshed(r: Any) -> None:
        if as_json:
            click.echo(json.dumps(r.to_dict(), sort_keys=True))
            sys.stdout.flush()
        elif talk:
            click.echo(describe_refresh(r))
            sys.stdout.flush()

    try:
        result = follow(
            run,
            store,
            endpoint,
            gsp=gsp,
            update=update_url,
            interval=interval,
            quiet=quiet_period,
            base=base,
            detail=detail,
            darshan=not no_darshan,
            on_refresh=refreshed,
            stop=stop,
            max_request=max_request,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not as_json:
        if result.complete:
            click.echo(f"run complete: <{result.graph}>")
        else:
            click.echo("stopped before the run completed; start follow again to resume", err=True)


@cli.command("drop")
@quiet_option
@click.argument("runs", nargs=-1, required=True)
@click.option(
    "--store", type=click.Path(path_type=Path, file_okay=False), default=None, help=_STORE_HELP
)
@click.option("--endpoint", metavar="URL", default=None, help=_ENDPOINT_HELP)
@timeout_option
@click.option("--gsp", metavar="URL", default=None, help=_GSP_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the runs dropped as JSON.")
@click.pass_context
def drop_cmd(
    ctx: click.Context,
    runs: tuple[str, ...],
    store: Path | None,
    endpoint: str | None,
    gsp: str | None,
    as_json: bool,
) -> None:
    """Remove RUNS (run ids, run directory names or graph IRIs) from a store.

    Each run's named graph goes, and what the store recorded about it. A run
    that is not in the store is an error naming the runs it holds (nothing is
    dropped then).

    \b
    Example:
      metaprov runs --store prov-store
      metaprov drop 3a11b3998b3a66d8 --store prov-store
      metaprov drop 3a11b3998b3a66d8 --endpoint http://127.0.0.1:7878/query
    """
    from metaprov.store import drop

    dropped = drop(list(runs), store=store, endpoint=endpoint, gsp=gsp)
    if as_json:
        _echo_json([{"run_id": r, "graph": g} for r, g in dropped])
        return
    for run_id, graph in dropped:
        click.echo(f"dropped {run_id}: <{graph}>")


@cli.command("runs")
@quiet_option
@click.option(
    "--store", type=click.Path(path_type=Path, file_okay=False), default=None, help=_STORE_HELP
)
@click.option("--endpoint", metavar="URL", default=None, help=_ENDPOINT_HELP)
@timeout_option
@answer_format_option
def runs_cmd(store: Path | None, endpoint: str | None, fmt: str) -> None:
    """List the runs a store holds (the packaged question 'runs').

    \b
    Example:
      metaprov runs --store example-store
    """
    from metaprov.queries import format_result, query

    click.echo(format_result(query("runs", store=store, endpoint=endpoint), fmt).rstrip("\n"))


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``metaprov`` command."""
    cli.main(args=argv, prog_name="metaprov")


# --- crate (issue 13) ---
@cli.command("crate")
@quiet_option
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="The crate: a new (or empty) directory, or FILE.zip. Default with --add-to: that crate.",
)
@click.option(
    "--add-to",
    type=click.Path(path_type=Path),
    default=None,
    metavar="CRATE",
    help="Add the runs to an existing crate (directory or .zip): its entities are kept, a run "
    "already in it is replaced.",
)
@click.option("--name", default=None, help="The dataset's name.")
@click.option("--description", default=None, help="The dataset's description.")
@click.option(
    "--license", "license_", default=None, metavar="SPDX|URL", help="e.g. CC-BY-4.0 or a URL."
)
@click.option(
    "--author",
    "authors",
    multiple=True,
    metavar='"NAME <ORCID>"',
    help="An author: name and ORCID iD (or other IRI), an ORCID iD, or a name. Repeatable.",
)
@click.option(
    "--date-published",
    default=None,
    metavar="YYYY-MM-DD",
    help="Default: the day the newest run ended.",
)
@click.option("--include-inputs", is_flag=True, help="Copy the runs' record files into the crate.")
@click.option(
    "--workflow",
    type=click.Path(path_type=Path),
    default=None,
    metavar="SCRIPT",
    help="The client script that submitted the task graphs: the crate's workflow "
    "(default: each run's task graphs).",
)
@click.option(
    "--prov",
    "prov_formats",
    default="turtle,json-ld,provn",
    show_default=True,
    metavar="FORMATS",
    help="PROV files to include (comma-separated).",
)
@click.option(
    "--base",
    default=None,
    metavar="IRI",
    help="Base IRI of the runs' instances [default: https://w3id.org/metaprov/id].",
)
@click.option("--no-darshan", is_flag=True, help="Do not read Darshan logs.")
@click.option(
    "--no-report", is_flag=True, help="No HTML report (report.html) in each run's folder."
)
@click.option(
    "--data",
    "data",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    metavar="DIR",
    help="A folder holding the workflow's input and result files as the run saw them "
    "(repeatable): files under it get their size and sha256 in the crate.",
)
@click.option(
    "--container-image",
    default=None,
    metavar="IMAGE",
    help="The container image the run ran in (registry/name:tag), when its capture could not "
    "see it (Docker).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace an existing output directory or zip (never a run: an output is never an input).",
)
@click.pass_context
def crate_cmd(
    ctx: click.Context,
    runs: tuple[Path, ...],
    output: Path | None,
    add_to: Path | None,
    name: str | None,
    description: str | None,
    license_: str | None,
    authors: tuple[str, ...],
    date_published: str | None,
    include_inputs: bool,
    workflow: Path | None,
    prov_formats: str,
    base: str | None,
    no_darshan: bool,
    no_report: bool,
    data: tuple[Path, ...],
    container_image: str | None,
    force: bool,
) -> None:
    """Publish RUNS with their provenance as a Provenance Run Crate (RO-Crate, profile 0.5).

    Each run becomes a CreateAction with its task graphs as the workflow, the Dask scheduler
    as the engine, one step per task prefix, its PROV files (Turtle, JSON-LD, PROV-N) and its
    record files (listed with size and sha256, or copied with --include-inputs). Needs the
    crate extra: pip install 'metaprov[crate]'. See https://metaprov.github.io/metaprov/crate/

    \b
    Example:
      metaprov crate examples/run -o run-crate.zip --license CC-BY-4.0 \\
          --author "Josiah Carberry <https://orcid.org/0000-0002-1825-0097>"
      metaprov crate runs/R1 runs/R2 -o campaign/
      metaprov crate runs/R3 --add-to campaign/
      metaprov crate runs/R4 -o r4/ --data /lus/project/inputs --data /lus/project/out
    """
    from metaprov.crate import crate
    from metaprov.mapping.terms import DEFAULT_BASE

    result = crate(
        list(runs),
        output,
        add_to=add_to,
        name=name,
        description=description,
        license=license_,
        authors=authors,
        date_published=date_published,
        include_inputs=include_inputs,
        workflow=workflow,
        report=not no_report,
        formats=tuple(f.strip() for f in prov_formats.split(",") if f.strip()),
        base=base or DEFAULT_BASE,
        darshan=not no_darshan,
        force=force,
        progress=progress_enabled(ctx),
        data=data,
        container_image=container_image,
    )
    obj = ctx.find_object(Context)
    if not (obj and obj.quiet):
        click.echo(result.summary(), err=True)
        for warning in result.warnings:
            click.echo(f"Warning: {warning}", err=True)
