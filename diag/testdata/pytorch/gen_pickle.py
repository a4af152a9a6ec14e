#!/usr/bin/env python3
"""Writes the pickle-py2/ and pickle-py5/ fixtures: one 3-rank job's
flight-recorder dumps, pickled by Python's own pickle module at protocol 2
(pickle-py2/, what PyTorch's protocol matches) and at protocol 5
(pickle-py5/: FRAME, SHORT_BINUNICODE, MEMOIZE, ...).

The dicts follow PyTorch's FlightRecorder::dump_dict, version "2.10": the
stack frames are dicts shared between entries (pickle memoizes them, and a
repeated one is a BINGET), process_group is a tuple, a time the recorder did
not see is None. Seqs 1 (broadcast) and 2 (all_reduce) agree; at seq 3 ranks
0 and 1 enter all_reduce of [4096, 1024] BFloat16 and rank 2 of [4096, 512]:
a size mismatch, every seq 3 entry started, none completed.

Run from this directory: python3 gen_pickle.py (the tests do not need it).
"""

import os
import pickle

C10D = "/usr/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py"
LOGGER = "/usr/lib/python3.12/site-packages/torch/distributed/c10d_logger.py"


def frame(name, filename, line):
    return {"name": name, "filename": filename, "line": line}


BROADCAST = frame("broadcast", C10D, 2422)
ALL_REDUCE = frame("all_reduce", C10D, 2806)
WRAPPER = frame("wrapper", LOGGER, 81)
SETUP = frame("setup", "/workspace/job/train.py", 30)
FORWARD = frame("forward", "/workspace/job/model/layers.py", 88)
STEP = frame("train_step", "/workspace/job/train.py", 57)
MODULE = frame("<module>", "/workspace/job/train.py", 99)

PG = ("0", "default_pg")
T0 = 1731402113000000000


def entry(rank, i, seq, name, sizes, dtype, state, frames):
    created = T0 + seq * 250_000_000 + rank * 91_000
    e = {
        "frames": frames,
        "record_id": i,
        "pg_id": 0,
        "process_group": PG,
        "thread_name": "pt_main_thread",
        "thread_id": str(139871544207168 + rank),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": "nccl:" + name,
        "time_created_ns": created,
    }
    if state == "completed":
        e["duration_ms"] = 0.375
    e.update({
        "input_sizes": [sizes],
        "input_dtypes": [dtype],
        "output_sizes": [sizes],
        "output_dtypes": [dtype],
        "state": state,
        "time_discovered_started_ns": created + 52_000 if state != "scheduled" else None,
        "time_discovered_completed_ns": created + 907_000 if state == "completed" else None,
        "retired": state == "completed",
        "timeout_ms": 600000,
        "is_p2p": False,
    })
    return e


def dump(rank):
    last = [4096, 1024] if rank < 2 else [4096, 512]
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}},
        "comm_lib_version": "2.21.5",
        "pg_status": {"0": {"last_enqueued_collective": 3, "last_started_collective": 3, "last_completed_collective": 2}},
        "entries": [
            entry(rank, 0, 1, "broadcast", [256], "Float", "completed", [BROADCAST, WRAPPER, SETUP, MODULE]),
            entry(rank, 1, 2, "all_reduce", [4096], "BFloat16", "completed", [ALL_REDUCE, WRAPPER, STEP, MODULE]),
            entry(rank, 2, 3, "all_reduce", last, "BFloat16", "started", [ALL_REDUCE, WRAPPER, FORWARD, STEP, MODULE]),
        ],
        "nccl_comm_state": {"0x7f3a": {"commId": "0x7f3a", "rank": str(rank), "nRanks": "3"}},
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for protocol in (2, 5):
        out = os.path.join(here, "pickle-py%d" % protocol)
        os.makedirs(out, exist_ok=True)
        for rank in range(3):
            with open(os.path.join(out, "nccl_trace_rank_%d" % rank), "wb") as f:
                pickle.dump(dump(rank), f, protocol=protocol)


if __name__ == "__main__":
    main()
