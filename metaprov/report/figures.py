"""Bokeh figures of a run's report (drawn from a :class:`~metaprov.report.views.RunView`).

Input: a :class:`~metaprov.report.views.RunView`. Output: Bokeh layouts, embedded by
:mod:`metaprov.report.page`. Bokeh is imported here only (the ``report`` extra).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from bokeh.layouts import column, row
from bokeh.models import (
    BasicTicker,
    ColorBar,
    ColumnDataSource,
    CustomJS,
    CustomJSHover,
    FixedTicker,
    HoverTool,
    LinearColorMapper,
    LogColorMapper,
    Range1d,
    Select,
)
from bokeh.palettes import Blues256, Category20, Turbo256, Viridis256
from bokeh.plotting import figure

from metaprov.report.views import RunView

# Category20 without its reds: red is the transfers' colour (as on Dask's dashboard).
_BASE = [c for c in Category20[20] if c not in ("#d62728", "#ff9896")]
TOOLS = "xpan,xwheel_zoom,box_zoom,reset,save"
TRANSFER_COLOR = "#d62728"
IO_COLOR = "#222222"
IDLE = "#dddddd"


def palette(n: int) -> list[str]:
    """``n`` distinct colours: Category20 up to 20 prefixes, then samples of Turbo."""
    if n <= len(_BASE):
        return _BASE[: max(n, 1)]
    idx = np.linspace(0, 255, n).astype(int)
    # interleave so that neighbours in the order get distant colours
    order = np.r_[idx[::2], idx[1::2]]
    return [Turbo256[i] for i in order]


def _rgb(hexes: list[str]) -> np.ndarray:
    return np.array([[int(h[i : i + 2], 16) for i in (1, 3, 5)] for h in hexes], dtype=np.uint32)


def _lane_hover(labels: list[str]) -> CustomJSHover:
    return CustomJSHover(args={"labels": labels}, code="return labels[Math.round(value)]")


def _time_hover(t0_ms: float) -> CustomJSHover:
    return CustomJSHover(
        args={"t0": t0_ms},
        code="return value.toFixed(6) + ' s  (' + new Date(t0 + value * 1000).toISOString() + ')'",
    )


def _interval_hover(
    renderer: Any, tips: list[tuple[str, str]], lane: str, labels: list[str], t0_ms: float
) -> HoverTool:
    """Hover for bars on lanes: ``tips``, then start and end (seconds since t0 and UTC)."""
    return HoverTool(
        renderers=[renderer],
        tooltips=[*tips, ("start", "@left{t}"), ("end", "@right{t}")],
        formatters={
            f"@{lane}": _lane_hover(labels),
            "@left": _time_hover(t0_ms),
            "@right": _time_hover(t0_ms),
        },
    )


def task_stream(view: RunView, colors: list[str]) -> Any:
    """One lane per worker thread, a bar per execution coloured by prefix; transfers and I/O."""
    lanes = view.lanes.table
    n = max(len(lanes), 1)
    span = max(view.span_s, 1e-6)
    labels = lanes["label"].tolist()
    p = figure(
        height=min(60 + 16 * n, 1400),
        sizing_mode="stretch_width",
        x_range=Range1d(-0.01 * span, span * 1.01),
        y_range=Range1d(n - 0.5, -0.5),
        tools=TOOLS,
        active_scroll="xwheel_zoom",
        x_axis_label="seconds since the run's first event",
        name="task-stream",
    )
    p.yaxis.ticker = FixedTicker(ticks=list(range(len(lanes))))
    p.yaxis.major_label_overrides = {i: lbl for i, lbl in enumerate(labels)}
    p.yaxis.major_label_text_font_size = "8pt" if n < 80 else "5pt"
    p.ygrid.grid_line_color = None
    cmap = LinearColorMapper(palette=colors, low=-0.5, high=len(colors) - 0.5)
    t0_ms = view.t0_us / 1000.0
    if view.raster is not None:
        rgb = _rgb(colors)
        dom, busy = view.raster, view.raster_busy
        img = np.zeros(dom.shape, dtype=np.uint32)
        hit = dom >= 0
        c = rgb[dom[hit]]
        alpha = (80 + 175 * busy[hit]).astype(np.uint32)
        img[hit] = c[:, 0] | (c[:, 1] << 8) | (c[:, 2] << 16) | (alpha << 24)
        p.image_rgba(image=[img], x=0, y=-0.5, dw=span, dh=len(lanes))
    src = ColumnDataSource(
        {
            c: view.bars[c].to_numpy()
            for c in (
                "y",
                "left",
                "right",
                "duration",
                "prefix",
                "key",
                "attempt",
                "outcome",
                "color",
            )
        }
    )
    bars = p.hbar(
        y="y",
        left="left",
        right="right",
        height=0.8,
        source=src,
        fill_color={"field": "color", "transform": cmap},
        line_color={"field": "color", "transform": cmap},
        line_width=1,
    )
    p.add_tools(
        _interval_hover(
            bars,
            [
                ("key", "@key"),
                ("prefix", "@prefix"),
                ("worker / thread", "@y{lane}"),
                ("duration", "@duration{0.000000} s"),
                ("attempt / outcome", "@attempt / @outcome"),
            ],
            "y",
            labels,
            t0_ms,
        )
    )
    if len(view.transfer_bars):
        tsrc = ColumnDataSource(
            {c: view.transfer_bars[c].to_numpy() for c in ("y", "left", "right", "bytes", "n")}
        )
        tr = p.hbar(
            y="y",
            left="left",
            right="right",
            height=0.6,
            source=tsrc,
            fill_color=TRANSFER_COLOR,
            line_color=None,
            fill_alpha=0.8,
        )
        tips = [("transfers in", "@n to @y{lane}"), ("bytes", "@bytes{0,0}")]
        p.add_tools(_interval_hover(tr, tips, "y", labels, t0_ms))
    if len(view.io_bars):
        ib = view.io_bars
        isrc = ColumnDataSource(
            {
                "y": ib["y"].to_numpy() + 0.3,
                "lane": ib["y"].to_numpy(),
                "left": ib["left"].to_numpy(),
                "right": ib["right"].to_numpy(),
                "bytes": ib["bytes"].to_numpy(),
                "n": ib["n"].to_numpy(),
            }
        )
        io = p.hbar(
            y="y",
            left="left",
            right="right",
            height=0.2,
            source=isrc,
            fill_color=IO_COLOR,
            line_color=IO_COLOR,
            line_width=1,
        )
        tips = [("I/O burst", "@n Darshan segment(s) on @lane{lane}"), ("bytes", "@bytes{0,0}")]
        p.add_tools(_interval_hover(io, tips, "lane", labels, t0_ms))
    if not len(view.executions):
        return column(p, sizing_mode="stretch_width", name="task-stream-layout")
    return column(
        p, occupancy(view, p.x_range), sizing_mode="stretch_width", name="task-stream-layout"
    )


def occupancy(view: RunView, x_range: Any) -> Any:
    """Busy threads of each worker over time (heat map), sharing the task stream's time axis."""
    busy = view.occupancy_busy
    workers = view.occupancy["worker"].tolist()
    nw = max(len(workers), 1)
    span = max(view.span_s, 1e-6)
    p = figure(
        height=min(80 + 20 * nw, 600),
        sizing_mode="stretch_width",
        x_range=x_range,
        y_range=Range1d(nw - 0.5, -0.5),
        tools=TOOLS,
        active_scroll="xwheel_zoom",
        title="worker occupancy: average busy threads per time bin",
        name="occupancy",
    )
    p.yaxis.ticker = FixedTicker(ticks=list(range(len(workers))))
    p.yaxis.major_label_overrides = {i: w for i, w in enumerate(workers)}
    p.ygrid.grid_line_color = None
    top = (
        float(np.nanmax(view.occupancy["threads"]))
        if len(workers) and np.isfinite(view.occupancy["threads"]).any()
        else float(busy.max() if busy.size else 1)
    )
    mapper = LinearColorMapper(palette=Blues256[::-1], low=0, high=max(top, 1e-9))
    if busy.size:
        r = p.image(image=[busy], x=0, y=-0.5, dw=span, dh=len(workers), color_mapper=mapper)
        p.add_tools(
            HoverTool(
                renderers=[r], tooltips=[("busy threads", "@image{0.00}"), ("time", "$x{0.000} s")]
            )
        )
    p.add_layout(
        ColorBar(color_mapper=mapper, ticker=BasicTicker(), width=8, title="threads"), "right"
    )
    return p


def durations(view: RunView, colors: list[str], max_prefixes: int = 40) -> Any:
    """Per prefix: box plot of execution durations (p05-p95 whiskers, quartiles, median, min/max)."""
    pr = view.prefixes[view.prefixes["executions"] > 0].head(max_prefixes)
    if not len(pr):
        return None
    names = pr["prefix"].tolist()[::-1]
    floor = 1e-6
    cols = {
        c: np.maximum(pr[c].to_numpy(dtype="float64"), floor)[::-1]
        for c in ("min", "p05", "p25", "median", "p75", "p95", "max")
    }
    src = ColumnDataSource(
        {
            "prefix": names,
            **cols,
            "mean": pr["mean"].to_numpy()[::-1],
            "n": pr["executions"].to_numpy()[::-1],
            "total": pr["compute_s"].to_numpy()[::-1],
            "color": [colors[i] for i in pr["color"].to_numpy()[::-1]],
        }
    )
    lo_x = float(min(v.min() for v in cols.values()))
    hi_x = float(max(v.max() for v in cols.values()))
    p = figure(
        y_range=names,
        x_range=Range1d(lo_x / 1.5, hi_x * 1.5),
        x_axis_type="log",
        height=80 + 22 * len(names),
        sizing_mode="stretch_width",
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        x_axis_label="execution duration (s, log scale)",
        title="execution durations per prefix (whiskers p05-p95, box p25-p75, line median, dots min/max)",
        name="durations",
    )
    p.segment(x0="p05", x1="p95", y0="prefix", y1="prefix", source=src, line_color="#555555")
    box = p.hbar(
        y="prefix",
        left="p25",
        right="p75",
        height=0.6,
        source=src,
        fill_color="color",
        line_color="#333333",
    )
    p.rect(
        x="median", y="prefix", width=1, width_units="screen", height=0.6, source=src, color="black"
    )
    p.scatter(x="min", y="prefix", source=src, size=4, color="#555555")
    p.scatter(x="max", y="prefix", source=src, size=4, color="#555555")
    p.add_tools(
        HoverTool(
            renderers=[box],
            tooltips=[
                ("prefix", "@prefix"),
                ("executions", "@n{0,0}"),
                ("total", "@total{0.000} s"),
                ("mean / median", "@mean{0.000000} / @median{0.000000} s"),
                ("p05 .. p95", "@p05{0.000000} .. @p95{0.000000} s"),
                ("min .. max", "@min{0.000000} .. @max{0.000000} s"),
            ],
        )
    )
    return p


def histogram(
    view: RunView, ex_durations: pd.DataFrame, max_prefixes: int = 40, bins: int = 40
) -> Any:
    """Heat map of execution counts per prefix and logarithmic duration bin."""
    pr = view.prefixes[view.prefixes["executions"] > 0].head(max_prefixes)
    if not len(pr):
        return None
    d = ex_durations[ex_durations["prefix"].isin(set(pr["code"]))]
    x = np.log10(np.maximum(d["duration"].to_numpy(dtype="float64"), 1e-6))
    lo, hi = float(np.floor(x.min())), float(np.ceil(x.max()))
    hi = max(hi, lo + 1)
    w = (hi - lo) / bins
    b = np.clip(((x - lo) / w).astype(np.int64), 0, bins - 1)
    code = pd.Index(pr["code"]).get_indexer(d["prefix"].to_numpy())
    counts = np.bincount(code * bins + b, minlength=len(pr) * bins).reshape(len(pr), bins)
    ii, jj = np.nonzero(counts)
    names = pr["prefix"].tolist()
    src = ColumnDataSource(
        {
            "prefix": [names[i] for i in ii],
            "x": 10 ** (lo + (jj + 0.5) * w),
            "w": 10 ** (lo + (jj + 1) * w) - 10 ** (lo + jj * w),
            "from": 10 ** (lo + jj * w),
            "to": 10 ** (lo + (jj + 1) * w),
            "n": counts[ii, jj],
        }
    )
    mapper = LogColorMapper(palette=Viridis256, low=1, high=max(int(counts.max()), 2))
    p = figure(
        y_range=names[::-1],
        x_range=Range1d(10**lo, 10**hi),
        x_axis_type="log",
        height=80 + 22 * len(names),
        sizing_mode="stretch_width",
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        x_axis_label="execution duration (s, log scale)",
        title="how many executions took how long, per prefix",
        name="histogram",
    )
    r = p.rect(
        x="x",
        y="prefix",
        width="w",
        height=0.9,
        source=src,
        fill_color={"field": "n", "transform": mapper},
        line_color=None,
    )
    p.add_tools(
        HoverTool(
            renderers=[r],
            tooltips=[
                ("prefix", "@prefix"),
                ("executions", "@n{0,0}"),
                ("duration", "@from{0.000000} .. @to{0.000000} s"),
            ],
        )
    )
    p.add_layout(ColorBar(color_mapper=mapper, width=8, title="executions"), "right")
    return p


def transfer_matrix(view: RunView) -> Any:
    """Heat maps of bytes and seconds moved between workers (source row, destination column)."""
    m = view.matrix
    if not len(m):
        return None
    names = sorted(set(m["source"]) | set(m["destination"]))
    short = {n: n.split("://", 1)[-1] for n in names}
    src = ColumnDataSource(
        {c: m[c].to_numpy() for c in ("source", "destination", "bytes", "transfers", "seconds")}
    )
    figs = []
    for field, title in (
        ("bytes", "bytes moved"),
        ("seconds", "seconds spent transferring"),
    ):
        vals = m[field].to_numpy(dtype="float64")
        mapper = LinearColorMapper(palette=Blues256[::-1], low=0, high=max(float(vals.max()), 1e-9))
        side = min(300 + 40 * len(names), 900)
        p = figure(
            x_range=names,
            y_range=names[::-1],
            width=side + 120,
            height=side,
            tools="hover,save",
            title=title,
            x_axis_label="destination",
            y_axis_label="source",
            name=f"transfers-{field}",
        )
        p.rect(
            x="destination",
            y="source",
            width=1,
            height=1,
            source=src,
            fill_color={"field": field, "transform": mapper},
            line_color="white",
        )
        p.xaxis.major_label_orientation = 0.9
        p.axis.major_label_overrides = short
        p.hover.tooltips = [
            ("from -> to", "@source -> @destination"),
            ("transfers", "@transfers{0,0}"),
            ("bytes", "@bytes{0,0}"),
            ("seconds", "@seconds{0.000000}"),
        ]
        p.add_layout(ColorBar(color_mapper=mapper, width=8, title=field), "right")
        figs.append(p)
    return row(*figs, name="transfer-matrix")


def io_prefix(view: RunView, max_files: int = 40) -> Any:
    """Heat map of bytes per (task prefix, file): which tasks touched which files."""
    pf = view.io_prefix_file
    if not len(pf):
        return None
    top = pf.groupby("path")["bytes"].sum().sort_values(ascending=False).head(max_files).index
    pf = pf[pf["path"].isin(set(top))]
    files = list(top)
    prefixes = sorted(set(pf["prefix"]))
    mapper = LogColorMapper(palette=Blues256[::-1], low=1, high=max(float(pf["bytes"].max()), 2))
    src = ColumnDataSource({c: pf[c].to_numpy() for c in ("prefix", "path", "tasks", "bytes")})
    p = figure(
        x_range=prefixes,
        y_range=files[::-1],
        height=160 + 22 * len(files),
        width=min(1300, 560 + 60 * len(prefixes)),
        tools="hover,save",
        title="bytes of each file read or written by each task prefix",
        name="io-prefix-file",
    )
    p.rect(
        x="prefix",
        y="path",
        width=1,
        height=1,
        source=src,
        fill_color={"field": "bytes", "transform": mapper},
        line_color="white",
    )
    p.yaxis.major_label_overrides = {f: (f if len(f) <= 50 else "..." + f[-47:]) for f in files}
    p.xaxis.major_label_orientation = 0.9 if len(prefixes) > 4 else 0
    p.hover.tooltips = [
        ("prefix", "@prefix"),
        ("file", "@path"),
        ("tasks", "@tasks{0,0}"),
        ("bytes", "@bytes{0,0}"),
    ]
    p.add_layout(ColorBar(color_mapper=mapper, width=8, title="bytes"), "right")
    return p


def _scale_colors(values: np.ndarray, log: bool) -> list[str]:
    v = np.asarray(values, dtype="float64")
    ok = np.isfinite(v)
    out = np.full(len(v), "#bbbbbb", dtype=object)
    if ok.any():
        x = np.log10(np.maximum(v[ok], 1e-9)) if log else v[ok]
        lo, hi = x.min(), x.max()
        t = (x - lo) / (hi - lo) if hi > lo else np.zeros(len(x))
        out[ok] = np.asarray(Viridis256, dtype=object)[(t * 255).astype(int)]
    return out.tolist()


def task_graph(view: RunView, colors: list[str]) -> Any:
    """The dependency graph (layered), colour chosen in a menu, the critical path in red."""
    g = view.graph
    nodes: pd.DataFrame = g["nodes"]
    if not len(nodes):
        return None
    src_i, dst_i = g["src"], g["dst"]
    x, y = nodes["x"].to_numpy(), nodes["y"].to_numpy()
    if g["level"] == "task":
        path = np.asarray(g["critical"], dtype=np.int64)
    else:
        path = np.asarray(g["critical_prefix_path"], dtype=np.int64)
        path = path[np.r_[True, path[1:] != path[:-1]]] if len(path) else path
    on_path_edge = np.zeros(len(src_i), dtype=bool)
    if len(path) > 1:
        pe = pd.MultiIndex.from_arrays([path[:-1], path[1:]])
        on_path_edge = pd.MultiIndex.from_arrays([src_i, dst_i]).isin(pe)
    node_on_path = np.zeros(len(nodes), dtype=bool)
    node_on_path[path] = True
    workers = sorted(set(nodes["worker"]) - {""})
    wpal = palette(len(workers))[: len(workers)]
    wcol = dict(zip(workers, wpal, strict=True))
    by = {
        "prefix": [colors[i] if i >= 0 else "#bbbbbb" for i in nodes["color"].to_numpy()],
        "duration": _scale_colors(nodes["duration"].to_numpy(), log=True),
        "result size": _scale_colors(nodes["nbytes"].to_numpy(), log=True),
        "worker": [wcol.get(w, "#bbbbbb") for w in nodes["worker"]]
        if g["level"] == "task"
        else ["#bbbbbb"] * len(nodes),
    }
    n = len(nodes)
    data = {
        "x": x,
        "y": y,
        "key": nodes["key"].to_numpy(),
        "prefix": nodes["prefix"].to_numpy(),
        "duration": nodes["duration"].to_numpy(),
        "nbytes": nodes["nbytes"].to_numpy(),
        "worker": nodes["worker"].to_numpy(),
        "fill": by["prefix"],
        "line": np.where(node_on_path, "#d62728", "#444444"),
        "lw": np.where(node_on_path, 3.0, 0.5),
        **{f"c_{k}": v for k, v in by.items()},
    }
    if g["level"] == "prefix":
        data["tasks"] = nodes["tasks"].to_numpy()
        size = 8 + 22 * np.sqrt(nodes["tasks"].to_numpy() / max(nodes["tasks"].max(), 1))
    else:
        size = np.full(n, 12.0 if n < 300 else 7.0)
    data["size"] = size
    nsrc = ColumnDataSource(data)
    ex0, ey0, ex1, ey1 = x[src_i], y[src_i], x[dst_i], y[dst_i]
    esrc = ColumnDataSource(
        {
            "x0": ex0[~on_path_edge],
            "y0": ey0[~on_path_edge],
            "x1": ex1[~on_path_edge],
            "y1": ey1[~on_path_edge],
        }
    )
    csrc = ColumnDataSource(
        {
            "x0": ex0[on_path_edge],
            "y0": ey0[on_path_edge],
            "x1": ex1[on_path_edge],
            "y1": ey1[on_path_edge],
        }
    )
    height = int(min(900, max(300, 14 * (np.abs(y).max() * 2 + 2)))) if n else 300
    p = figure(
        sizing_mode="stretch_width",
        height=height,
        tools="pan,wheel_zoom,box_zoom,reset,save,tap",
        active_scroll="wheel_zoom",
        title=(
            "task graph, one node per task; dependencies left to right"
            if g["level"] == "task"
            else "task graph, one node per prefix (size: tasks); "
            + "each prefix in the layer of its first task"
        )
        + "; critical path in red",
        name="task-graph",
    )
    p.axis.visible = False
    p.grid.grid_line_color = None
    p.segment(
        x0="x0",
        y0="y0",
        x1="x1",
        y1="y1",
        source=esrc,
        line_color="#999999",
        line_alpha=0.5 if n < 500 else 0.25,
    )
    p.segment(x0="x0", y0="y0", x1="x1", y1="y1", source=csrc, line_color="#d62728", line_width=3)
    r = p.scatter(
        x="x",
        y="y",
        size="size",
        source=nsrc,
        fill_color="fill",
        line_color="line",
        line_width="lw",
    )
    tips = [
        ("key", "@key"),
        ("prefix", "@prefix"),
        ("compute", "@duration{0.000000} s"),
        ("result bytes", "@nbytes{0,0}"),
    ]
    tips += [("tasks", "@tasks{0,0}")] if g["level"] == "prefix" else [("worker", "@worker")]
    p.add_tools(HoverTool(renderers=[r], tooltips=tips))
    options = ["prefix", "duration", "result size"] + (["worker"] if g["level"] == "task" else [])
    sel = Select(title="colour by", value="prefix", options=options, width=200, name="graph-colour")
    sel.js_on_change(
        "value",
        CustomJS(
            args={"src": nsrc},
            code="src.data.fill = src.data['c_' + cb_obj.value]; src.change.emit();",
        ),
    )
    return column(sel, p, sizing_mode="stretch_width", name="task-graph-layout")


def compare_prefixes(table: pd.DataFrame, runs: list[str], max_prefixes: int = 30) -> Any:
    """Grouped bars: compute seconds of each prefix in each run (runs numbered as in the table)."""
    from bokeh.models import FactorRange, Legend, LegendItem

    tot = table.groupby("prefix")["compute_s"].sum()
    tot = tot[tot > 0].sort_values(ascending=False).head(max_prefixes)
    if not len(tot):
        return None
    prefixes = sorted(tot.index)
    numbers = [str(i + 1) for i in range(len(runs))]
    idx = table.set_index(["prefix", "run"])["compute_s"]
    pal = palette(len(runs))[: len(runs)]
    p = figure(
        x_range=FactorRange(*[(pr, n) for pr in prefixes for n in numbers]),
        height=420,
        sizing_mode="stretch_width",
        tools="hover,xpan,xwheel_zoom,reset,save",
        title="compute seconds per prefix in each run (bars numbered by run)",
        name="compare-prefixes",
    )
    items = []
    for i, (n, run) in enumerate(zip(numbers, runs, strict=True)):
        src = ColumnDataSource(
            {
                "x": [(pr, n) for pr in prefixes],
                "v": [float(idx.get((pr, run), 0.0)) for pr in prefixes],
                "run": [run] * len(prefixes),
            }
        )
        r = p.vbar(x="x", top="v", width=0.9, source=src, fill_color=pal[i], line_color=None)
        items.append(LegendItem(label=run, renderers=[r]))
    p.add_layout(Legend(items=items), "right")
    p.xaxis.group_label_orientation = 1.2
    p.xaxis.major_label_text_font_size = "7pt"
    p.hover.tooltips = [("prefix, run", "@x"), ("run", "@run"), ("compute", "@v{0.000} s")]
    return p


def store_runs(runs: pd.DataFrame) -> Any:
    """Side by side, one bar per run: its span (seconds), and its tasks and task executions."""
    from bokeh.models import FactorRange

    if not len(runs):
        return None
    labels = runs["label"].tolist()
    y = FactorRange(*labels[::-1])
    height = 80 + 24 * len(labels)
    data = {
        "run": labels,
        "run_id": runs["run_id"].tolist(),
        "seconds": runs["seconds"].to_numpy(dtype="float64", na_value=np.nan),
        "tasks": runs["tasks"].to_numpy(dtype="float64", na_value=np.nan),
        "executions": runs["executions"].to_numpy(dtype="float64", na_value=np.nan),
        "workers": runs["workers"].to_numpy(dtype="float64", na_value=np.nan),
    }
    src = ColumnDataSource(data)
    tips = [
        ("run", "@run (@run_id)"),
        ("span", "@seconds{0.000} s"),
        ("tasks / executions", "@tasks{0,0} / @executions{0,0}"),
        ("workers", "@workers{0,0}"),
    ]

    def bars(field: str, title: str, label: str, name: str, color: str) -> Any:
        p = figure(
            y_range=y,
            height=height,
            width=520,
            tools="hover,xwheel_zoom,reset,save",
            title=title,
            x_axis_label=label,
            name=name,
        )
        p.hbar(y="run", right=field, height=0.7, source=src, fill_color=color, line_color=None)
        p.hover.tooltips = tips
        return p

    span = bars("seconds", "span of each run (s)", "seconds", "store-spans", _BASE[0])
    count = bars(
        "tasks",
        "tasks (bar) and task executions (line) of each run",
        "count",
        "store-tasks",
        _BASE[2],
    )
    count.scatter(x="executions", y="run", source=src, marker="dash", size=18, color="black")
    for p in (span, count):
        p.x_range.start = 0
        p.ygrid.grid_line_color = None
    return row(span, count, name="store-runs")


def campaign_runs(c: Any) -> Any:
    """One bar per run of a :class:`metaprov.compare.Comparison`: its difference from the
    baseline, outliers in red."""
    from bokeh.models import FactorRange

    t = c.runs
    src = ColumnDataSource(
        {
            "run": t["run"].tolist(),
            "d": t["difference_s"].astype(float).tolist(),
            "color": np.where(t["outlier"], "#d62728", "#1f77b4").tolist(),
            "top": [x if isinstance(x, str) else "" for x in t["top_cause"]],
        }
    )
    p = figure(
        x_range=FactorRange(*t["run"].tolist()),
        height=320,
        sizing_mode="stretch_width",
        tools="hover,save,reset",
        title=f"makespan minus the baseline's ({c.baseline}); outliers in red",
        name="compare-campaign",
    )
    p.vbar(x="run", top="d", width=0.8, color="color", source=src)
    p.xaxis.major_label_orientation = 1.0
    p.hover.tooltips = [("run", "@run"), ("difference", "@d{+0.000} s"), ("top cause", "@top")]
    return p
