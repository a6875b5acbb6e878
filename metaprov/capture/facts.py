"""What a task was: its function, literal arguments, result, exception, and where it was submitted.

Input: objects the capture plugins see at their hooks — a scheduler task's ``run_spec`` (a Dask
``Task``/``GraphNode``, or a legacy tuple), a worker task's result type and serialized exception,
the ``SourceCode`` frames a client sends with a graph. Output: plain values (text, ints) for the
capture's extra CSV files. Nothing here may raise into Dask: every function degrades to a
summary (type, size) or a recorded failure.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

#: Kinds of callables a task can run (``kind`` column of ``task_function.csv``).
KINDS = ("function", "partial", "callable", "compose", "fused", "data", "alias", "unknown")

_IPYTHON_CELL = re.compile(r"^<ipython-input-(\d+)-[0-9a-f]+>$")
_IPYKERNEL_FILE = re.compile(r"[\\/]ipykernel_\d+[\\/][^\\/]+\.py$")
#: Longest exception message, traceback and notebook cell kept (characters).
MESSAGE_CHARS = 2_000
TRACEBACK_CHARS = 20_000
CELL_CHARS = 64_000


def qualified_type(obj_type: type) -> str:
    """``module.qualname`` of a type (``int``, ``numpy.ndarray``, ``pandas.DataFrame``)."""
    try:
        module = getattr(obj_type, "__module__", None)
        name = getattr(obj_type, "__qualname__", None) or obj_type.__name__
    except Exception:
        return "?"
    if not module or module == "builtins":
        return str(name)
    # pandas.core.frame.DataFrame is public as pandas.DataFrame: keep the defining module
    # (exact, no guess), as Python and Dask name it.
    return f"{module}.{name}"


def _plain(func: Any) -> tuple[str, str] | None:
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if not isinstance(name, str):
        return None
    module = getattr(func, "__module__", None)
    if module is None:
        owner = getattr(func, "__self__", None)  # builtin methods of C types
        module = getattr(type(owner), "__module__", None) if owner is not None else None
    return (module if isinstance(module, str) else ""), name


def describe_callable(func: Any) -> tuple[str, str, str]:
    """(module, qualname, kind) of a callable; ``functools.partial`` and callable objects too.

    Example:
        >>> import functools, operator
        >>> describe_callable(functools.partial(operator.add, 1))
        ('_operator', 'add', 'partial')
    """
    try:
        kind = "function"
        for _ in range(32):  # nested partials
            inner = getattr(func, "func", None)
            if inner is None or not callable(inner) or not hasattr(func, "keywords"):
                break
            func, kind = inner, "partial"
        funcs = getattr(func, "funcs", None)
        if funcs is not None and hasattr(func, "first"):  # toolz Compose: last one gives the result
            m, q, _ = describe_callable(funcs[-1] if funcs else func.first)
            return m, q, "compose"
        plain = _plain(func)
        if plain is not None:
            return plain[0], plain[1], kind
        t = type(func)
        return (
            getattr(t, "__module__", "") or "",
            getattr(t, "__qualname__", t.__name__),
            ("callable" if kind == "function" else kind),
        )
    except Exception:
        return "", type(func).__name__ if func is not None else "", "unknown"


def _subgraph_runner() -> Any:
    try:
        from dask._task_spec import _execute_subgraph
    except Exception:  # older dask
        return None
    return _execute_subgraph


_SUBGRAPH = _subgraph_runner()


def is_fused(run_spec: Any) -> bool:
    """True for a task Dask made by fusing several (``GraphNode.fuse``)."""
    return _SUBGRAPH is not None and getattr(run_spec, "func", None) is _SUBGRAPH


def task_function(run_spec: Any) -> tuple[str, str, str, int]:
    """(module, qualname, kind, n_ops) of what a scheduler task runs.

    A fused task (Dask fuses blockwise chains into one task) is described by the operation that
    produces its result, kind ``fused``, with the number of fused operations.
    """
    func = getattr(run_spec, "func", None)
    if func is None:
        if isinstance(run_spec, tuple) and run_spec and callable(run_spec[0]):  # legacy tuple
            return (*describe_callable(run_spec[0]), 1)
        kind = type(run_spec).__name__
        if kind == "DataNode" or run_spec is None:
            return "", "", "data", 0
        if kind == "Alias":
            return "", "", "alias", 0
        return "", kind, "unknown", 0
    if func is _SUBGRAPH and _SUBGRAPH is not None:
        try:
            inner, outkey = run_spec.args[0], run_spec.args[1]
            m, q, _, _ = task_function(inner[outkey])
            return m, q, "fused", len(inner)
        except Exception:
            return "", "", "fused", 0
    return (*describe_callable(func), 1)


def fused_operations(run_spec: Any) -> list[tuple[str, str, str, str, str]]:
    """Inner operations of a fused task, in execution order (dependencies first).

    Returns:
        ``(name, module, qualname, kind, inputs)`` per operation: ``name`` is the key's prefix,
        ``inputs`` the positions (space-separated) of the operations whose result it uses.
    """
    if _SUBGRAPH is None or getattr(run_spec, "func", None) is not _SUBGRAPH:
        return []
    from dask.utils import key_split

    inner: dict[Any, Any] = run_spec.args[0]
    order: list[Any] = []
    seen: set[Any] = set()

    def visit(k: Any) -> None:
        stack = [(k, False)]
        while stack:
            key, done = stack.pop()
            if done:
                order.append(key)
                continue
            if key in seen or key not in inner:
                continue
            seen.add(key)
            stack.append((key, True))
            deps = getattr(inner[key], "dependencies", ()) or ()
            for d in sorted(deps, key=str, reverse=True):
                stack.append((d, False))

    for k in sorted(inner, key=str):
        visit(k)
    pos = {k: i for i, k in enumerate(order)}
    out = []
    for k in order:
        node = inner[k]
        m, q, kind, _ = task_function(node)
        deps = sorted(pos[d] for d in (getattr(node, "dependencies", ()) or ()) if d in pos)
        out.append((key_split(k), m, q, kind, " ".join(map(str, deps))))
    return out


# -- literal arguments ----------------------------------------------------------------------------


def _size(value: Any) -> int | None:
    if isinstance(value, (str, bytes, bytearray)):
        return len(value)
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    try:
        from dask.sizeof import sizeof

        return int(sizeof(value))
    except Exception:
        return None


def summarise(value: Any, cap: int) -> tuple[str, int | None, str | None, str]:
    """(type, size, value, status) of one argument: its repr when it fits in ``cap`` characters.

    ``status`` is ``ok``, ``too large`` (value left out: size or repr above ``cap``) or
    ``repr failed: <error>``; ``value`` is a JSON string literal (newlines escaped).
    """
    typ = qualified_type(type(value))
    size = _size(value)
    if size is not None and size > 64 * cap:  # never format a large object
        return typ, size, None, "too large"
    try:
        text = repr(value)
    except Exception as exc:  # a failing repr is a fact, not a reason to fail the run
        return typ, size, None, f"repr failed: {type(exc).__name__}: {str(exc)[:200]}"
    if not isinstance(text, str):
        return typ, size, None, "repr failed: not a str"
    if len(text) > cap:
        return typ, size, None, "too large"
    return typ, size, json.dumps(text, ensure_ascii=False), "ok"


def _is_reference(value: Any) -> bool:
    cls = type(value).__name__
    return cls in ("TaskRef", "Alias") or (
        hasattr(value, "dependencies") and hasattr(value, "key") and cls != "DataNode"
    )


def literal_arguments(
    run_spec: Any, cap: int
) -> list[tuple[str, str, int | None, str | None, str]]:
    """Literal (non-task) arguments of a task: ``(position, type, size, value, status)`` rows.

    Positions: ``0``, ``1``, ... and keyword names for the call; ``partial.0`` / ``partial.<kw>``
    for arguments bound in a ``functools.partial``; ``<op>.<position>`` inside a fused task.
    References to other tasks are dependencies, not literals, and are left out.
    """
    rows: list[tuple[str, str, int | None, str | None, str]] = []

    def add(position: str, value: Any) -> None:
        if type(value).__name__ == "DataNode":
            value = getattr(value, "value", None)
        elif _is_reference(value):
            return
        rows.append((position, *summarise(value, cap)))

    def walk(node: Any, prefix: str) -> None:
        func = getattr(node, "func", None)
        if func is _SUBGRAPH and _SUBGRAPH is not None:
            from dask.utils import key_split

            for k, inner in sorted(node.args[0].items(), key=lambda kv: str(kv[0])):
                walk(inner, f"{prefix}{key_split(k)}.")
            return
        args = getattr(node, "args", None)
        kwargs = getattr(node, "kwargs", None) or {}
        if args is None and isinstance(node, tuple) and node and callable(node[0]):
            func, args = node[0], node[1:]
        p = func
        while p is not None and hasattr(p, "keywords") and callable(getattr(p, "func", None)):
            for i, v in enumerate(p.args):
                add(f"{prefix}partial.{i}", v)
            for k, v in sorted(p.keywords.items()):
                add(f"{prefix}partial.{k}", v)
            p = p.func
        for i, v in enumerate(args or ()):
            add(f"{prefix}{i}", v)
        for k, v in sorted(kwargs.items(), key=lambda kv: str(kv[0])):
            add(f"{prefix}{k}", v)

    try:
        walk(run_spec, "")
    except Exception as exc:
        rows.append(("?", "?", None, None, f"arguments not readable: {type(exc).__name__}"))
    return rows


# -- exceptions ---------------------------------------------------------------------------------


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [{len(text) - limit} more characters]"


def exception_facts(exception: Any, exception_text: str) -> tuple[str, str]:
    """(type, message) of an erred attempt from the worker's serialized exception.

    The worker holds the exception object itself (``distributed.core.error_message`` wraps it in
    ``Serialize``). When only serialized bytes are at hand (they are never unpickled), or Dask
    replaced an unpicklable exception by ``Exception(repr(e))``, the type is the name
    ``exception_text`` (``repr(e)``) starts with, without a module.
    """
    shown = (exception_text or "").split("(", 1)[0].strip()
    try:
        # The worker keeps the exception object (wrapped in ``Serialize``); serialized bytes are
        # never unpickled here: the text then says the type.
        exc = getattr(exception, "data", exception)
        if isinstance(exc, BaseException):
            typ = type(exc)
            if not shown or shown == typ.__qualname__ or shown == typ.__name__:
                return qualified_type(typ), _cap(str(exc), MESSAGE_CHARS)
    except Exception:
        pass
    msg = exception_text or ""
    if shown and msg.startswith(shown + "(") and msg.endswith(")"):
        msg = msg[len(shown) + 1 : -1]
        if len(msg) < 100_000:
            import ast

            try:  # ValueError('bad input') -> bad input: one string argument, read as a literal
                value = ast.literal_eval(msg)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                value = None
            if isinstance(value, str):
                msg = value
    return shown or "?", _cap(msg, MESSAGE_CHARS)


def json_text(text: str | None, limit: int) -> str | None:
    """A text as a JSON string literal (one CSV line whatever it holds), capped."""
    if text is None:
        return None
    return json.dumps(_cap(text, limit), ensure_ascii=False)


# -- call sites ---------------------------------------------------------------------------------


def call_site(code: Any) -> tuple[str, int | None, int | None, str, str | None, int] | None:
    """Where the client called compute/persist/submit, from the frames it sent with the graph.

    Returns:
        ``(file, line, cell, sha256, cell_source, frames)`` for the innermost user frame, or
        None when the client sent none. ``cell`` is the IPython execution count when the file
        names one; ``cell_source`` (a JSON string literal) is kept only for notebook/interactive
        code (a file that is not on disk); ``sha256`` is the hash of the source Dask sent.
    """
    try:
        frames = list(code or ())
        if not frames:
            return None
        last = frames[-1]
        filename = str(getattr(last, "filename", "") or "")
        line = getattr(last, "lineno_frame", None)
        source = getattr(last, "code", "") or ""
        sha = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
        m = _IPYTHON_CELL.match(filename)
        cell = int(m.group(1)) if m else None
        interactive = bool(m) or filename.startswith("<") or bool(_IPYKERNEL_FILE.search(filename))
        text = json_text(source, CELL_CHARS) if interactive else None
        return filename, None if line is None else int(line), cell, sha, text, len(frames)
    except Exception:
        return None
