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

from metaprov import __version__
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


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


@cli.command("inspect")
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
    from metaprov.ingest import read_run
    from metaprov.inspect import format_summary, summarize

    records = read_run(run, darshan=not no_darshan, progress=progress_enabled(ctx))
    summary = summarize(records)
    if as_json:
        _echo_json(summary)
    else:
        click.echo(format_summary(summary))


# --- further commands are registered below this line (one block per command) ---


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``metaprov`` command."""
    cli.main(args=argv, prog_name="metaprov")
