"""asv suites in one side's benchmark process: discovery with asv's own naming, and the worker.

Standard library only, valid on Python 3.8. Injected as ``paritybot_perf_asv.py``; the driver
starts ``paritybot_perf_driver.py asv-worker DIR`` in each side's checkout, which runs
:func:`asv_worker` here.
"""

from __future__ import annotations

import json
import os
import sys

from paritybot_perf_worker import Channel, describe, foreign_imports, serve, timer


def strip_comments(text):
    """``text`` without its ``//`` comments, on lines of their own or after a value, as asv's own
    loader reads asv.conf.json; a ``//`` inside a string (a URL) stays."""
    out, i, in_string = [], 0, False
    while i < len(text):
        char = text[i]
        if in_string:
            out.append(text[i : i + 2] if char == "\\" else char)
            i += 2 if char == "\\" else 1
            in_string = char != '"'
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        else:
            in_string = char == '"'
            out.append(char)
            i += 1
    return "".join(out)


class ConfigError(Exception):
    """The asv configuration could not be read; the message names the file and why."""


def asv_benchmark_dir(config_path):
    try:
        with open(config_path, encoding="utf-8") as fh:
            config = json.loads(strip_comments(fh.read(1 << 20)))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{os.path.basename(config_path)} could not be read: {describe(exc)}") from None
    except ValueError as exc:
        raise ConfigError(f"{os.path.basename(config_path)} is not JSON with // comments: {exc}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{os.path.basename(config_path)} is not a JSON object")
    return os.path.join(os.path.dirname(config_path) or ".", str(config.get("benchmark_dir", "benchmarks")))


def _asv_modules(bench_dir, broken):
    """The suite's modules that import; the others go to ``broken`` (module → error), as asv skips
    a module that does not import and runs the rest."""
    import importlib
    import pkgutil

    parent, package = os.path.split(os.path.abspath(bench_dir))
    sys.path.insert(0, parent)
    pending = [package]
    while pending:
        name = pending.pop(0)
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            if name == package:
                raise
            broken[name.split(".", 1)[-1]] = describe(exc)
            continue
        yield module
        if getattr(module, "__path__", None):
            pending[:0] = [
                name for _, name, _ in pkgutil.iter_modules(module.__path__, module.__name__ + ".")
            ]


def _asv_params(owner):
    params = getattr(owner, "params", None)
    if params is None:
        return [()]
    if not params or not isinstance(params[0], (list, tuple)):
        params = [params]  # asv: a single list is one parameter
    combos: list = [()]
    for values in params:
        combos = [(*c, v) for c in combos for v in values]
    return combos


def asv_benchmarks(bench_dir, broken=None):
    """name → (owner, attribute name, params): asv's ``time_*`` benchmarks, named as asv names them;
    modules that do not import go to ``broken``."""
    import inspect

    found = {}
    for module in _asv_modules(bench_dir, {} if broken is None else broken):
        prefix = module.__name__.split(".", 1)[1:]
        for attr, value in list(vars(module).items()):
            if attr.startswith("_"):
                continue
            if inspect.isclass(value) and not inspect.isabstract(value):
                members = [(m, f) for m, f in inspect.getmembers(value) if inspect.isfunction(f)]
                base = [*prefix, value.__name__]
                owner = value
            elif inspect.isfunction(value):
                members, base, owner = [(attr, value)], prefix, module
            else:
                continue
            for member, func in members:
                if not member.startswith("time_") or getattr(func, "skip_benchmark", False):
                    continue
                name = ".".join([*base, member] if owner is value else [*base, attr])
                # asv: ``params`` on the method itself, else on its class (or the function's own).
                source = func if owner is module or getattr(func, "params", None) is not None else owner
                for combo in _asv_params(source):
                    label = name + ("({})".format(", ".join(repr(v) for v in combo)) if combo else "")
                    found[label] = (owner, member, combo)
    return found


def _asv_timed(owner, member, combo, caches):
    import inspect

    args = list(combo)
    if inspect.isclass(owner):
        instance = owner()
        setup_cache = getattr(instance, "setup_cache", None)
        if setup_cache is not None:
            if owner not in caches:
                caches[owner] = setup_cache()
            args.insert(0, caches[owner])
        target, holder = getattr(instance, member), instance
    else:
        target, holder = getattr(owner, member), owner
    setup = getattr(holder, "setup", None) if holder is not owner or inspect.isclass(owner) else None
    if not inspect.isclass(owner):
        setup = getattr(target, "setup", None) or getattr(owner, "setup", None)
    teardown = getattr(target, "teardown", None) or getattr(holder, "teardown", None)
    if setup is not None:
        setup(*args)
    number = getattr(target, "number", None) or getattr(holder, "number", 0) or None
    return timer(lambda: target(*args)), (lambda: teardown(*args)) if teardown else None, number


def asv_worker(bench_dir):
    channel = Channel()
    caches: dict = {}
    broken: dict = {}
    try:
        found = asv_benchmarks(bench_dir, broken)
    except Exception as exc:
        channel.send(ev="fatal", message="the asv suite did not import: " + describe(exc))
        return 1
    channel.send(ev="collected", names=sorted(found), foreign=foreign_imports(), broken=broken)
    for name in channel.receive().get("names", []):
        if name not in found:
            channel.send(ev="error", name=name, message="no such benchmark on this side")
        else:
            try:
                owner, member, combo = found[name]
                timed, teardown, number = _asv_timed(owner, member, combo, caches)
                try:
                    serve(channel, name, timed, number)
                finally:
                    if teardown is not None:
                        teardown()
            except NotImplementedError:
                # asv's way to skip a benchmark (or one combination of its parameters): not an error.
                channel.send(ev="skipped", name=name)
            except Exception as exc:
                channel.send(ev="error", name=name, message=describe(exc))
        channel.send(ev="done", name=name)
    return 0
