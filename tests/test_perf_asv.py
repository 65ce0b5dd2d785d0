"""asv suites as asv users write them: comments in the config, params on methods and classes, skips
by NotImplementedError, a module that does not import named while the rest is compared."""

from __future__ import annotations

from test_perf_driver import make_plan, run_perf, write_tree

CONFIG = """\
{
    // The version of the config file format.  Do not change, unless
    // you know what you are doing.
    "version": 1,
    "project": "labelled",   // the project's name
    "repo": "https://example.org/labelled.git",  // a // inside a string stays
    "show_commit_url": "say \\"//\\" twice",
    "benchmark_dir": "asv_bench"  // where the benchmarks are
}
"""

SUITE = {
    "asv.conf.json": CONFIG,
    "asv_bench/__init__.py": "",
    "asv_bench/bench_methods.py": """\
class Sizes:
    params = [[10, 20]]
    param_names = ["n"]

    def setup(self, n):
        if n == 20:
            raise NotImplementedError  # asv's skip, for this combination only
        self.data = list(range(n))

    def time_sum(self, n):
        sum(self.data)


class Methods:
    def setup(self, *args):
        self.data = list(range(50))

    def time_own_params(self, kind):
        sorted(self.data, reverse=kind == "desc")

    time_own_params.params = ["asc", "desc"]
    time_own_params.param_names = ["kind"]

    def time_plain(self):
        len(self.data)
""",
    "asv_bench/bench_optional.py": "import not_installed_anywhere\n\n\ndef time_never():\n    pass\n",
}


async def test_an_asv_suite_as_asv_users_write_it_is_compared(tmp_path):
    write_tree(tmp_path / "base", SUITE)
    write_tree(tmp_path / "head", SUITE)

    report = await run_perf(tmp_path, make_plan([{"kind": "asv"}]))

    assert report.errors == []
    names = sorted(b.name for b in report.benchmarks)
    assert names == [
        "bench_methods.Methods.time_own_params('asc')",
        "bench_methods.Methods.time_own_params('desc')",
        "bench_methods.Methods.time_plain",
        "bench_methods.Sizes.time_sum(10)",
    ]
    for bench in report.benchmarks:
        assert bench.error is None, bench.error
    warnings = "\n".join(report.warnings)
    assert (
        "skipped by their own setup (NotImplementedError), not compared: bench_methods.Sizes.time_sum(20)"
        in warnings
    )
    assert "bench_optional could not be collected on either side, its benchmarks not compared: " in warnings
    assert "ModuleNotFoundError: No module named 'not_installed_anywhere'" in warnings


async def test_an_asv_config_that_does_not_read_is_named_for_its_side(tmp_path):
    write_tree(tmp_path / "base", SUITE)
    write_tree(tmp_path / "head", SUITE | {"asv.conf.json": '{"benchmark_dir": "asv_bench",,}'})

    report = await run_perf(tmp_path, make_plan([{"kind": "asv"}]))

    (error,) = report.errors
    assert (error.kind, error.side.value) == ("asv", "head")
    assert error.message.startswith("asv.conf.json is not JSON with // comments: Expecting property name")
    assert report.benchmarks == []
