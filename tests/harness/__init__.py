"""Tests of the test harness itself: the pytest plugin, cold and warm runs, and sharding."""
