"""The scenario suite: what upstream's tests downloaded, fetched through the cache instead."""
