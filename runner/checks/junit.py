"""Parse pytest's JUnit XML report into per-test outcomes keyed by exact pytest node ids.

Node ids: JUnit's ``classname``/``name`` pair is derived from the node id lossily (the path's ``/``
become ``.``, the ``.py`` is dropped, classes and module are joined with ``.``), so it cannot be
mapped back in general: a directory may contain dots, a class and a module look alike. The test step
therefore injects a plugin (:mod:`runner.checks.pytest_plugin`) that records each test's node id as a JUnit
property, which is exact for classes, nested directories and parametrize brackets alike. Only for
entries without that property (collection errors, reports from other tools) do we fall back to the
``file`` attribute of ``junit_family=xunit1`` plus the class path, which is exact whenever the test is
defined in the file it was collected from.

The report is written by the code under test, so it is untrusted: the standard library parser does
not resolve external entities, and its bundled expat (2.4.1 and later) refuses entity expansion
bombs; a malformed report raises :class:`JUnitError` rather than losing results silently. Its size
is capped where it is read back (:data:`runner.checks.testexec.JUNIT_MAX_BYTES`), and it is parsed as a
stream, each test case dropped from the tree once read, with at most :data:`MAX_CASES` of them: a
report of millions of empty ``<testcase/>`` elements is an error, not gigabytes of memory.
"""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import cast

from pydantic import BaseModel, ConfigDict

from bot.core.models import TestOutcome

# Written by the plugin injected into every run (runner/checks/pytest_plugin.py).
NODEID_PROPERTY = "paritybot.nodeid"

# A selection of GPU tests is thousands of cases; even a large suite run whole is well under this.
MAX_CASES = 100_000
_FEED_CHARS = 1 << 20
# pytest's messages for collection problems (see _pytest/junitxml.py).
_COLLECTION_MESSAGES = {"collection failure", "collection skipped"}
MAX_MESSAGE_LINES = 15
# The most of one failure's traceback a report keeps (the run page shows it whole up to this).
TRACEBACK_MAX = 20_000
_ERROR_LINE = re.compile(r"^E(\s+|$)")
_LOCATION_LINE = re.compile(r"^\S[^:\s]*:\d+: \S")


class JUnitError(ValueError):
    """The JUnit report could not be read."""


class JUnitCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodeid: str
    outcome: TestOutcome
    duration_s: float = 0.0
    message: str = ""
    traceback: str = ""  # the whole of pytest's report of the failure, up to TRACEBACK_MAX characters
    collection_error: bool = False
    line: int | None = None  # the test's definition line (1-based), as pytest's report names it


def parse_junit(xml_text: str, max_cases: int = MAX_CASES) -> list[JUnitCase]:
    """Every ``<testcase>`` of the report, in report order, one entry per node id.

    Raises:
        JUnitError: the report is not valid XML, or it holds more than ``max_cases`` test cases.
    """
    cases: dict[str, JUnitCase] = {}
    for seen, element in enumerate(_testcases(xml_text), 1):
        if seen > max_cases:
            raise JUnitError(
                f"the JUnit report has more than {max_cases:,} test cases, more than paritybot reads"
            )
        case = _parse_case(element)
        previous = cases.get(case.nodeid)
        # The same id twice (a plugin reporting a rerun, parallel workers): the worse outcome stays.
        if previous is None or _severity(case.outcome) > _severity(previous.outcome):
            cases[case.nodeid] = case
    return list(cases.values())


def _testcases(xml_text: str) -> Iterator[ET.Element]:
    """Each complete ``<testcase>`` element, removed from the tree once the caller has read it."""
    parser: ET.XMLPullParser = ET.XMLPullParser(events=("start", "end"))
    open_elements: list[ET.Element] = []
    pieces = (xml_text[at : at + _FEED_CHARS] for at in range(0, len(xml_text), _FEED_CHARS))
    try:
        for piece in itertools.chain(pieces, [None]):
            if piece is None:
                parser.close()
            else:
                parser.feed(piece)
            # Only start and end events were asked for: each carries an element.
            for event, element in cast(Iterator[tuple[str, ET.Element]], parser.read_events()):
                if event == "start":
                    open_elements.append(element)
                    continue
                open_elements.pop()
                if element.tag == "testcase":
                    yield element
                    if open_elements:  # a test case that just ended is its parent's last child
                        del open_elements[-1][-1]
    except ET.ParseError as exc:
        raise JUnitError(f"the JUnit report is not valid XML: {exc}") from None


def _severity(outcome: TestOutcome) -> int:
    order = [
        TestOutcome.SKIPPED,
        TestOutcome.PASSED,
        TestOutcome.FLAKY,
        TestOutcome.ERROR,
        TestOutcome.FAILED,
    ]
    return order.index(outcome)


def _parse_case(element: ET.Element) -> JUnitCase:
    nodeid = _property(element, NODEID_PROPERTY) or nodeid_from_attrs(
        element.get("classname", ""), element.get("name", ""), element.get("file")
    )
    duration = _float(element.get("time"))
    failure = element.find("failure")
    error = element.find("error")
    skipped = element.find("skipped")
    if failure is not None:
        outcome, detail = TestOutcome.FAILED, failure
    elif error is not None:
        outcome, detail = TestOutcome.ERROR, error
    elif skipped is not None:
        outcome, detail = TestOutcome.SKIPPED, skipped
    else:
        return JUnitCase(nodeid=nodeid, outcome=TestOutcome.PASSED, duration_s=duration)
    attr = detail.get("message", "")
    own_file = nodeid.split("::", 1)[0]
    return JUnitCase(
        nodeid=nodeid,
        outcome=outcome,
        duration_s=duration,
        message=summarize_failure(attr, detail.text or "", own_file=own_file),
        traceback=whole_traceback(detail.text or attr) if outcome != TestOutcome.SKIPPED else "",
        collection_error=outcome == TestOutcome.ERROR and attr in _COLLECTION_MESSAGES,
        line=_definition_line(element.get("line")),
    )


def whole_traceback(text: str, limit: int = TRACEBACK_MAX) -> str:
    """pytest's whole report of a failure for the run page; a huge one keeps its head and its
    tail, where the error is, with the cut said."""
    text = text.strip("\n")
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… {len(text) - 2 * half} characters cut …\n{text[-half:]}"


def _definition_line(text: str | None) -> int | None:
    """pytest writes the test's line 0-based; None when it wrote none."""
    return int(text) + 1 if text and text.isdigit() else None


def _property(element: ET.Element, name: str) -> str | None:
    for prop in element.iter("property"):
        if prop.get("name") == name:
            return prop.get("value")
    return None


def _float(text: str | None) -> float:
    try:
        return max(0.0, float(text)) if text else 0.0
    except ValueError:
        return 0.0


def nodeid_from_attrs(classname: str, name: str, file: str | None) -> str:
    """Rebuild a node id from xunit1 attributes (see the module docstring for when this is exact)."""
    if not file:
        # Nothing better to go on: pytest built classname from the path with "/" → ".".
        return "::".join(p for p in (classname, name) if p)
    module = file.removesuffix(".py").replace("/", ".")
    if not classname:
        # A collection error: pytest names it after the collector, i.e. the file itself.
        return file if name in (module, "") else f"{file}::{name}"
    if classname == module:
        return f"{file}::{name}"
    if classname.startswith(module + "."):
        classes = classname[len(module) + 1 :].split(".")
        return "::".join([file, *classes, name])
    # The test function lives in another file than the one it was collected from (an inherited
    # test method); its class path is all we can keep.
    return "::".join([file, classname.rsplit(".", 1)[-1], name])


def summarize_failure(
    message: str, text: str, max_lines: int = MAX_MESSAGE_LINES, *, own_file: str | None = None
) -> str:
    """The first lines a reader needs: the error message, pytest's ``E`` lines and the location.

    Falls back to the tail of the traceback when it has no ``E`` lines (``--tb=native``, crashes).
    With ``own_file`` (the test's file), the test's own last frame is kept too when the error was
    raised elsewhere (in the library): that is the line a failure is annotated at.
    """
    lines = [line for line in message.strip().splitlines() if line.strip()]
    body = text.rstrip().splitlines()
    picked = [line for line in body if _ERROR_LINE.match(line)]
    location = next((line for line in reversed(body) if _LOCATION_LINE.match(line)), None)
    if not picked:
        picked = body[-max_lines:]
    elif location:
        picked.append(location)
    own = _own_frame(body, own_file) if own_file else None
    if own is not None and own not in picked:
        picked.insert(len(picked) - 1 if location in picked else len(picked), own)
    seen = {_bare(line) for line in lines}
    for line in picked:
        # pytest repeats the message as ``E`` lines; say it once.
        if _bare(line) and _bare(line) not in seen:
            lines.append(line)
            seen.add(_bare(line))
    if len(lines) > max_lines:
        lines = [*lines[: max_lines - 1], f"… {len(lines) - max_lines + 1} more lines"]
    return "\n".join(lines)


def _own_frame(body: list[str], own_file: str) -> str | None:
    """The last frame of the traceback in the test's own file, as ``path:LINE``."""
    pytest_form = re.compile(rf"^(?:\S*/)?{re.escape(own_file)}:(\d+):")
    native_form = re.compile(rf'File "(?:[^"]*/)?{re.escape(own_file)}", line (\d+)')
    for line in reversed(body):
        m = pytest_form.match(line.strip()) or native_form.search(line)
        if m:
            return f"{own_file}:{m[1]}"
    return None


def _bare(line: str) -> str:
    return _ERROR_LINE.sub("", line, count=1).strip()
