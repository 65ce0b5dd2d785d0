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


def _strip_comments(text):
    # asv.conf.json allows // comments on their own lines.
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def asv_benchmark_dir(config_path):
    with open(config_path, encoding="utf-8") as fh:
        config = json.loads(_strip_comments(fh.read()))
    return os.path.join(os.path.dirname(config_path) or ".", config.get("benchmark_dir", "benchmarks"))


def _asv_modules(bench_dir):
    import importlib
    import pkgutil

    parent, package = os.path.split(os.path.abspath(bench_dir))
    sys.path.insert(0, parent)
    pending = [package]
    while pending:
        module = importlib.import_module(pending.pop(0))
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


def asv_benchmarks(bench_dir):
    """name → (owner, attribute name, params): asv's ``time_*`` benchmarks, named as asv names them."""
    import inspect

    found = {}
    for module in _asv_modules(bench_dir):
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
                source = func if owner is module else owner
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
    try:
        found = asv_benchmarks(bench_dir)
    except Exception as exc:
        channel.send(ev="fatal", message="the asv suite did not import: " + describe(exc))
        return 1
    channel.send(ev="collected", names=sorted(found), foreign=foreign_imports())
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
                channel.send(ev="error", name=name, message="skipped: setup raised NotImplementedError")
            except Exception as exc:
                channel.send(ev="error", name=name, message=describe(exc))
        channel.send(ev="done", name=name)
    return 0
