"""Shared helpers of the benchmark scripts: timing, machine description, output.

Timing: every rate is measured with *both* the wall clock and the CPU time of the measuring
thread (``time.thread_time``). On a machine shared with other jobs the wall clock counts time the
process spent waiting for a core; CPU time does not, so CPU-time rates ("per CPU second", i.e.
on one core) are the comparable numbers, and every ratio is taken between rates measured in the
same run, interleaved round by round, as the median over rounds.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Rate:
    """Work units per second over several rounds (wall clock and thread CPU time)."""

    name: str
    units: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, units: float, wall: float, cpu: float) -> None:
        self.units.append(units)
        self.wall.append(wall)
        self.cpu.append(cpu)

    @property
    def per_cpu_second(self) -> float:
        """Median over rounds of units per CPU second of the measuring thread."""
        return statistics.median(u / c for u, c in zip(self.units, self.cpu, strict=True) if c > 0)

    @property
    def per_wall_second(self) -> float:
        return statistics.median(u / w for u, w in zip(self.units, self.wall, strict=True) if w > 0)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "per_cpu_second": self.per_cpu_second,
                "per_wall_second": self.per_wall_second, "rounds": len(self.units)}  # fmt: skip


def measure(fn: Callable[[], float]) -> tuple[float, float, float]:
    """Run ``fn`` (returns the units of work it did); (units, wall seconds, CPU seconds)."""
    c0, w0 = time.thread_time(), time.perf_counter()
    units = fn()
    return units, time.perf_counter() - w0, time.thread_time() - c0


def machine() -> dict[str, Any]:
    """What the numbers were measured on (CPU, load, versions)."""
    import gymnasium
    import numba
    import numpy

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_average_1_5_15": [round(x, 2) for x in load],
        "python": sys.version.split()[0],
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "gymnasium": gymnasium.__version__,
    }


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table."""

    def fmt(x: Any) -> str:
        if isinstance(x, float):
            return f"{x:,.3g}" if abs(x) < 100 else f"{x:,.0f}"
        return str(x)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(payload, indent=2, default=float) + "\n")


def command_line() -> str:
    """The command that produced the output (printed with the results), in its ``-m`` form."""
    return " ".join(["python -m benchmarks." + Path(sys.argv[0]).stem, *sys.argv[1:]])


def print_header(name: str) -> None:
    """The first lines of every benchmark's printout: its name and command, then the machine."""
    print(f"# {name} ({command_line()})\n")
    print(f"machine: {machine()}\n")


def report(
    name: str,
    headers: list[str],
    rows: list[list[Any]],
    runs: Any,
    json_path: str | None,
    t0: float,
) -> dict[str, Any]:
    """Print a benchmark's result (its command, the machine, a Markdown table of ``rows``, the
    time since ``t0``), write it as JSON to ``json_path`` when given, and return it."""
    print_header(name)
    print(table(headers, rows))
    print(f"\n(took {time.perf_counter() - t0:.0f} s)")
    result = {"command": command_line(), "machine": machine(), "runs": runs}
    write_json(json_path, result)
    return result
