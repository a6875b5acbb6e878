"""The ``metaprov`` command line: options in, one library call, output out.

Errors are translated in one place (:func:`main`): ``Error: ...`` on stderr and the error's exit
code; a traceback only for bugs, or with ``--debug``.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from metaprov._version import __version__
from metaprov.errors import MetaprovError


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
            click.echo(f"Error: {exc}", err=True)
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
      metaprov inspect examples/run
    """
    level = logging.WARNING
    if quiet:
        level = logging.ERROR
    elif verbose == 1:
        level = logging.INFO
    elif verbose >= 2:
        level = logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s: %(message)s", stream=sys.stderr)
    logging.getLogger("metaprov").setLevel(level)
    ctx.obj = Context(quiet=quiet, debug=debug, verbose=verbose)


def _quiet_here(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    """``--quiet`` after a command name means what ``metaprov --quiet`` means."""
    if value:
        obj = ctx.find_object(Context)
        if obj is not None:
            obj.quiet = True
        logging.getLogger("metaprov").setLevel(logging.ERROR)
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


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


@cli.command("inspect")
@quiet_option
@click.argument("run", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (for scripts).")
@click.option("--no-darshan", is_flag=True, help="Do not read Darshan logs.")
@click.pass_context
def inspect_cmd(ctx: click.Context, run: Path, as_json: bool, no_darshan: bool) -> None:
    """Summarise a run: tasks, workers, threads, transfers, I/O, missing files, row accounting.

    \b
    Example:
      metaprov inspect examples/run --json > summary.json
    """
    from metaprov.analysis.summary import format_summary, summarize
    from metaprov.ingest import read_run

    records = read_run(run, darshan=not no_darshan, progress=progress_enabled(ctx))
    summary = summarize(records)
    if as_json:
        _echo_json(summary)
    else:
        click.echo(format_summary(summary))


# --- further commands are registered below this line (one block per command) ---


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
    from metaprov.store import load

    reports = load(
        list(runs),
        store=store,
        endpoint=endpoint,
        gsp=gsp,
        base=base,
        detail=detail,
        darshan=not no_darshan,
        force=force,
    )
    if as_json:
        _echo_json([r.to_dict() for r in reports])
        return
    for r in reports:
        verb = "unchanged" if r.unchanged else "replaced" if r.replaced else "loaded"
        click.echo(f"{verb} {r.source}: {r.triples:,} triples in <{r.graph}> ({r.seconds:.1f} s)")


@cli.command("query")
@quiet_option
@click.argument("question", required=False)
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
@click.option(
    "--file",
    "files",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Query export file(s) instead of a store (loaded in memory; repeatable).",
)
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write the answer to this file instead of stdout.",
)
@click.option(
    "--list",
    "list_questions",
    is_flag=True,
    help="List the packaged questions and their parameters.",
)
def query_cmd(
    question: str | None,
    params: tuple[str, ...],
    store: Path | None,
    endpoint: str | None,
    files: tuple[Path, ...],
    fmt: str,
    output: Path | None,
    list_questions: bool,
) -> None:
    """Answer QUESTION: a packaged question's name, a .rq file, or SPARQL text.

    Parameters are bound as RDF terms (never pasted into the query text).

    \b
    Example:
      metaprov query --list
      metaprov query slowest-tasks --param prefix=save_file --store prov-store
      metaprov query lineage --param "key=list-8606d556-c6f4-465b-933b-4f2338e69364" -f json
      metaprov query my-question.rq --file run.nq -f csv
    """
    from metaprov.errors import UsageError
    from metaprov.queries import format_list, format_result, query

    if list_questions:
        click.echo(format_list())
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
    result = query(question, values, store=store, endpoint=endpoint, file=list(files) or None)
    text = format_result(result, fmt)
    if output is not None:
        output.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    else:
        click.echo(text.rstrip("\n"))


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
@click.option("--overwrite", is_flag=True, help="Replace an earlier capture in OUTPUT.")
@click.pass_context
def capture_cmd(
    ctx: click.Context, script: Path, script_args: tuple[str, ...], output: Path, overwrite: bool
) -> None:
    """Run SCRIPT with metaprov's capture on every Dask cluster it starts.

    The script runs unchanged; each LocalCluster/scheduler and worker it starts is
    recorded into OUTPUT (Mofka-Dask CSV schema plus pid/host/thread/config files).
    Everything after SCRIPT is passed to the script, untouched.

    \b
    Example:
      metaprov capture -o runs/my-run my_pipeline.py --input data/ --chunks 100
    """
    from metaprov.capture.script import run_script
    from metaprov.errors import MetaprovError

    result = run_script(script, output, args=script_args, overwrite=overwrite)
    obj = ctx.find_object(Context)
    if not (obj and obj.quiet):
        for d, meta in zip(result.directories, result.summaries, strict=True):
            rows = sum(meta.get("files", {}).values())
            click.echo(f"{d}: {rows:,} rows in {len(meta.get('files', {}))} files", err=True)
    if result.returncode != 0:
        raise MetaprovError(
            f"{script} exited with code {result.returncode}"
            + (f"; what ran is recorded in {result.directory}" if result.directories else ""),
            hint="fix the script's error (its traceback is above)",
        )
    if not result.directories:
        raise MetaprovError(
            f"{script} started no Dask scheduler, so nothing was recorded",
            hint="the script must start its own cluster (e.g. LocalCluster()); for a running "
            "cluster use 'dask scheduler --preload metaprov.capture' (docs/capture.md)",
        )


# --- export (issue 3) ---
def _format_help() -> str:
    from metaprov.write import FORMATS, PROV_LIMIT

    names = ", ".join(f.name + (f" ({'/'.join(f.aliases)})" if f.aliases else "") for f in FORMATS)
    return (
        f"Output format: {names}. Default: from the file suffix. "
        f"provn/provjson/provxml are limited to {PROV_LIMIT:,} triples (see --force)."
    )


@cli.command("export")
@quiet_option
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="File to write (written atomically).",
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
    help="Let provn/provjson/provxml run above their size limit (slow, memory-hungry).",
)
@click.pass_context
def export_cmd(
    ctx: click.Context,
    run: Path,
    output: Path,
    fmt: str | None,
    base: str | None,
    detail: str,
    io_detail: str,
    no_darshan: bool,
    force: bool,
) -> None:
    """Export RUN as W3C PROV (Turtle, N-Triples, N-Quads, TriG, JSON-LD, RDF/XML, PROV-N/JSON/XML).

    Line-based formats stream and handle runs of millions of tasks; provn, provjson
    and provxml go through the prov package and refuse runs above 200,000 triples
    unless --force is given.

    \b
    Example:
      metaprov export examples/run -o run.ttl
      metaprov export examples/run -o run.nq --base https://example.org/prov --detail transitions
      metaprov export runs/R1 -o r1.ttl --io-detail segments
    """
    from metaprov.export import export
    from metaprov.mapping.terms import DEFAULT_BASE

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
    )
    obj = ctx.find_object(Context)
    if not (obj and obj.quiet):
        click.echo(result.summary(), err=True)


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
    type=click.Choice(["auto", "shacl", "sparql"]),
    default="auto",
    show_default=True,
    help="pyshacl (small exports) or SPARQL checks (any size); auto picks by size.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def validate_cmd(
    ctx: click.Context, source: Path, fmt: str | None, engine: str, as_json: bool
) -> None:
    """Check an export FILE (or a RUN directory, exported in memory) against the shipped SHACL shapes.

    The ontology's class hierarchy is applied first (RDFS inference). Also checks the W3C
    PROV-CONSTRAINTS that apply across nodes (generation precedes usage, unique generation,
    start precedes end, entities are not activities, times in UTC, ...). Prints a report
    naming each rule and example nodes, and which engine ran and why; exits with code 5 when
    anything is violated. A progress bar shows on a terminal (-q hides it).

    \b
    Example:
      metaprov validate run.ttl
    """
    from metaprov.errors import ValidationError
    from metaprov.validate import validate

    report = validate(source, format=fmt, engine=engine, progress=progress_enabled(ctx))
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


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``metaprov`` command."""
    cli.main(args=argv, prog_name="metaprov")
