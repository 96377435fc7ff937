"""ops/bench/readme: the measured tables of docs/performance.md and docs/comparison.md are the
rendering of the results files.

Renders from small results files written here (never from the committed ones, so these tests
do not change when the benchmarks are rerun) and checks that a changed value changes the
block, that a missing or --quick suite renders as "not measured" rather than a number, and
that --check fails on a hand-edited block and passes on a rendered one, in one page or with
the blocks split over two pages as in docs/.
"""
import copy
import importlib.machinery
import importlib.util
import io
import json
import os
import contextlib
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def load_readme_module():
    path = os.path.join(ROOT, "ops", "bench", "readme")
    loader = importlib.machinery.SourceFileLoader("bench_readme", path)
    spec = importlib.util.spec_from_loader("bench_readme", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


R = load_readme_module()

MACHINE = {"cpu_model": "Intel(R) Xeon(R) Processor", "cores": 2, "mem_gib": 23.5,
           "kernel": "6.1.0", "os": "Debian GNU/Linux 12 (bookworm)", "python": "3.11.2"}
GIT = {"commit": "0123456789abcdef0123456789abcdef01234567", "short": "0123456", "dirty": False}


def analyzer_suite(value):
    cmd = "build/ops/bench/analyzer_benchmark --benchmark_filter=AnalyzeTrace/10000000"
    fig = {"what": "analyzer, 10 M events", "value": value, "unit": "events/s",
           "target": {"op": ">=", "value": 20e6, "text": "≥ 20 M events/s per core",
                      "source": "project target"},
           "met": value >= 20e6, "detail": "3 repetition(s)", "command": cmd,
           "date": "2026-12-01T10:00:00Z"}
    return {"suite": "analyzer", "quick": False, "status": "ok",
            "started": "2026-12-01T09:59:00Z", "finished": "2026-12-01T10:00:00Z",
            "load_before": 0.1, "load_after": 0.9, "machine": MACHINE, "git": GIT,
            "commands": [cmd], "figures": {"analyzer_10m_events_per_s": fig}}


def perf_doc(value=16.3e6, **suites):
    doc = {"schema": 1, "suites": {"analyzer": analyzer_suite(value)}}
    doc["suites"].update(suites)
    return doc


def compare_doc():
    return {
        "date": "2026-12-01", "started": "2026-12-01T11:00:00Z",
        "finished": "2026-12-01T11:02:00Z", "command": "BW_COMPARE_SCALE_MB=0 ops/bench/compare/run",
        "machine": {"cpus": 2, "mem_gib": 23.5, "os": "Debian GNU/Linux 12 (bookworm)",
                    "cpu_model": "Intel(R) Xeon(R) Processor", "kernel": "6.1.0"},
        "git": GIT, "versions": {"hta": "0.5.0", "pandas": "3.1.1", "python": "3.11.7"},
        "settings": {"repeat": 3, "scale_mb": 0, "hta_max_mb": 256, "diag": False, "only": None},
        "load": {"min": 0.3, "max": 0.8, "mean": 0.6},
        "agreement": [{"trace": "seed_sample.json", "kind": "timeline", "flags": [],
                       "span_us": 130, "busy_us": 45, "bubble_us": 85, "utilization": 0.346154,
                       "host_side_us": 85, "gpu_dependency_us": 0, "seed": "equal",
                       "hta_idle_us": 85.0, "hta_busy_pct": 34.62, "hta_exact_idle_us": None,
                       "hta_host_wait_us": 0.0, "hta_kernel_wait_other_us": 85.0,
                       "hta_differences": None}],
        "speed": [{"trace": "seed_sample.json", "kind": "timeline", "mb": 0.0, "gunzip_s": None,
                   "bw_s": 0.016, "bw_mib": 16.3, "hta_s": 1.96, "hta_mib": 99.2,
                   "hta_analysis_s": 0.1, "seed_s": 0.04, "seed_mib": 10.7, "hta_x": 122.9,
                   "seed_x": 2.7, "mem": 0.164, "hta_cpu_x": 129.0, "seed_cpu_x": 3.0}],
        "scale": None,
        "targets": [{"on": "rank0.json.gz", "hta_x": 33.3, "seed_x": 7.5, "mem": 0.098,
                     "hta_cpu_x": 38.4, "seed_cpu_x": 8.0, "hta_ok": False, "seed_ok": False,
                     "mem_ok": True}],
        "failures": [],
    }


def perf_lines(block, what_prefix):
    return [line for line in block.splitlines() if line.startswith("| " + what_prefix)]


class RenderPerfTest(unittest.TestCase):
    def test_a_changed_value_gives_a_different_block(self):
        a = R.render_perf(perf_doc(16.3e6))
        b = R.render_perf(perf_doc(17.4e6))
        self.assertNotEqual(a, b)
        self.assertIn("**16.3 M events/s**", a)
        self.assertIn("**17.4 M events/s**", b)

    def test_a_row_carries_its_command_date_machine_and_verdict(self):
        line = perf_lines(R.render_perf(perf_doc(16.3e6)), "analyzer, 10 M events |")[0]
        self.assertIn("`build/ops/bench/analyzer_benchmark --benchmark_filter=AnalyzeTrace/10000000`", line)
        self.assertIn("2026-12-01 10:00 · 0123456", line)
        self.assertIn("2 × Intel Xeon Processor, 23.5 GiB, Debian 12 (bookworm), Linux 6.1.0", line)
        self.assertIn("load 0.1 → 0.9", line)
        self.assertIn("**not met**", line)
        self.assertIn(": met", perf_lines(R.render_perf(perf_doc(21e6)), "analyzer, 10 M")[0])

    def test_a_missing_suite_renders_as_not_measured(self):
        block = R.render_perf(perf_doc())  # no query suite in the file
        lines = [l for l in block.splitlines() if "through the library (`QueryJob`), p99" in l]
        self.assertEqual(len(lines), 1)
        self.assertIn("| not measured |", lines[0])
        self.assertNotRegex(lines[0].split("|")[2], r"\d")  # no number in the figure cell
        self.assertIn("`ops/bench/perf/run --only '^query$'`", lines[0])

    def test_a_missing_results_file_renders_every_figure_as_not_measured(self):
        block = R.render_perf(None)
        figures = [l.split(" | ")[1] for l in block.splitlines()[2:]]
        self.assertEqual(len(figures), len(R.perf.FIGURES))
        self.assertTrue(all(f == "not measured" for f in figures), figures)

    def test_quick_and_failed_suites_are_not_rendered_as_numbers(self):
        quick = analyzer_suite(99e6)
        quick["quick"] = True
        block = R.render_perf({"suites": {"analyzer": quick}})
        self.assertNotIn("99.0 M", block)
        self.assertIn("not measured (only a --quick smoke run)", block)
        failed = analyzer_suite(99e6)
        failed.update(status="failed", error="analyzer_benchmark exited 1", figures={})
        block = R.render_perf({"suites": {"analyzer": failed}})
        self.assertNotIn("99.0 M", block)
        self.assertIn("not measured: failed on 2026-12-01 10:00 UTC (analyzer_benchmark exited 1)",
                      block)

    def test_every_figure_of_a_suite_is_listed_even_when_only_one_was_recorded(self):
        block = R.render_perf(perf_doc())
        self.assertEqual(len(block.splitlines()), 2 + len(R.perf.FIGURES))


class RenderCompareTest(unittest.TestCase):
    def test_a_changed_value_gives_a_different_block(self):
        c = compare_doc()
        d = copy.deepcopy(c)
        d["speed"][0]["bw_s"] = 0.018
        self.assertNotEqual(R.render_speed(c), R.render_speed(d))
        self.assertIn("| 0.016 |", R.render_speed(c))

    def test_the_caption_names_command_date_commit_machine_and_load(self):
        cap = R.render_agreement(compare_doc()).splitlines()[0]
        for part in ("`BW_COMPARE_SCALE_MB=0 ops/bench/compare/run`", "2026-12-01 11:00–11:02 UTC",
                     "0123456", "2 × Intel Xeon Processor", "0.30–0.80", "without HTA's diagnostics"):
            self.assertIn(part, cap)

    def test_runs_without_scale_test_or_diagnostics_say_not_measured(self):
        c = compare_doc()
        self.assertTrue(R.render_scale(c).startswith("Not measured:"))
        self.assertTrue(R.render_differences(c).startswith("Not measured:"))
        for name, fn in R.RENDER.items():
            if name != "perf":
                self.assertTrue(fn(None).startswith("Not measured:"), name)

    def test_agreement_row(self):
        line = R.render_agreement(compare_doc()).splitlines()[-1]
        self.assertEqual(line, "| seed_sample.json | 130 / 45 / 85 (34.62 %) | equal | 85 (34.62 %) "
                               "| – | 85 vs 0 | 0 vs 85 |")


class CheckReadmeTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        self.perf, self.compare, self.readme = (os.path.join(d, n) for n in
                                                ("perf.json", "compare.json", "README.md"))
        with open(self.perf, "w") as f:
            json.dump(perf_doc(16.3e6), f)
        with open(self.compare, "w") as f:
            json.dump(compare_doc(), f)
        body = "# x\n\nprose stays\n\n" + "".join(
            f"{R.begin_marker(n)}\nstale\n{R.END}\n\nmore prose\n\n" for n in R.BLOCKS)
        with open(self.readme, "w") as f:
            f.write(body)

    def tearDown(self):
        self.dir.cleanup()

    def read(self):
        with open(self.readme) as f:
            return f.read()

    def run_readme(self, *extra):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = R.main(["--page", self.readme, "--perf", self.perf,
                         "--compare", self.compare] + list(extra))
        return rc, out.getvalue(), err.getvalue()

    def test_check_fails_on_stale_blocks_then_passes_after_rendering(self):
        self.assertEqual(self.run_readme("--check")[0], 1)
        self.assertEqual(self.run_readme()[0], 0)
        rc, out, _ = self.run_readme("--check")
        self.assertEqual((rc, out), (0, ""))
        text = self.read()
        self.assertIn("prose stays", text)
        self.assertEqual(text.count("more prose"), len(R.BLOCKS))

    def test_check_fails_on_a_hand_edited_number(self):
        self.run_readme()
        text = self.read()
        with open(self.readme, "w") as f:
            f.write(text.replace("**16.3 M events/s**", "**21.0 M events/s**"))
        rc, out, err = self.run_readme("--check")
        self.assertEqual(rc, 1)
        self.assertIn("-| analyzer, 10 M events | **21.0 M events/s**", out)
        self.assertIn("+| analyzer, 10 M events | **16.3 M events/s**", out)
        self.assertIn("never edit them by hand", err)

    def test_check_fails_when_the_results_change(self):
        self.run_readme()
        with open(self.perf, "w") as f:
            json.dump(perf_doc(17.4e6), f)
        self.assertEqual(self.run_readme("--check")[0], 1)

    def test_check_fails_on_a_missing_block(self):
        self.run_readme()
        text = self.read()
        start = text.index(R.begin_marker("compare-scale"))
        end = text.index(R.END, start) + len(R.END)
        with open(self.readme, "w") as f:
            f.write(text[:start] + text[end:])
        rc, _, err = self.run_readme("--check")
        self.assertEqual(rc, 1)
        self.assertIn("block compare-scale is missing", err)


class TwoPagesTest(unittest.TestCase):
    """The layout of docs/: the perf block in one page, the comparison blocks in another."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        self.perf, self.compare = os.path.join(d, "perf.json"), os.path.join(d, "compare.json")
        with open(self.perf, "w") as f:
            json.dump(perf_doc(16.3e6), f)
        with open(self.compare, "w") as f:
            json.dump(compare_doc(), f)
        self.pages = {"performance.md": ["perf"],
                      "comparison.md": [n for n in R.BLOCKS if n != "perf"]}
        for page, names in self.pages.items():
            with open(os.path.join(d, page), "w") as f:
                f.write("# " + page + "\n\n" + "".join(
                    f"{R.begin_marker(n)}\nstale\n{R.END}\n\nprose\n\n" for n in names))

    def tearDown(self):
        self.dir.cleanup()

    def run_readme(self, pages, *extra):
        args = ["--perf", self.perf, "--compare", self.compare]
        for page in pages:
            args += ["--page", os.path.join(self.dir.name, page)]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = R.main(args + list(extra))
        return rc, out.getvalue(), err.getvalue()

    def test_the_default_pages_are_those_of_docs(self):
        self.assertEqual(R.PAGES, ("docs/performance.md", "docs/comparison.md"))

    def test_blocks_split_over_two_pages_render_and_check(self):
        pages = list(self.pages)
        rc, out, _ = self.run_readme(pages, "--check")
        self.assertEqual(rc, 1)
        self.assertIn("performance.md (as committed)", out)
        self.assertIn("comparison.md (as committed)", out)
        self.assertEqual(self.run_readme(pages)[0], 0)
        self.assertEqual(self.run_readme(pages, "--check")[:2], (0, ""))
        with open(os.path.join(self.dir.name, "performance.md")) as f:
            self.assertIn("**16.3 M events/s**", f.read())

    def test_one_page_alone_misses_the_other_pages_blocks(self):
        rc, _, err = self.run_readme(["performance.md"], "--check")
        self.assertEqual(rc, 1)
        self.assertIn("block compare-agreement is missing", err)

    def test_a_block_in_two_pages_fails(self):
        with open(os.path.join(self.dir.name, "comparison.md"), "a") as f:
            f.write(f"{R.begin_marker('perf')}\nstale\n{R.END}\n")
        rc, _, err = self.run_readme(list(self.pages), "--check")
        self.assertEqual(rc, 1)
        self.assertIn("block perf appears 2 times", err)

    def test_a_missing_page_fails(self):
        rc, _, err = self.run_readme(list(self.pages) + ["nowhere.md"], "--check")
        self.assertEqual(rc, 1)
        self.assertIn("nowhere.md", err)


if __name__ == "__main__":
    unittest.main()
