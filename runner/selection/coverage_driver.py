"""The script the coverage-map step injects into the run, and the names of its coverage contexts.

It runs in the repository's own environment (a container without paritybot), so it is
self-contained text: it starts coverage before pytest imports anything of the project, switches the
context at each test, at each wider fixture's setup and, while a module body runs during
collection, at each of its top-level statements, and writes the map as JSON that
:mod:`runner.selection.coverage_map` parses.
"""

from __future__ import annotations

MAP_FORMAT = "paritybot-coverage-map/3"
IMPORT_CONTEXT = "import:"  # a test module's own import
BUILT_CONTEXT = "built:"  # a top-level statement of a project module being imported: ``path:line``
FIXTURE_CONTEXT = "fixture:"  # the setup of a fixture wider than a test

DRIVER = """\
\"\"\"Run pytest under coverage.py with one context per test; write file -> line -> tests as JSON.\"\"\"
import ast, builtins, importlib, importlib.util, json, os, re, sys, types

import coverage
import pytest

OUT, DATA, PATHS = sys.argv[1], sys.argv[2], sys.argv[3]
ROOT = os.getcwd()
SCRATCH = os.path.dirname(os.path.abspath(OUT))
IMPORT = "@IMPORT@"
BUILT = "@BUILT@"
FIXTURE = "@FIXTURE@"
# The configured test roots that exist; none means pytest's own configuration decides.
ARGS = [p for p in PATHS.split(":") if p and os.path.exists(p)] + sys.argv[4:]
cov = coverage.Coverage(data_file=DATA, config_file=False, branch=False)
cov.start()


def rel(path):
    return os.path.relpath(str(path), ROOT).replace(os.sep, "/")


def project_file(path):
    path = os.path.abspath(path)
    return path.startswith(ROOT + os.sep) and not path.startswith(SCRATCH + os.sep)


def leading_imports(path):
    \"\"\"Modules a test module imports before any other statement of its own.\"\"\"
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return []
    names = []
    for stmt in tree.body:
        body = stmt.body if isinstance(stmt, ast.Try) else [stmt]
        if isinstance(stmt, ast.Expr) and isinstance(getattr(stmt, "value", None), ast.Constant):
            continue
        if not all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in body):
            break
        for s in body:
            if isinstance(s, ast.Import):
                names.extend(a.name for a in s.names)
            elif s.level == 0 and s.module and s.module != "__future__":
                names.append(s.module)
                names.extend(f"{s.module}.{a.name}" for a in s.names if a.name != "*")
    return names


class Origins:
    \"\"\"While pytest imports and collects: which module body's top-level statement is running.

    A profile hook follows the module bodies being executed (a stack of frames). At each call,
    the coverage context names the innermost project module body and the line its top-level
    statement is at, so a line of the project run while a helper or the package is imported is
    recorded with the statement that ran it (``built:tests/helpers.py:12``), and what a test
    module's own statements run with that module (``import:tests/test_x.py``).
    \"\"\"

    def __init__(self):
        self.stack = []  # (module body frame, its file relative to ROOT or None)
        self.context = ""
        self.collecting = None  # the test module pytest is importing now
        self.kinds = {}
        self.seen = [None, 0]  # the module frame and line the context was last set for
        self.watching = False
        self.profile = self.hook()
        self.real_exec = builtins.exec

    def watch(self):
        \"\"\"Turn the hook on while a module body runs, and only then: it costs time at every call,
        and pytest's own work while it collects (rewriting asserts, generating items) is most of
        the calls. Every import runs a module's code object through ``exec``.\"\"\"
        real_exec = self.real_exec

        def exec_watched(source, *args, **kwargs):
            if self.watching or not isinstance(source, types.CodeType) or source.co_name != "<module>":
                return real_exec(source, *args, **kwargs)
            self.watching = True
            sys.setprofile(self.profile)
            try:
                return real_exec(source, *args, **kwargs)
            finally:
                sys.setprofile(None)
                self.watching = False
                self.stack.clear()
                self.switch("")

        builtins.exec = exec_watched

    def stop(self):
        builtins.exec = self.real_exec
        sys.setprofile(None)
        self.switch("")

    def kind(self, filename):
        if filename not in self.kinds:
            self.kinds[filename] = rel(filename) if project_file(filename) else None
        return self.kinds[filename]

    def switch(self, context):
        self.seen[0] = None
        if context != self.context:
            self.context = context
            cov.switch_context(context)

    def top(self):
        if not self.stack:
            return ""
        frame, path = self.stack[-1]
        if path is None:
            return ""  # a third-party module's body: who uses what it builds is unknown
        if path == self.collecting:
            return IMPORT + path
        return f"{BUILT}{path}:{frame.f_lineno}"

    def hook(self):
        \"\"\"The profile function; it runs at every call while pytest collects, so it is kept lean.\"\"\"
        stack, seen, kind, switch, top = self.stack, self.seen, self.kind, self.switch, self.top

        def profile(frame, event, arg):
            if event == "call":
                code = frame.f_code
                if code.co_name == "<module>" and code.co_filename[:1] != "<":
                    path = kind(code.co_filename)
                    stack.append((frame, path))
                    # The module's own top-level lines are its structure, attributed by the selection.
                    switch(IMPORT + path if path is not None and path == self.collecting else "")
                elif stack:
                    module = stack[-1][0]
                    if module is not seen[0] or module.f_lineno != seen[1]:
                        switch(top())
                        seen[0], seen[1] = module, module.f_lineno
            elif event == "return" and stack and stack[-1][0] is frame:
                stack.pop()
                switch(top())

        return profile


class MapPlugin:
    def __init__(self):
        self.collected = 0
        self.ran = set()
        self.items = {}
        self.errors = []
        self.fixture_users = {}  # fixture name -> tests whose fixture closure has it
        self.current = ""  # the test running now
        self.building = []  # contexts of the wider fixtures being set up (one may need another)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector):
        if type(collector) is not pytest.Module:
            yield
            return
        # Import what the module imports first, so that what its own module-level code runs
        # afterwards is what gets recorded with it.
        here = os.path.dirname(str(collector.path))
        sys.path.insert(0, here)
        try:
            for name in leading_imports(str(collector.path)):
                try:
                    importlib.import_module(name)
                except BaseException as exc:  # noqa: BLE001 - pytest reports the real import error
                    if isinstance(exc, KeyboardInterrupt):
                        raise
        finally:
            sys.path.remove(here)
        origins.collecting = rel(collector.path)
        try:
            yield
        finally:
            origins.collecting = None

    def pytest_collectreport(self, report):
        if report.failed:
            lines = str(report.longrepr).strip().splitlines()
            message = next((ln for ln in reversed(lines) if ln.strip() and not ln.startswith("_")), "")
            message = message[1:] if message.startswith("E ") else message  # pytest's error marker
            if any(e["path"] == (report.nodeid or "") for e in self.errors):
                return  # the same module again, collected as doctests too (--doctest-modules)
            self.errors.append({"path": report.nodeid or "", "message": message.strip()[:300]})

    def pytest_collection_finish(self, session):
        self.collected = len(session.items)
        self.items = {item.nodeid: item.nodeid.split("::")[0] for item in session.items}
        for item in session.items:
            for fixture in getattr(item, "fixturenames", ()):
                self.fixture_users.setdefault(fixture, []).append(item.nodeid)

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtestloop(self, session):
        origins.stop()  # imports are over: tests run under their own contexts
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.ran.add(item.nodeid)
        self.current = item.nodeid
        cov.switch_context(item.nodeid)
        yield
        self.current = ""
        cov.switch_context("")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        # What a fixture wider than one test builds is used by every test that requests it, not
        # only by the first one, during whose setup it happens to run.
        if fixturedef.scope == "function" or not self.current:
            yield
            return
        users = self.fixture_users.setdefault(fixturedef.argname, [])
        if self.current not in users:
            users.append(self.current)  # asked for by name (request.getfixturevalue)
        self.building.append(FIXTURE + fixturedef.argname)
        cov.switch_context(self.building[-1])
        try:
            yield
        finally:
            self.building.pop()
            cov.switch_context(self.building[-1] if self.building else self.current)


# Plugins that would record coverage themselves, or run the tests in other processes, take the
# tests away from this process's coverage: the map would be empty. Turned off, and said so.
# With PYTEST_DISABLE_PLUGIN_AUTOLOAD an installed plugin loads only where `-p` names it; its
# options would otherwise be "unrecognized arguments".
def will_load(name):
    if importlib.util.find_spec(name) is None:
        return False
    if not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return True
    named = [*sys.argv[4:], os.environ.get("PYTEST_ADDOPTS", ""), os.environ.get("PYTEST_PLUGINS", "")]
    for ini in ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"):
        try:
            with open(ini, encoding="utf-8", errors="replace") as f:
                named.append(f.read())
        except OSError:
            pass
    plugins = os.environ.get("PYTEST_PLUGINS", "").replace(" ", "").split(",")
    return name in plugins or re.search(r"-p\\s*" + re.escape(name) + r"\\b", " ".join(named)) is not None


TURNED_OFF = []
if will_load("pytest_cov"):
    ARGS += ["--no-cov"]
    TURNED_OFF.append("pytest-cov (--no-cov)")
if will_load("xdist"):
    ARGS += ["-n", "0", "--dist", "no"]
    TURNED_OFF.append("pytest-xdist (-n 0)")

plugin = MapPlugin()
origins = Origins()
origins.watch()
try:
    code = pytest.main(ARGS, plugins=[plugin])
finally:
    origins.stop()
    cov.stop()
    cov.save()
data = cov.get_data()
tests, index, files, import_lines, imported_by = [], {}, {}, {}, {}
built_by, fixture_lines = {}, {}


def test_index(nodeid):
    if nodeid not in index:
        index[nodeid] = len(tests)
        tests.append(nodeid)
    return index[nodeid]


for path in sorted(data.measured_files()):
    if not project_file(path):
        continue
    relpath = rel(path)
    for line, contexts in sorted((data.contexts_by_lineno(path) or {}).items()):
        origins_here, unknown = [], False
        for ctx in contexts:
            if ctx.startswith(IMPORT):
                module = ctx[len(IMPORT):]
                # A test module's own lines are its structure (the edited-tests signal's business).
                if module != relpath:
                    imported_by.setdefault(relpath, {}).setdefault(line, []).append(module)
                    continue
                ctx = ""
            if ctx.startswith(BUILT):
                origins_here.append(ctx[len(BUILT):])
                continue
            if ctx.startswith(FIXTURE):
                fixture_lines.setdefault(relpath, {}).setdefault(line, []).append(ctx[len(FIXTURE):])
                continue
            if not ctx:
                unknown = True
                continue
            files.setdefault(relpath, {}).setdefault(line, []).append(test_index(ctx))
        if origins_here or unknown:
            import_lines.setdefault(relpath, []).append(line)
        if origins_here and not unknown:  # every run of it at import time has a known origin
            built_by.setdefault(relpath, {})[line] = sorted(set(origins_here))
used = {f for by_line in fixture_lines.values() for names in by_line.values() for f in names}
fixture_users = {f: sorted(test_index(t) for t in plugin.fixture_users.get(f, ())) for f in sorted(used)}
not_run = sorted({f for n, f in plugin.items.items() if n not in plugin.ran})
health = {
    "tests_collected": plugin.collected,
    "tests_ran": len(plugin.ran),
    "collection_errors": plugin.errors,
    "not_run": not_run,
    "exit_code": int(code),
    "turned_off": TURNED_OFF,
}
doc = {"format": "@FORMAT@", "tests": tests, "files": files, "import_lines": import_lines,
       "imported_by": imported_by, "built_by": built_by, "fixture_lines": fixture_lines,
       "fixture_users": fixture_users, "health": health}
with open(OUT, "w") as f:
    json.dump(doc, f)
sys.exit(int(code))
"""
DRIVER = (
    DRIVER.replace("@FORMAT@", MAP_FORMAT)
    .replace("@IMPORT@", IMPORT_CONTEXT)
    .replace("@BUILT@", BUILT_CONTEXT)
    .replace("@FIXTURE@", FIXTURE_CONTEXT)
)
