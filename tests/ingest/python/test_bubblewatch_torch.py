"""Tests of ingest/python/bubblewatch_torch.

The naming and schedule tests are pure Python and always run. The profiler
test needs torch: it runs a tiny CPU-only loop where torch is importable
and is skipped (with the reason) elsewhere.
"""

import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import bubblewatch_torch as bt
from bubblewatch_torch import schedule as duty

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

# The watcher's default pattern as written in ingest/watch/job_name_pattern.h
# (C++ spelling, (?<name>...)), read from the header so that the two cannot
# drift apart.
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                    "..")
HEADER = os.path.join(ROOT, "ingest", "watch", "job_name_pattern.h")


def watcher_default_pattern():
    with open(HEADER) as f:
        text = f.read()
    m = re.search(r'kDefaultJobNamePattern\[\] =\s*R"\((.*?)\)";', text,
                  re.S)
    assert m, "kDefaultJobNamePattern not found in " + HEADER
    return m.group(1).replace("(?<", "(?P<")


class NamingTest(unittest.TestCase):

    def test_names_match_the_watchers_default_pattern(self):
        pattern = re.compile(watcher_default_pattern())
        self.assertEqual(pattern.pattern, bt.DEFAULT_JOB_PATTERN)
        for job, rank in [("llama-7b", 0), ("run_42", 17), ("a.b/c d", 3)]:
            name = bt.trace_file_name(job, rank, when_ms=1732943012345)
            m = pattern.search(name)
            self.assertIsNotNone(m, name)
            self.assertEqual(m.group("job"), bt.sanitize_job(job))
            self.assertEqual(int(m.group("rank")), rank)
            self.assertTrue(name.endswith(".pt.trace.json.gz"), name)

    def test_sanitize_job(self):
        self.assertEqual(bt.sanitize_job("a.b/c d"), "a-b-c-d")
        self.assertEqual(bt.sanitize_job("ok_name-1"), "ok_name-1")
        with self.assertRaises(ValueError):
            bt.sanitize_job("...")
        with self.assertRaises(ValueError):
            bt.trace_file_name("job", -1)

    def test_detect_job_and_rank_from_the_environment(self):
        self.assertEqual(bt.detect_job({"SLURM_JOB_ID": "991"}), "991")
        self.assertEqual(
            bt.detect_job({"BUBBLEWATCH_JOB": "x", "SLURM_JOB_ID": "1"}), "x")
        self.assertIsNone(bt.detect_job({"TORCHELASTIC_RUN_ID": "none"}))
        self.assertEqual(bt.detect_rank({"RANK": "5"}), 5)
        self.assertEqual(bt.detect_rank({"SLURM_PROCID": "2"}), 2)
        self.assertEqual(bt.detect_rank({}), 0)


class ScheduleTest(unittest.TestCase):

    def test_default_overhead_is_under_one_percent(self):
        # The module doc's arithmetic: ((1*0.1 + 2*0.5)*0.5 + 2) / 500.
        self.assertAlmostEqual(bt.overhead_fraction(), 2.55 / 500)
        self.assertLess(bt.overhead_fraction(), 0.01)
        # Longer steps only make it cheaper.
        self.assertLess(bt.overhead_fraction(step_seconds=2.0),
                        bt.overhead_fraction(step_seconds=0.5))

    def test_short_steps_need_a_longer_cycle(self):
        fast = 0.1  # s per step: the 2 s export dominates.
        self.assertGreater(bt.overhead_fraction(step_seconds=fast), 0.01)
        longer = bt.DutyCycle(skip_first=20, warmup_steps=1, active_steps=2,
                              cycle_steps=5000)
        self.assertLess(bt.overhead_fraction(longer, step_seconds=fast), 0.01)

    def test_profiled_steps_follow_the_torch_schedule(self):
        cycle = bt.DutyCycle(skip_first=2, warmup_steps=1, active_steps=2,
                             cycle_steps=5)
        self.assertEqual(duty.wait_steps(cycle), 2)
        # Steps 2,3 wait, 4 warms up, 5,6 record; 7,8 wait, 9 warm, 10,11.
        self.assertEqual(duty.profiled_steps(cycle, 12), [5, 6, 10, 11])
        d = bt.DEFAULT_DUTY_CYCLE
        steps = duty.profiled_steps(d, 3020)
        self.assertEqual(len(steps), 3 * d.active_steps)

    def test_rejects_impossible_cycles(self):
        with self.assertRaises(ValueError):
            duty.wait_steps(bt.DutyCycle(0, 1, 0, 10))
        with self.assertRaises(ValueError):
            duty.wait_steps(bt.DutyCycle(0, 5, 6, 10))


def project_version():
    """project(bubblewatch VERSION x.y.z) in the top-level CMakeLists.txt."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(bubblewatch\s+VERSION\s+([0-9.]+)", f.read())
    assert m, "project(bubblewatch VERSION ...) not found in CMakeLists.txt"
    return m.group(1)


class PackageTest(unittest.TestCase):

    def test_version_is_the_projects(self):
        # pyproject.toml takes the version from _version.py; CMakeLists.txt
        # is where a release changes it.
        self.assertEqual(bt.__version__, project_version())

    def test_importing_the_package_does_not_import_torch(self):
        # In a child: this process may have imported torch already.
        code = ("import sys, bubblewatch_torch; "
                "print(sorted(m for m in sys.modules if m == 'torch' "
                "or m.startswith('torch.')))")
        out = subprocess.run([sys.executable, "-c", code], check=True,
                             capture_output=True, text=True).stdout
        self.assertEqual(out.strip(), "[]")

    def test_profile_without_torch_says_what_to_install(self):
        # None in sys.modules makes `import torch` fail as it does where torch
        # is not installed (ModuleNotFoundError, name 'torch'), also here
        # where it may be.
        with tempfile.TemporaryDirectory() as d, \
                mock.patch.dict(sys.modules, {"torch": None,
                                              "torch.profiler": None}):
            trace_dir = os.path.join(d, "traces")
            with self.assertRaises(ImportError) as cm:
                bt.profile(trace_dir, job="j")
            self.assertFalse(os.path.exists(trace_dir))
        e = cm.exception
        self.assertIsInstance(e, bt.TorchNotInstalledError)
        self.assertNotIsInstance(e, ModuleNotFoundError)
        self.assertEqual(e.name, "torch")
        self.assertIn("needs PyTorch", str(e))
        self.assertIn("-m pip install torch", str(e))
        # One error: torch's ModuleNotFoundError is not chained before it.
        self.assertTrue(e.__suppress_context__)
        self.assertIsNone(e.__cause__)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed here: the profiler "
                     "test runs where it is (pip install torch)")
class TorchProfilerTest(unittest.TestCase):

    def test_a_tiny_cpu_loop_writes_named_gzipped_traces(self):
        import torch
        from torch.profiler import ProfilerActivity
        cycle = bt.DutyCycle(skip_first=1, warmup_steps=1, active_steps=2,
                             cycle_steps=5)
        with tempfile.TemporaryDirectory() as d:
            model = torch.nn.Linear(64, 64)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            with bt.profile(d, job="unit-test", rank=3, cycle=cycle,
                            activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(11):  # Two full cycles after the skip.
                    loss = model(torch.randn(8, 64)).sum()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    prof.step()
            names = sorted(os.listdir(d))
            self.assertEqual(len(names), 2, names)  # No temporaries left.
            pattern = re.compile(bt.DEFAULT_JOB_PATTERN)
            for name in names:
                m = pattern.search(name)
                self.assertEqual((m.group("job"), m.group("rank")),
                                 ("unit-test", "3"))
                with gzip.open(os.path.join(d, name), "rt") as f:
                    trace = json.load(f)
                self.assertTrue(trace["traceEvents"], name)


if __name__ == "__main__":
    unittest.main()
