"""Prometheus metrics (`/metrics`): what an operator alerts on.

Counted as it happens, in this process: webhook deliveries by what became of them, GitHub API
requests by answer, the rate budget GitHub's answers report, and — when a finished run is published
— its wait in the queue and its duration, per environment. Read from the store at each scrape, the
same for every replica: jobs by state, stored deliveries by status, queue depths, agents, and the
reconciler's lag (how long the oldest finished run has waited to be shown on GitHub).

Each service has a registry of its own (never the process-wide default), so that tests can run
several in one process. Every metric is named in :data:`METRIC_NAMES`; the Grafana dashboard in
deploy/ is checked against it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from bot.service.store.protocol import Store
from bot.service.store.records import Job

# Seconds: a run waits from none to hours for a GPU; it lasts from seconds to an hour or more.
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
DURATION_BUCKETS = (10, 30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 5400, 7200)

METRIC_NAMES = frozenset(
    {
        "paritybot_deliveries_total",
        "paritybot_deliveries_stored",
        "paritybot_jobs",
        "paritybot_queue_depth",
        "paritybot_queue_oldest_seconds",
        "paritybot_agents",
        "paritybot_queue_wait_seconds",
        "paritybot_run_duration_seconds",
        "paritybot_github_requests_total",
        "paritybot_github_rate_limit_remaining",
        "paritybot_github_rate_limit_limit",
        "paritybot_reconciler_lag_seconds",
    }
)
"""The names a query uses (a counter's `_total`, a histogram's base name: `_bucket`, `_sum`,
`_count` follow from it)."""


class Metrics:
    """This service's metrics, in a registry of its own (:attr:`registry`)."""

    def __init__(self, store: Store | None = None, clock: Callable[[], float] = time.time):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.deliveries = Counter(
            "paritybot_deliveries",
            "Webhook deliveries answered by this process, by outcome: accepted (new, committed), "
            "redelivered (known id), refused (400, 401, 413, 415), unrecorded (503: the store failed), "
            "abandoned (the body never arrived: 408, or the sender hung up)",
            ["outcome"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "paritybot_queue_wait_seconds",
            "Time a published run waited in its queue before it started",
            ["environment"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.run_duration = Histogram(
            "paritybot_run_duration_seconds",
            "Time a published run ran, from its start to its end",
            ["environment"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.github_requests = Counter(
            "paritybot_github_requests",
            "Requests to GitHub's API by the App, by method and answer (a status, or 'error': no answer)",
            ["method", "status"],
            registry=r,
        )
        self.rate_remaining = Gauge(
            "paritybot_github_rate_limit_remaining",
            "Requests left in the App's current rate-limit window, as GitHub's last answer said",
            ["resource"],
            registry=r,
        )
        self.rate_limit = Gauge(
            "paritybot_github_rate_limit_limit",
            "The size of the App's rate-limit window, as GitHub's last answer said",
            ["resource"],
            registry=r,
        )
        if store is not None:
            r.register(StoreCollector(store, clock))

    def github_response(self, method: str, status: int | None, headers: Mapping[str, str]) -> None:
        self.github_requests.labels(method.upper(), "error" if status is None else str(status)).inc()
        remaining, limit = headers.get("x-ratelimit-remaining"), headers.get("x-ratelimit-limit")
        resource = headers.get("x-ratelimit-resource") or "core"
        if remaining is not None and remaining.isdigit():
            self.rate_remaining.labels(resource).set(int(remaining))
        if limit is not None and limit.isdigit():
            self.rate_limit.labels(resource).set(int(limit))

    def run_published(self, job: Job) -> None:
        """A finished run is on GitHub: its wait and its duration (a run that never started has none)."""
        if job.started_at is None:
            return
        self.queue_wait.labels(job.environment).observe(
            max(0.0, (job.started_at - job.created_at).total_seconds())
        )
        if job.finished_at is not None:
            seconds = (job.finished_at - job.started_at).total_seconds()
            self.run_duration.labels(job.environment).observe(max(0.0, seconds))


class StoreCollector(Collector):
    """What the store holds, read at each scrape (in the scrape's thread)."""

    def __init__(self, store: Store, clock: Callable[[], float]):
        self._store = store
        self._clock = clock

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # described by collecting: the store is not asked when the collector is registered

    def collect(self) -> Iterator[GaugeMetricFamily]:
        view = self._store.overview(recent=0)
        now = self._clock()
        jobs = GaugeMetricFamily("paritybot_jobs", "Jobs in the store by state", labels=["state"])
        for state, n in sorted(view.jobs_by_state.items()):
            jobs.add_metric([state], n)
        yield jobs
        stored = GaugeMetricFamily(
            "paritybot_deliveries_stored",
            "Deliveries in the store by status: received (its handlers have not finished), dispatched, failed",
            labels=["status"],
        )
        for status, n in sorted(view.deliveries_by_status.items()):
            stored.add_metric([status], n)
        yield stored
        depth = GaugeMetricFamily("paritybot_queue_depth", "Jobs waiting, by queue", labels=["queue"])
        oldest = GaugeMetricFamily(
            "paritybot_queue_oldest_seconds", "Age of the oldest job waiting, by queue", labels=["queue"]
        )
        for q in view.queues:
            depth.add_metric([q.queue], q.depth)
            if q.oldest is not None:
                oldest.add_metric([q.queue], max(0.0, now - q.oldest.timestamp()))
        yield depth
        yield oldest
        agents = GaugeMetricFamily("paritybot_agents", "Hosts running jobs, by state", labels=["state"])
        for state in ("alive", "lost"):
            agents.add_metric([state], sum(1 for a in view.agents if a.state == state))
        yield agents
        lag = 0.0 if view.oldest_due is None else max(0.0, now - view.oldest_due.timestamp())
        yield GaugeMetricFamily(
            "paritybot_reconciler_lag_seconds",
            "How long the oldest finished run has waited to be shown on GitHub (0: none waits)",
            value=lag,
        )
