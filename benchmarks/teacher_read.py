"""Memory of reading one teacher cache entry: the mapped Arrow file against the Parquet shards.

An entry of N seeds of shape C×H×W (random noise and endpoints; default 5 000 ImageNet-64
samples, 492 MB) is written in both layouts: the Arrow file spanlift writes now, and the Parquet
shards of 1 024 rows it wrote before (which it still reads). For each layout, per repeat, a fresh
process runs `read_teacher` and then reads every value (`tests/teacher_entries.py`); printed, as
ratios to the data:

- read: the resident set's peak growth during `read_teacher` (the checksum included);
- touched: its peak growth once every value has been read (RSS counts mapped file pages);
- private, 2 readers: what each of two processes holding the entry at once owns alone (USS),
  the larger of the two; pages they share are the page cache's, held once per node;

and the seconds of `read_teacher`, median and range over `--repeats`.

    python benchmarks/teacher_read.py [--samples 5000] [--shape 3 64 64] [--repeats 3]
"""

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the reader and the Parquet layout are the tests' own

from spanlift.platform.sampling.teacher import TeacherSet, write_teacher  # noqa: E402
from tests.teacher_entries import (  # noqa: E402
    read_in_fresh_process,
    read_together,
    write_parquet_entry,
)

LAYOUTS: dict[str, Callable[[Path, TeacherSet], Path]] = {
    "Parquet shards": lambda folder, teacher: write_parquet_entry(folder, teacher),
    "Arrow file": lambda folder, teacher: write_teacher(folder, teacher, {}),
}


def random_entry(samples: int, shape: tuple[int, ...]) -> TeacherSet:
    generator = torch.Generator().manual_seed(0)
    noise, endpoints = (torch.randn(samples, *shape, generator=generator) for _ in range(2))
    return TeacherSet(torch.arange(samples), noise, endpoints, "benchmark")


def spread(values: list[float], unit: str) -> str:
    """Median and range."""
    return f"{statistics.median(values):.2f}{unit} ({min(values):.2f}–{max(values):.2f})"


def measure(folder: Path, data: int, repeats: int) -> dict[str, str]:
    reports = [read_in_fresh_process(folder) for _ in range(repeats)]
    shared = [max(r["private"] for r in read_together(folder, 2)) for _ in range(repeats)]
    return {
        "read": spread([r["read"]["peak"] / data for r in reports], "×"),
        "touched": spread([r["touched"]["peak"] / data for r in reports], "×"),
        "private, 2 readers": spread([s / data for s in shared], "×"),
        "read seconds": spread([r["seconds"] for r in reports], " s"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=5000)
    p.add_argument("--shape", type=int, nargs="+", default=[3, 64, 64])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    teacher = random_entry(args.samples, tuple(args.shape))
    data = sum(t.nbytes for t in (teacher.seeds, teacher.noise, teacher.endpoints))
    shape = "×".join(map(str, args.shape))
    print(f"entry: {args.samples} seeds of {shape}, {data / 1e6:.0f} MB of data")
    with tempfile.TemporaryDirectory() as scratch:
        folders = {
            name: write(Path(scratch) / f"teacher-{n}", teacher)
            for n, (name, write) in enumerate(LAYOUTS.items())
        }
        del teacher  # not needed while the readers run
        rows = {name: measure(folder, data, args.repeats) for name, folder in folders.items()}
    columns = list(next(iter(rows.values())))
    width = max(map(len, rows))
    print(f"{'':{width}}  " + "  ".join(f"{c:>22}" for c in columns))
    for name, row in rows.items():
        print(f"{name:{width}}  " + "  ".join(f"{row[c]:>22}" for c in columns))


if __name__ == "__main__":
    main()
