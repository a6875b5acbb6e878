"""Tiny run directories written by the tests themselves (no file from ../shared is copied)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

SCHED_HEADER = ",key,thread,worker,prefix,group,start,finish,stimulus_id,called_from,begins,ends,duration,size,time\n"
WORKER_HEADER = ",key,start,finish,called_from,time\n"
TRANSFER_HEADER = (
    ",start,stop,middle,duration,keys,total,bandwidth,who,type,called_from,time,compressed\n"
)
GRAPH_HEADER = ",client,keys,dependencies,time\n"

S = "tcp://127.0.0.1:8786"
W1 = "tcp://127.0.0.1:40001"
W2 = "tcp://127.0.0.1:40002"
C = "Client-aaaa"
T1 = 140000000000001
T2 = 18446744073709551615  # the largest pthread id: must survive exactly

A = "inc-1111"
B = "('sum-2222', 0)"


def tiny_files() -> dict[str, str]:
    """A 2-task run: A on worker 1, B on worker 2 depends on A (moved by a transfer)."""
    sched = SCHED_HEADER + "".join(
        [
            f"0,{A},,,inc,inc,released,waiting,update-graph-1,{S},,,,,1700000000.0\n",
            f"1,{A},,,inc,inc,waiting,processing,update-graph-1,{S},,,,,1700000000.1\n",
            f'2,"{B}",,,sum,sum-2222,released,waiting,update-graph-1,{S},,,,,1700000000.2\n',
            f"3,{A},{T1},{W1},inc,inc,processing,memory,task-finished-2,{S},1700000000.5,1700000001.5,1.0,28,1700000001.6\n",
            f'4,"{B}",,,sum,sum-2222,waiting,processing,task-finished-2,{S},,,,,1700000001.7\n',
            f'5,"{B}",{T2},{W2},sum,sum-2222,processing,memory,task-finished-3,{S},1700000001.8,1700000001.9,0.1,32,1700000002.5\n',
        ]
    )
    worker = WORKER_HEADER + "".join(
        [
            f"0,{A},released,waiting,{W1},1700000000.3\n",
            f"1,{A},waiting,ready,{W1},1700000000.4\n",
            f"2,{A},ready,executing,{W1},1700000000.5\n",
            f"3,{A},executing,memory,{W1},1700000001.5\n",
            f'4,"{B}",released,waiting,{W2},1700000001.75\n',
            f"5,{A},released,fetch,{W2},1700000001.76\n",
            f"6,{A},fetch,flight,{W2},1700000001.77\n",
            f"7,{A},flight,memory,{W2},1700000001.79\n",
            f'8,"{B}",waiting,ready,{W2},1700000001.8\n',
            f'9,"{B}",ready,executing,{W2},1700000002.0\n',
            f'10,"{B}",executing,memory,{W2},1700000002.4\n',
        ]
    )
    transfer = TRANSFER_HEADER + "".join(
        [
            f"0,1700000001.77,1700000001.79,1700000001.78,0.02,{{'{A}': 28}},28,1400.0,{W1},incoming_transfer,{W2},1700000001.80,\n",
            f"1,1700000001.77,1700000001.79,1700000001.78,0.02,{{'{A}': 28}},28,1400.0,{W1},incoming_transfer,{W2},1700000001.95,\n",
            f"2,1700000001.771,1700000001.785,1700000001.78,0.014,{{'{A}': 28}},28,2000.0,{W2},outgoing_transfer,{W1},1700000001.81,40.0\n",
        ]
    )
    graph = GRAPH_HEADER + csv_row(
        [
            0,
            C,
            "{" + B + "}",
            "{" + repr(A) + ": set(), " + B + ": {" + repr(A) + "}}",
            1700000000.0,
        ]
    )
    return {
        "scheduler_transition.csv": sched,
        "worker_transition.csv": worker,
        "worker_transfer.csv": transfer,
        "graph.csv": graph,
        "worker.csv": f",worker,action,stimulus_id,time\n0,{W1},add,,1699999999.0\n1,{W2},add,,1699999999.1\n",
        "client.csv": f",client,action,time\n0,{C},add,1699999999.5\n1,{C},remove,1700000003.0\n",
    }


def csv_row(values: list) -> str:
    """One CSV line quoted as pandas.to_csv writes it."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(values)
    return buf.getvalue()


def write_run(path: Path, files: dict[str, str | bytes]) -> Path:
    """Write ``files`` (name -> text or bytes) into a new run directory ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        p = path / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
    return path


def _shared_head() -> Path | None:
    import os

    repo = Path(__file__).resolve().parents[1]
    shared = Path(os.environ.get("METAPROV_SHARED", repo.parent / "shared"))
    found = sorted((shared / "data" / "xpdamoda").glob("*/*/scheduler_transition.head.csv"))
    return found[0] if found else None


SHARED_HEAD = _shared_head()
