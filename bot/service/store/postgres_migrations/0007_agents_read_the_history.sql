-- Agents answer "already failing on the base" from the default branch's record and "known flaky"
-- from other changes' runs, as one machine does: they read the tests' history (never write it;
-- the service's publisher records each finished run). Still nothing of pulls, deliveries or
-- approvals.
GRANT SELECT ON test_runs, test_outcomes TO paritybot_agent;
