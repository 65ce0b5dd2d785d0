"""The sample project's own tests are data for paritybot's tests, not part of paritybot's suite."""

collect_ignore = ["tree"]
