"""Teacher cache entries for the tests and `benchmarks/teacher_read.py`: the layout spanlift wrote
before the Arrow file (still on users' disks), and a reader in a fresh process that reports how
its memory grew.

Run as a script, this file is that reader: `python tests/teacher_entries.py ENTRY` reads the
entry, touches every value, prints one JSON line of growth since before the read (and the read's
seconds), waits for a line on stdin, prints the growth again and holds the entry until stdin
closes (so that several readers can be measured while all of them hold it). Growth is in bytes:
`rss` now, `peak` (the highest RSS, VmHWM) and `private` (pages no other process maps: USS,
Private_Clean + Private_Dirty of smaps_rollup).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from spanlift.files import file_sha256
from spanlift.platform.sampling.teacher import FORMAT, OPTIONAL, TeacherSet

ROOT = Path(__file__).resolve().parent.parent


def write_parquet_entry(folder: Path, teacher: TeacherSet, rows: int = 1024) -> Path:
    """`teacher` in the Parquet layout: shards `part-NNNNN.parquet` of `rows` rows (FixedSizeList
    float32 columns, an int64 `seed`) and a manifest with each shard's SHA-256, no `layout`."""
    folder.mkdir(parents=True)
    files = {}
    for n, start in enumerate(range(0, len(teacher), rows)):
        part = teacher.subset(slice(start, start + rows))
        path = folder / f"part-{n:05d}.parquet"
        pq.write_table(pa.table(parquet_columns(part)), path)
        files[path.name] = file_sha256(path)
    present = [name for name in OPTIONAL if getattr(teacher, name) is not None]
    manifest = {
        "format": FORMAT,
        "key": teacher.key,
        "count": len(teacher),
        "shape": list(teacher.noise.shape[1:]),
        "shapes": {name: list(getattr(teacher, name).shape[1:]) for name in present},
        "files": files,
        "state_sigmas": list(teacher.state_sigmas),
        "teacher": teacher.teacher.to_dict(),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return folder


def parquet_columns(part: TeacherSet) -> dict[str, pa.Array]:
    def column(values) -> pa.Array:
        flat = values.reshape(len(values), -1).numpy().astype(np.float32)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel()), flat.shape[1])

    tensors = {"noise": part.noise, "endpoint": part.endpoints}
    tensors.update({name: getattr(part, name) for name in OPTIONAL})
    columns = {"seed": pa.array(part.seeds.numpy())}
    columns.update({name: column(t) for name, t in tensors.items() if t is not None})
    return columns


def start_reader(folder: Path) -> subprocess.Popen:
    """This file as a script reading `folder` in a fresh process (see the module docstring)."""
    return subprocess.Popen(
        [sys.executable, __file__, str(folder)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        },
    )


def first_report(reader: subprocess.Popen) -> dict:
    """The reader's growth once it has read and touched the entry."""
    line = reader.stdout.readline()
    if not line:
        raise RuntimeError("the reader stopped before reporting")
    return json.loads(line)


def measure_again(reader: subprocess.Popen) -> dict:
    """The reader's growth now; it keeps the entry until `stop`."""
    reader.stdin.write("measure\n")
    reader.stdin.flush()
    return json.loads(reader.stdout.readline())


def stop(reader: subprocess.Popen) -> None:
    """Let the reader exit (stdin closed); its error output if it failed."""
    _, err = reader.communicate(timeout=120)
    if reader.returncode:
        raise RuntimeError(f"the reader failed:\n{err}")


def read_in_fresh_process(folder: Path) -> dict:
    """`{"read": growth, "touched": growth, "seconds": of the read}` of one reader of `folder`."""
    reader = start_reader(folder)
    try:
        return first_report(reader)
    finally:
        stop(reader)


def read_together(folder: Path, count: int = 2) -> list[dict]:
    """The growth of each of `count` readers of `folder`, measured while all of them hold it."""
    readers = [start_reader(folder) for _ in range(count)]
    try:
        for reader in readers:
            first_report(reader)
        return [measure_again(reader) for reader in readers]
    finally:
        for reader in readers:
            stop(reader)


def status_bytes(field: str) -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(f"{field}:"))
    return int(line.split()[1]) * 1024


def private_bytes() -> int:
    with open("/proc/self/smaps_rollup") as rollup:
        fields = [line.split() for line in rollup]
    return sum(int(f[1]) * 1024 for f in fields if f[0] in ("Private_Clean:", "Private_Dirty:"))


def growth(base: dict[str, int]) -> dict[str, int]:
    return {
        "rss": status_bytes("VmRSS") - base["rss"],
        "peak": status_bytes("VmHWM") - base["rss"],
        "private": private_bytes() - base["private"],
    }


def main(folder: Path) -> None:
    from spanlift.platform.sampling.teacher import read_teacher

    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # VmHWM restarts from the current RSS
    base = {"rss": status_bytes("VmRSS"), "private": private_bytes()}
    start = time.perf_counter()
    teacher = read_teacher(folder)
    seconds, read = time.perf_counter() - start, growth(base)
    for name in ("seeds", "noise", "endpoints", *OPTIONAL):
        values = getattr(teacher, name)
        if values is not None:
            values.sum()  # reads every value
    report = {"read": read, "touched": growth(base), "seconds": seconds}
    print(json.dumps(report), flush=True)
    sys.stdin.readline()
    print(json.dumps(growth(base)), flush=True)
    sys.stdin.readline()  # the entry stays mapped until the parent closes stdin


if __name__ == "__main__":
    main(Path(sys.argv[1]))
