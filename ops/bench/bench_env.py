"""What both bench harnesses (perf/perf.py, compare/compare.py) record about where and when
they ran: the machine, the git state of the tree its binaries were built from, UTC times.
Python standard library only; imported by path (each harness puts ops/bench/ on sys.path)."""
import datetime
import os
import platform
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def machine():
    """CPU model, cores, memory (GiB, one decimal), kernel, OS and Python version."""
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            mem_gib = int(f.readline().split()[1]) / 1048576
    except (OSError, ValueError, IndexError):
        pass
    os_name = platform.platform()
    try:
        with open("/etc/os-release") as f:
            osr = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
        os_name = osr.get("PRETTY_NAME", os_name).strip('"')
    except OSError:
        pass
    return {"cpu_model": cpu, "cores": os.cpu_count(),
            "mem_gib": round(mem_gib, 1) if mem_gib else None,
            "kernel": platform.release(), "os": os_name,
            "python": platform.python_version()}


def git_state():
    """HEAD's commit and whether tracked files differ from it (the benchmarks run the
    binaries in build/, built from the tracked tree: untracked files do not count)."""
    def git(*args):
        p = subprocess.run(["git", "-C", ROOT] + list(args), capture_output=True, text=True)
        return p.stdout.strip() if p.returncode == 0 else None
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "short": commit[:7] if commit else None,
            "dirty": bool(status) if status is not None else None}


def utc_now():
    """Now, UTC, to the second."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def iso(t):
    """'2026-12-01T18:43:10Z'."""
    return t.isoformat().replace("+00:00", "Z")
