"""Loads the BehaviorTrace pytest plugin (options --estimator, --scale, --seeds, --scorecard, --bt-*)."""

pytest_plugins = ["fixtures.plugin"]
